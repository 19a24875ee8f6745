// Package actors runs one protoactor-go actor per (queue, partition). The
// actor's mailbox serialises that partition's pushes; requests that wait while
// a commit is in flight are fused into the next commit (one transaction, one
// segment); in-request and in-batch repeats follow the leader/follower rule of
// SPEC.md §3; the hash cache's watermark (SPEC.md §8) is computed here.
// Commits go through Store, an interface declared here in the kernel's types
// (queen.PushBatch, queen.PushOutcome), so this package knows no SQL driver.
//
// Pending work is bounded per partition and per host: overload is answered at
// once with queen.ErrOverloaded, never by growing memory. Pops are not served
// here: package consume coordinates them.
package actors

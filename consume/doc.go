// Package consume coordinates the pops of one broker (SPEC.md §4): the
// Coordinator keeps a hint of the partitions per queue and consumer group
// that may hold work, tries a few of them for a wildcard pop (PostgreSQL's
// candidates when the hint runs dry), parks long polls until a push or a
// retry ack wakes their queue, and wakes other brokers' polls through
// Options.OnAvailable. It holds no state that matters for correctness:
// every pop and ack is decided by persistence under the consumer row lock,
// reached through Store, an interface declared here in the kernel's types
// (queen.PopSpec, queen.PopState), so this package knows no SQL driver.
//
// What it decides on its own (which partitions a pop tries and in what
// order, when it asks for candidates, how polls park and wake) is tested
// against storetest.MemStore, which the shared store suite holds to
// PostgreSQL's answers.
package consume

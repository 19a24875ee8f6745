// Package wire is the broker's JSON wire format (SPEC.md §3–§6, §9–§11,
// §13), what both sides speak: the NATS subjects and headers (SubjectPush,
// ..., ShardPushSubject), the decoding and validation of every request body
// and query (push, configure, pop, ack, seek, lease extension, transaction,
// peek, the dedup inspector, DLQ replay, trace events, the dedup cache's
// switch) into the domain values of package queen, the reply shapes (push,
// transaction and configure replies, lease, DLQ, replay, queues, seek,
// trace, /health while starting and serving, stats, whoami) and the one decoder of
// an error reply (DecodeError). The values of package queen that a reply
// carries as they are (options, pop results, the cluster view, ...) name
// their JSON fields there. The front door (package transport) and the Go
// client (package transport/client) both import it and never each other;
// it does no I/O.
//
// The push decoder and the push-reply encoder are the hot path: they scan
// without reflection and allocate per request, not per field (see the
// benchmarks).
package wire

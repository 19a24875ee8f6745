// Package wire is the broker's JSON wire format (SPEC.md §3–§6, §10, §13):
// the decoding and validation of every request body and query (push,
// configure, pop, ack, seek, lease extension, transaction, peek, the dedup
// inspector, DLQ replay) into the domain values of package queen, and the
// encoding of the replies the transports send (push replies, transaction
// replies). Both transports (HTTP and NATS) and the Go client use it; it does
// no I/O.
//
// The push decoder and the push-reply encoder are the hot path: they scan
// without reflection and allocate per request, not per field (see the
// benchmarks).
package wire

// Package queen holds the domain types every layer of the broker shares: queue
// and partition names, push items and their verdicts, queue options, hashes of
// transaction ids, the store protocol the actors and the pop coordinator speak
// to the store (store.go), the rules that decide (the text, item and payload
// validators, text.go) and the registry of API errors (SPEC.md §3, §6, §10).
//
// It imports no transport, actor or database code and does no I/O, so
// anything may import it. Its types name their JSON fields where they are
// a JSON shape as they are: in replies (the error body, options, queue
// listings and details, pop and ack results, peeks, the dedup inspection,
// dead letters, the cluster view, the build), in the push item's encoding,
// and in the store's options column; so the JSON shape of those values is
// defined here, once.
// Everything else of the wire format lives in transport/wire: the subjects
// and headers, the decoding and validation of every request body and query,
// the encoding of push replies and the reply envelopes of every route; the
// Prometheus metrics live in metrics.
package queen

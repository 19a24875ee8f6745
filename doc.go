// Package queen holds the domain types every layer of the broker shares: queue
// and partition names, push items and their verdicts, queue options, hashes of
// transaction ids, the store protocol the actors and the pop coordinator speak
// to the store (store.go), and the registry of API errors (SPEC.md §3, §6,
// §10).
//
// It imports no transport, actor or database code, so anything may import it;
// it holds no wire format either: the JSON decoding of requests and encoding
// of replies live in transport/wire, the Prometheus metrics in metrics.
package queen

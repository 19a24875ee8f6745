// Package produce is the load harness's producers: sync producers (Producer:
// batches of Config.Batch items, one request in flight, through a
// target.Sender) and async ones (Async: single items through the Go
// client's client.Producer), both repeating recent transactionIds and
// retrying failed items under the same id inside the dedup window (SPEC.md
// §6, §12), booking every send and answer in a Ledger for the audit, and
// counting into the run's Counters (with the push latency, a report.Histogram).
//
// It has a Config of its own, whose Load loadtest.Config embeds, and imports
// only the harness's leaves (txnid, report, clientstats, target): the
// audit's Ledger and DirtySet come in through interfaces of its own.
package produce

// Package audit is the load harness's database audit (SPEC.md §12): every
// transactionId answered queued or duplicate is stored exactly once, under
// the message id its answers carried, and nothing else is stored.
//
// Each producer books its sends and answers in its Ledger (4 bits per
// transactionId plus the ids still awaited); the producers mark the
// partitions answers came back for in a DirtySet; the Auditor reads the
// stored frames incrementally during the run (Start: the marked partitions
// and a rotating slice of the others) and checks everything at the end
// (Finish), into a report.AuditReport.
//
// It imports the harness's leaves (txnid, report) and persistence's
// read-only Audit; the producers (loadtest/produce) import it, the run
// (loadtest) wires it.
package audit

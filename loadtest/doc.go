// Package loadtest is the load harness behind `queen loadtest`: producers over NATS, HTTP or raw COPY, the run report, and the post-run database audit (SPEC.md §12).
//
// Its kernel is loadtest/txnid: the transactionId scheme the producers
// send and the audits read back, and the poison rule the consumers fail
// and the consume audit counts.
package loadtest

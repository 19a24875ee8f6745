// Package loadtest is the load harness behind `queen loadtest` (SPEC.md §12): the run that wires producers over NATS, HTTP or raw COPY, consumers, faults and the audits, and reports what it found.
//
// Its leaves, which it imports and which import nothing of it:
//   - loadtest/txnid, the kernel: the transactionId scheme the producers
//     send and the audits read back, and the poison rule the consumers
//     fail and the consume audit counts;
//   - loadtest/report, what a run found (Report and its sections), as JSON
//     and as text;
//   - loadtest/clientstats, what the clients saw over time, recorded by
//     producers and consumers and read by the chaos report;
//   - loadtest/target, how the clients reach a broker (the producers'
//     senders, the consumers' client, the brokers' /metrics);
//   - loadtest/offheap, memory mapped outside the Go heap for the audits'
//     per-message records.
//
// Its rooms, which import only those leaves:
//   - loadtest/chaos, the faults and the cluster of broker processes they
//     hit (StartCluster), with its own chaos.Config;
//   - loadtest/audit, the database audit: the producers' ledgers, the
//     partitions marked dirty, the incremental Auditor;
//   - loadtest/produce, the producers (sync and async, with its own
//     produce.Config), which book into an audit.Ledger and mark the
//     audit's DirtySet through interfaces of their own, and the run's
//     Counters;
//   - loadtest/consumers, the consume phase (consumer groups, the drain,
//     the wake probe) and the end-to-end consume audit, with its own
//     consumers.Config.
//
// Beside report, loadtest/htmlreport renders Reports as one self-contained
// HTML page (the settings, the summary, the timeline's charts with the
// faults marked, several runs overlaid); it imports only loadtest/report and
// the chart library, and cmd/queen uses it (--report, queen loadtest report).
//
// This package keeps the run (Run, Compare and the Config that embeds each
// room's settings: produce.Load, consumers.Consumption and chaos.Faults),
// the timeline, the storage figures and the progress line.
package loadtest

// Package loadtest is the load harness behind `queen loadtest`: producers over NATS, HTTP or raw COPY, the run report, and the post-run database audit (SPEC.md §12).
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
//     senders, the consumers' client, the brokers' /metrics).
//
// Its rooms, which import only those leaves:
//   - loadtest/chaos, the faults and the cluster of broker processes they
//     hit (StartCluster), with its own chaos.Config;
//   - loadtest/audit, the database audit: the producers' ledgers, the
//     partitions marked dirty, the incremental Auditor;
//   - loadtest/produce, the producers (sync and async, with its own
//     produce.Config), which book into an audit.Ledger through an
//     interface of their own, and the run's Counters.
//
// The consumers and the consume audit are still in this package, with
// the timeline, the storage figures and the progress line; Run wires
// them and the rooms, filling each room's config from Config.
package loadtest

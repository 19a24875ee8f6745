// Package consumers is the load harness's consume phase (SPEC.md §4, §12):
// Groups consumer groups of Consumers consumers long-polling the run's
// queue (Phase), failing the poison messages (txnid.IsPoison) as their fail
// mode says, recording every delivery and ack answer in their group's
// record; the drain that waits for every cursor to reach the end; the wake
// probe; and the end-to-end consume audit (Auditor), which reads those
// records against the stored messages, the dead letters and the cursors,
// and the consume report.
//
// It has a Config of its own, whose Consumption loadtest.Config embeds,
// and imports only the harness's leaves (txnid, report, clientstats,
// target) and persistence's read-only audit types.
package consumers

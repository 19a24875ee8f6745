// Package report is the load harness's report: what a run found, as JSON
// (the field names are a contract: `queen loadtest --json` users and the
// tests parse them) and as text for people. Report is one run with its
// audit (AuditReport), its consume phase (ConsumeReport, with
// ConsumeAudit, PoisonReport and WakeReport), its cluster and chaos
// sections (ClusterReport, ChaosReport, FaultReport) and its timeline
// (TimelinePoint, SustainedRatio); Comparison is `--compare`'s rounds.
// It also names the values of the report's enumerated fields (Mode, the
// producer modes, the fault kinds, the audits' Issue* finding kinds) and
// holds Findings, the counter of findings both audits fill. A leaf of the
// harness: it imports no other harness package and does no I/O beyond the
// writer it is given.
package report

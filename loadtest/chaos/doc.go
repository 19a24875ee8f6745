// Package chaos is the load harness's faults and the cluster it hits:
// StartCluster runs broker processes of this binary with their managed
// PostgreSQL (and a standby) and NATS (one server in process, or a cluster
// of node processes); Start, during a run, watches the cluster's shard
// ownership and injects the faults of a Config (kill, stop, pg-restart,
// pg-failover, nats-kill, mixed), then Finish reports them
// (report.ClusterReport, report.ChaosReport) with what the clients saw
// around each (clientstats). It imports the harness's leaves only.
package chaos

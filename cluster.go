package queen

import "time"

// ClusterView is the cluster as PostgreSQL records it (SPEC.md §9): the
// brokers with their heartbeats and every shard's lease. It is the body of
// GET /api/v1/cluster and of the NATS endpoint queen.v1.cluster. Times are
// PostgreSQL's clock; Now is that clock when the view was read.
type ClusterView struct {
	// Self is the id of the broker that answered.
	Self string `json:"self"`
	// ShardCount is the cluster's fixed shard count.
	ShardCount int `json:"shardCount"`
	// LeaseSeconds is the answering broker's QUEEN_SHARD_LEASE.
	LeaseSeconds float64       `json:"leaseSeconds"`
	Now          time.Time     `json:"now"`
	Brokers      []ClusterNode `json:"brokers"`
	Shards       []ShardLease  `json:"shards"`
}

// ClusterNode is one broker of the cluster.
type ClusterNode struct {
	ID      string `json:"id"`
	HTTPURL string `json:"httpUrl"`
	// StartedAt is the broker's first heartbeat; HeartbeatAt its latest.
	StartedAt   time.Time `json:"startedAt"`
	HeartbeatAt time.Time `json:"heartbeatAt"`
	// ExpiresAt is when the broker stops counting as live unless it
	// heartbeats again.
	ExpiresAt time.Time `json:"expiresAt"`
	Live      bool      `json:"live"`
	// Shards is how many shards it holds live leases on.
	Shards int `json:"shards"`
	// Build is what the broker advertises of its binary (JSON: release,
	// revision, schema, layout, beside the fields above).
	Build
}

// Build names a broker's binary (SPEC.md §2): `queen --version` prints it,
// the broker logs it at start, and /health and the cluster view carry it.
// The zero value is what a broker that predates the version guard (release
// 0.2.0) reads as in the cluster view.
type Build struct {
	// Release is the release, e.g. "0.2.0"; "" for a broker before 0.2.0.
	Release string `json:"release"`
	// Revision is the VCS revision the binary was built from, "+dirty" when
	// it had local changes, "unknown" when the build recorded none; "" for
	// a broker before 0.2.0.
	Revision string `json:"revision"`
	// Schema is the binary's schema version, the newest migration it embeds
	// (persistence.SchemaVersion); 0 for a broker before 0.2.0.
	Schema int `json:"schema"`
	// Layout is the storage layout generation the binary reads and writes
	// (persistence.LayoutGeneration; 0 for a broker before 0.2.0). A layout
	// migration of a higher generation is refused while a live broker
	// advertises a lower one.
	Layout int `json:"layout"`
}

// ShardLease is one shard's lease. Owner is "" when the shard is free; Live
// is false once ExpiresAt has passed (the owner stopped renewing).
type ShardLease struct {
	Shard      int        `json:"shard"`
	Owner      string     `json:"owner"`
	AcquiredAt *time.Time `json:"acquiredAt"`
	ExpiresAt  time.Time  `json:"expiresAt"`
	Live       bool       `json:"live"`
}

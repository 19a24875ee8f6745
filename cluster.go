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

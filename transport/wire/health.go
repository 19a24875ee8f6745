package wire

import (
	"time"

	queen "github.com/queen-mq/queen-go"
)

// The reply bodies about the broker itself (README, HTTP API): GET /health
// while it starts and once it serves, and the console's GET /api/v1/stats.

// StartingReply is GET /health while the broker starts (503, with
// Retry-After): Status "starting", the Phase its start is in ("nats",
// "postgres", "migrating", "opening", "actors", "shards", "front-doors"),
// then the broker's build.
type StartingReply struct {
	Status string `json:"status"`
	Phase  string `json:"phase"`
	queen.Build
}

// HealthReply is GET /health once the broker serves: the Status
// ("healthy", "degraded" or "unhealthy"), the Database ("ok" or "down"),
// the NATS connections ("ok", else their state in lower case, such as
// "reconnecting"; absent where the broker reports none) and the database's
// disk (Storage: "ok" or "full"; absent likewise), Error with the failed
// ping of an unhealthy broker, then the broker's build (release, revision,
// schema, layout) whatever the status, and the dedup cache's and the
// partition actors' figures when the broker reports them.
type HealthReply struct {
	Status   string `json:"status"`
	Database string `json:"database"`
	NATS     string `json:"nats,omitempty"`
	Storage  string `json:"storage,omitempty"`
	Error    string `json:"error,omitempty"`
	queen.Build
	DedupCache any `json:"dedupCache,omitempty"`
	Partitions any `json:"partitions,omitempty"`
}

// StatsReply is the body of GET /api/v1/stats: live rates and gauges read
// from the broker's Prometheus registry (the ones the console's overview
// draws).
type StatsReply struct {
	// At is when the registry was read.
	At time.Time `json:"at"`
	// WindowSeconds is the time the rates are averaged over: from the
	// oldest sample the broker kept within its stats window (5 s) to now (0
	// on the first call).
	WindowSeconds float64 `json:"windowSeconds"`
	// Push items answered per second, by verdict (queen_push_items_total):
	// queued, duplicate, and failed (every other verdict).
	QueuedPerSecond    float64 `json:"queuedPerSecond"`
	DuplicatePerSecond float64 `json:"duplicatePerSecond"`
	FailedPerSecond    float64 `json:"failedPerSecond"`
	// PopPerSecond is messages returned by pops per second; AckPerSecond ack
	// items per second, AckedPerSecond those answered acked
	// (queen_ack_items_total{result="acked"}).
	PopPerSecond   float64 `json:"popPerSecond"`
	AckPerSecond   float64 `json:"ackPerSecond"`
	AckedPerSecond float64 `json:"ackedPerSecond"`
	// CommitP50Ms and CommitP99Ms are the 50th and 99th percentiles of one
	// push transaction's latency over the window (queen_push_commit_seconds,
	// the upper bound of the bucket holding the percentile), milliseconds;
	// null when no push committed in the window.
	CommitP50Ms *float64 `json:"commitP50Ms"`
	CommitP99Ms *float64 `json:"commitP99Ms"`
	// Totals since the broker started.
	Queued    int64 `json:"queued"`
	Duplicate int64 `json:"duplicate"`
	Failed    int64 `json:"failed"`
	// RSSBytes is process_resident_memory_bytes (0 where the OS gives none).
	RSSBytes int64 `json:"rssBytes"`
	// CacheBytes is queen_dedup_cache_bytes, the dedup cache's memory.
	CacheBytes int64 `json:"cacheBytes"`
	// MailboxDepth is queen_mailbox_depth_items.
	MailboxDepth int64 `json:"mailboxDepth"`
	// WALBytesPerMessage and DatabaseBytesPerMessage are what the
	// database's WAL position (queen_storage_wal_bytes) and size
	// (queen_storage_database_bytes) grew by per message this broker stored
	// between the storage gauges' oldest read in the last minute of stats
	// calls and their latest (they are read every 10 s); null until two
	// reads with messages stored between them, and the database's null when
	// it shrank (retention dropped more than was written). In a cluster the
	// WAL and the database hold every broker's writes.
	WALBytesPerMessage      *float64 `json:"walBytesPerMessage"`
	DatabaseBytesPerMessage *float64 `json:"databaseBytesPerMessage"`
	// DatabaseBytes is queen_storage_database_bytes (0 before its first read).
	DatabaseBytes int64 `json:"databaseBytes"`
}

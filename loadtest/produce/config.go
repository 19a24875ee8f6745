package produce

import "time"

// Config is the producers' share of a run (loadtest.Config fills it): what
// they send, how often they try, and the async producer's tuning. Every
// field is set; loadtest.Config's Validate checks the ranges.
type Config struct {
	// Queue is the queue pushed to.
	Queue string
	// Batch is the items per sync request (1..10000).
	Batch int
	// PayloadBytes is each item's JSON payload size in bytes (at least 0;
	// the smallest payload is about 40 bytes).
	PayloadBytes int
	// DupRatio is the fraction of items that re-send a recent
	// transactionId (0..1).
	DupRatio float64
	// MaxAttempts bounds the sends of one item (1..255).
	MaxAttempts int
	// RequestTimeout bounds one request; a timed-out request's items are
	// retried with the same transactionIds.
	RequestTimeout time.Duration
	// Sequential: each producer walks the partitions in order from its own
	// start (txnid.PartIn); otherwise items spread at random.
	Sequential bool
	// Window is the queue's dedup window (SPEC.md §6): an id is sent again
	// (a repeat or a retry) only while its original is younger than half
	// of it, so a second queued answer is a violation, never the window
	// closing.
	Window time.Duration

	// Linger, MaxBatch and InFlight are the async producers'
	// client.ProducerOptions Linger (negative: none), MaxBatchItems and
	// BufferItems.
	Linger   time.Duration
	MaxBatch int
	InFlight int
}

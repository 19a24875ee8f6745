package produce

import "time"

// Config is the producers' share of a run: their Load, which
// loadtest.Config embeds (the flags of queen loadtest set it), and what the
// run derives for them. Every field is set; loadtest.Config's Validate
// checks the ranges.
type Config struct {
	Load
	// Queue is the queue pushed to.
	Queue string
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
}

// Load is what each producer sends and how: the fields of loadtest.Config
// that are the producers' own (it embeds Load), and of their Config.
type Load struct {
	// Batch is the number of items per request (default 100, 1..10000). With
	// loadtest.Config's ProducerMode async it is the async producer's
	// MaxBatchItems unless MaxBatch is set, and 1 means single items
	// batched up to 100.
	Batch int
	// PayloadBytes is the size of each item's JSON payload in bytes (default
	// 200, at least 0; the smallest payload is about 40 bytes).
	PayloadBytes int
	// DupRatio is the fraction of items that re-send a transactionId already
	// sent to the same partition, like a producer retrying after a timeout
	// (default 0.1, 0..1).
	DupRatio float64
	// MaxAttempts bounds the sends of one item answered failed (or lost with
	// its request) before the producer gives up on it (default 8, 1..255).
	MaxAttempts int

	// Linger, MaxBatch and InFlight are the async producers'
	// client.ProducerOptions Linger, MaxBatchItems and BufferItems.
	//
	// Linger: how long an item waits for others to share its request
	// (default 5 ms; negative: none).
	Linger time.Duration
	// MaxBatch: the most items per request (1..10000; 0 in loadtest.Config:
	// Batch when above 1, else 100, resolved in the producers' Config).
	MaxBatch int
	// InFlight: each async producer's outstanding items at most, published
	// and not yet resolved (default 1000, 1..1,000,000).
	InFlight int
}

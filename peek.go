package queen

import (
	"encoding/json"
	"time"
)

// Peek limits (GET /api/v1/queues/{queue}/messages, queen.v1.peek).
const (
	// DefaultPeekLimit is how many messages a peek returns when it does not
	// say.
	DefaultPeekLimit = 50
	// MaxPeekLimit is the most messages one peek returns.
	MaxPeekLimit = 1000
)

// PeekQuery is a validated peek: the stored messages of one partition with
// offsets above After, in offset order, at most Limit. A peek reads only: it
// takes no lease, moves no cursor and writes nothing.
type PeekQuery struct {
	Queue string `json:"queue"`
	// Partition defaults to DefaultPartition, as in a push (SPEC.md §1).
	Partition string `json:"partition"`
	// After is an offset: messages above it are returned. Default -1 (from
	// the oldest stored message); at least -1.
	After int64 `json:"after"`
	// Limit is 1 to MaxPeekLimit; default DefaultPeekLimit.
	Limit int `json:"limit"`
}

// PeekMessage is one stored message as a peek shows it. Times are
// PostgreSQL's (its segment's created_at).
type PeekMessage struct {
	Partition     string          `json:"partition"`
	Offset        int64           `json:"offset"`
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	TraceID       *string         `json:"traceId"`
	CreatedAt     time.Time       `json:"createdAt"`
	Data          json.RawMessage `json:"data"`
	// ProducerSub is the message's producer identity, as
	// Message.ProducerSub (left out when it has none).
	ProducerSub *string `json:"producerSub,omitempty"`
}

// PeekResult is the answer of a peek.
type PeekResult struct {
	Queue       string `json:"queue"`
	Partition   string `json:"partition"`
	PartitionID string `json:"partitionId"`
	// LastOffset is the partition's last allocated offset (-1 when it has
	// none) when the peek read it: the messages above the last one returned
	// and up to LastOffset are stored and a later peek shows them (unless
	// retention removes them first).
	LastOffset int64 `json:"lastOffset"`
	// Messages are in offset order; empty (never null) when none is stored
	// above After. Offsets may skip values that retention has removed.
	Messages []PeekMessage `json:"messages"`
}

// QueueDetail is a queue's partitions and its consumer groups' cursors
// (GET /api/v1/queues/{queue}, queen.v1.queue.detail): what the console's
// queue page and `queen tail` show. Partitions are listed by name, at most
// MaxDetailPartitions; cursors by group then partition, at most
// MaxDetailCursors.
type QueueDetail struct {
	Queue string `json:"queue"`
	// PartitionCount counts every partition of the queue (Partitions may
	// hold fewer).
	PartitionCount int64             `json:"partitionCount"`
	Partitions     []PartitionDetail `json:"partitions"`
	// ConsumerGroups are the groups that have popped the queue, with one
	// cursor per partition they have popped (a partition a group has not
	// popped yet has no cursor: where it starts depends on its
	// subscription, SPEC.md §4).
	ConsumerGroups []GroupDetail `json:"consumerGroups"`
	// Truncated: some partitions or cursors were left out.
	Truncated bool `json:"truncated"`
}

// Bounds of QueueDetail.
const (
	MaxDetailPartitions = 1000
	MaxDetailCursors    = 10000
)

// PartitionDetail is one partition of a QueueDetail.
type PartitionDetail struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	// LastOffset is the last allocated offset, -1 before the first message;
	// LastOffset+1 messages were ever stored in it (SPEC.md §1).
	LastOffset int64     `json:"lastOffset"`
	CreatedAt  time.Time `json:"createdAt"`
}

// GroupDetail is one consumer group of a QueueDetail.
type GroupDetail struct {
	ConsumerGroup string `json:"consumerGroup"`
	// Lag is the sum of the cursors' lags.
	Lag     int64         `json:"lag"`
	Cursors []GroupCursor `json:"cursors"`
}

// GroupCursor is a consumer group's cursor in one partition (SPEC.md §1):
// Cursor is the last committed offset (-1 before the first commit), Lag the
// messages above it (LastOffset - Cursor, retained or not). LeaseExpiresAt
// is set while a consumer holds a live lease on the span above the cursor.
type GroupCursor struct {
	Partition      string     `json:"partition"`
	Cursor         int64      `json:"cursor"`
	LastOffset     int64      `json:"lastOffset"`
	Lag            int64      `json:"lag"`
	LeaseExpiresAt *time.Time `json:"leaseExpiresAt"`
}

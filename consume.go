package queen

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// DefaultConsumerGroup is the consumer group of a pop or ack that names none
// (SPEC.md §4): "queue mode", one group shared by every plain consumer.
const DefaultConsumerGroup = "__QUEUE_MODE__"

// Pop limits.
const (
	// DefaultPopTimeout is a long poll's timeout when the request names none (SPEC.md §4).
	DefaultPopTimeout = 30 * time.Second
	// MaxPopReplyBytes bounds the payload bytes of one pop reply (a pop
	// returns fewer messages than its batch rather than exceed it; the first
	// message is always returned): 16 MiB less room for the envelope, so a
	// reply fits the embedded NATS server's max_payload (SPEC.md §11).
	MaxPopReplyBytes = MaxBodyBytes - 64<<10
	// MaxDLQReplyBytes bounds the frames and error texts of one page of the
	// DLQ listing (GET /api/v1/dlq; docs/contract.md §4): a page stops
	// early rather than exceed it (its first dead letter is always
	// returned), and says so (wire.DeadLettersReply.Truncated).
	MaxDLQReplyBytes = 4 << 20
)

// PopRequest is a validated pop (SPEC.md §4).
type PopRequest struct {
	// Queue is the queue to pop; empty with Namespace and/or Task: any
	// queue carrying those labels (SPEC.md §6).
	Queue     string
	Namespace string
	Task      string
	// Partition is empty for a pop from any partition of the queue.
	Partition string
	// Batch is the most messages returned, 1 to wire.MaxPopBatch (default 1).
	Batch int
	// Wait makes the pop a long poll of up to Timeout.
	Wait    bool
	Timeout time.Duration
	// ConsumerGroup defaults to DefaultConsumerGroup.
	ConsumerGroup string
	// AutoAck commits the cursor past the returned messages at once (no lease).
	AutoAck bool
	// SubscriptionFrom, when set, is where a group that meets a partition for
	// the first time starts: the first message stored at or after it.
	// subscriptionMode "new" (or subscriptionFrom "now") sets it to the
	// moment of the group's first pop of the queue. Nil: from the oldest
	// stored message. A group's subscription point is fixed by its first pop
	// of the queue; later requests do not move it (seek does).
	SubscriptionFrom *time.Time
	// SubscriptionNew is subscriptionMode "new", "new-only" or "now", or
	// subscriptionFrom "now": start at the group's first pop. Any other
	// subscriptionMode ("all", upstream SDKs' "from_beginning", ...) means
	// from the oldest stored message, upstream's rule; a subscriptionFrom
	// time wins over any mode.
	SubscriptionNew bool
	// Partitions is the most partitions one pop of any partition may claim
	// (query "partitions", upstream Queen's v4 multi-partition pop), default
	// 1, at most wire.MaxPopPartitions (100): a larger or negative value is
	// refused with 400 invalid_field naming "partitions". Batch stays the cap on all messages
	// returned; every claimed partition is leased under one leaseId, and
	// every message carries its own partition, partitionId and leaseId. A
	// pop of one named partition ignores it.
	Partitions int
}

// Message is one popped message, field names as the Queen wire format (SPEC.md §4).
type Message struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	TraceID       *string         `json:"traceId"`
	Data          json.RawMessage `json:"data"`
	CreatedAt     time.Time       `json:"createdAt"`
	PartitionID   string          `json:"partitionId"`
	Partition     string          `json:"partition"`
	Queue         string          `json:"queue"`
	Offset        int64           `json:"offset"`
	LeaseID       *string         `json:"leaseId"`
	ConsumerGroup string          `json:"consumerGroup"`
	// RetryCount is how many times this message failed before this delivery.
	RetryCount int `json:"retryCount"`
	// ProducerSub is the producer's identity stored with the message
	// (SPEC.md §14): the "sub" of the JWT that pushed it; nil (the field
	// left out) when it was pushed with JWT off.
	ProducerSub *string `json:"producerSub,omitempty"`
}

// PopResult is a pop's answer: no messages means HTTP 204.
type PopResult struct {
	Messages []Message `json:"messages"`
	// LeaseID is the lease on the returned span (nil with autoAck); a
	// multi-partition pop leases every claimed partition under it. Queue,
	// Partition and PartitionID name the first claimed partition.
	LeaseID        *string    `json:"leaseId"`
	LeaseExpiresAt *time.Time `json:"leaseExpiresAt,omitempty"`
	Queue          string     `json:"queue,omitempty"`
	Partition      string     `json:"partition,omitempty"`
	PartitionID    string     `json:"partitionId,omitempty"`
	ConsumerGroup  string     `json:"consumerGroup,omitempty"`
	// PartitionsClaimed is how many partitions the messages come from.
	PartitionsClaimed int `json:"partitionsClaimed,omitempty"`
}

// AckStatus is what an ack says of a message (SPEC.md §4).
type AckStatus string

// The ack statuses; "success" is accepted as an alias of completed.
const (
	AckCompleted AckStatus = "completed"
	AckFailed    AckStatus = "failed"
	AckDLQ       AckStatus = "dlq"
	AckRetry     AckStatus = "retry"
)

// AckOutcome is the machine-readable result of one ack item (SPEC.md §4).
type AckOutcome string

// The ack outcomes.
const (
	// Acked: the cursor is at or past the message.
	Acked AckOutcome = "acked"
	// Unresolvable: the transactionId is not in the sidecar (never pushed to
	// that partition, or aged out), or the offset was never allocated.
	Unresolvable AckOutcome = "unresolvable"
	// Stale: at or below the cursor already; nothing changed.
	Stale AckOutcome = "stale"
	// LeaseInvalid: the leaseId is not the partition's live lease for the group.
	LeaseInvalid AckOutcome = "lease_invalid"
	// RetryScheduled: the message will be delivered again.
	RetryScheduled AckOutcome = "retry_scheduled"
	// DeadLettered: the message was copied to the DLQ and the cursor moved past it.
	DeadLettered AckOutcome = "dead_lettered"
)

// AckItem is one validated ack: a message addressed by TransactionID or by
// Offset, in PartitionID, for ConsumerGroup.
type AckItem struct {
	TransactionID string
	// Hash is HashTxn(TransactionID) when TransactionID is set.
	Hash        Hash
	PartitionID uuid.UUID
	// Offset is >= 0 when the ack addresses the message by offset; -1 otherwise.
	Offset        int64
	LeaseID       *uuid.UUID
	Status        AckStatus
	Error         string
	ConsumerGroup string
}

// AckResult is the answer for one ack item, in request order.
type AckResult struct {
	Index int `json:"index"`
	// Success is the Queen-compatible flag: the ack did what it asked.
	Success       bool       `json:"success"`
	Result        AckOutcome `json:"result"`
	TransactionID string     `json:"transactionId,omitempty"`
	PartitionID   string     `json:"partitionId"`
	// Offset is the resolved offset, when known.
	Offset *int64 `json:"offset,omitempty"`
	// Cursor is the group's cursor after the call.
	Cursor *int64 `json:"cursor,omitempty"`
	Error  string `json:"error,omitempty"`
}

// DeadLetter is one DLQ row (SPEC.md §2).
type DeadLetter struct {
	ID            int64           `json:"id"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	PartitionID   string          `json:"partitionId"`
	ConsumerGroup string          `json:"consumerGroup"`
	Offset        int64           `json:"offset"`
	MessageID     string          `json:"messageId"`
	TransactionID string          `json:"transactionId"`
	TraceID       *string         `json:"traceId"`
	Data          json.RawMessage `json:"data"`
	Error         string          `json:"error"`
	Attempts      int             `json:"attempts"`
	CreatedAt     time.Time       `json:"createdAt"`
	DeadAt        time.Time       `json:"deadLetteredAt"`
	// ErrorMessage repeats Error, and RetryCount is Attempts - 1 (the
	// deliveries after the first), under the names upstream Queen SDKs read.
	ErrorMessage string `json:"errorMessage"`
	RetryCount   int    `json:"retryCount"`
	// ProducerSub is the dead-lettered message's producer identity, as
	// Message.ProducerSub; a replay pushes the message back with it.
	ProducerSub *string `json:"producerSub,omitempty"`
}

// DLQFilter selects dead letters: by queue, group and partition name ("" =
// any), dead-lettered in [From, To] when set; Limit rows from row Offset.
type DLQFilter struct {
	Queue, ConsumerGroup, Partition string
	From, To                        *time.Time
	Limit, Offset                   int
	// MaxBytes bounds the frames and error texts returned (the first dead
	// letter is always returned); <= 0 means MaxDLQReplyBytes.
	MaxBytes int
}

// SeekRequest moves a consumer group's cursors on one queue: to the end, to
// the beginning, or to just before the first message stored at or after
// Timestamp.
type SeekRequest struct {
	ToEnd       bool
	ToBeginning bool
	Timestamp   *time.Time
}

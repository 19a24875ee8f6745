package wire

import (
	"strconv"
	"time"

	"github.com/queen-mq/queen-go"
)

// DedupQuery is a validated inspector request: which transactionId in which
// partition (SPEC.md §13). Hash is HashTxn(TransactionID).
type DedupQuery struct {
	Queue         string     `json:"queue"`
	Partition     string     `json:"partition"`
	TransactionID string     `json:"transactionId"`
	Hash          queen.Hash `json:"-"`
}

// ReplayRequest is a validated DLQ replay (POST /api/v1/dlq/replay,
// queen.v1.dlq.replay, SPEC.md §13): the dead letters of Queue (and of
// ConsumerGroup, "" = any group) named by IDs, or, when IDs is empty, those
// the filter selects: Partition ("" = any), dead-lettered within [From, To]
// (nil = open), at most Limit, oldest first.
type ReplayRequest struct {
	Queue, ConsumerGroup string
	IDs                  []int64
	Partition            string
	From, To             *time.Time
	Limit                int
}

// Replay limits: the ids of one request, and the filter's default and
// largest limit.
const (
	MaxReplayIDs       = 10000
	DefaultReplayLimit = 100
)

// ReplayOutcome is what replaying one dead letter did (SPEC.md §13).
type ReplayOutcome string

// The replay outcomes (SPEC.md §13).
const (
	// Moved: pushed back onto its partition (queued) and the dead letter removed.
	Moved ReplayOutcome = "moved"
	// ReplayDuplicate: the replay's transactionId (ReplayTransactionID) is
	// already in the partition's window: nothing pushed, the dead letter kept.
	ReplayDuplicate ReplayOutcome = "duplicate"
	// Gone: no such dead letter (in that queue and group).
	Gone ReplayOutcome = "gone"
	// ReplayFailed: the push's outcome is not known (SPEC.md §3 failed), or
	// the dead letter could not be removed after it; replaying it again is
	// safe (the transactionId is deterministic).
	ReplayFailed ReplayOutcome = "failed"
)

// ReplayResult is one dead letter's outcome, in the order of the request's
// ids (or of the filter's dead letters, oldest first).
type ReplayResult struct {
	ID     int64         `json:"id"`
	Result ReplayOutcome `json:"result"`
	// Queue, Partition and TransactionID (dlq:<id>) say where the replay
	// went; MessageID is the new message's (moved) or the earlier replay's
	// (duplicate; ZeroUUID when its segment is gone). Empty for gone.
	Queue         string `json:"queue,omitempty"`
	Partition     string `json:"partition,omitempty"`
	TransactionID string `json:"transactionId,omitempty"`
	MessageID     string `json:"messageId,omitempty"`
	// Offset is the new message's offset (moved).
	Offset *int64 `json:"offset,omitempty"`
	// Error and Code explain failed (Code from the error registry).
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
}

// ReplayTransactionID is the deterministic transactionId a replayed dead
// letter is pushed under, so a second replay is a duplicate (SPEC.md §13).
func ReplayTransactionID(deadLetterID int64) string {
	return "dlq:" + strconv.FormatInt(deadLetterID, 10)
}

package queen

import (
	"encoding/binary"
	"encoding/json"

	"github.com/google/uuid"
	"github.com/zeebo/xxh3"
)

// DefaultPartition is the partition an item goes to when it names none (SPEC.md §1).
const DefaultPartition = "Default"

// ZeroUUID is the "original unknown" message id of a duplicate whose original
// segment is gone (SPEC.md §3).
var ZeroUUID = uuid.UUID{}

// Hash is the dedup key of a transaction id: XXH3-128 of its UTF-8 bytes (after
// JSON unescaping), 16 bytes big-endian (SPEC.md §2).
type Hash [16]byte

// HashTxn returns the Hash of a transaction id.
func HashTxn(transactionID string) Hash {
	v := xxh3.HashString128(transactionID)
	var h Hash
	binary.BigEndian.PutUint64(h[0:8], v.Hi)
	binary.BigEndian.PutUint64(h[8:16], v.Lo)
	return h
}

// Item is one validated push item (SPEC.md §3). Payload is raw JSON, never
// empty ("{}" when the client sent none).
type Item struct {
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	TransactionID string          `json:"transactionId"`
	TraceID       *string         `json:"traceId,omitempty"`
	Payload       json.RawMessage `json:"payload"`
	// Hash is HashTxn(TransactionID); not sent on the wire.
	Hash Hash `json:"-"`
	// ProducerSub is the producer's identity (SPEC.md §14): with JWT on,
	// the "sub" of the token that pushed the item, set by the front door
	// from the verified token (and carried to a shard's owner in the hop's
	// header), never from the request body; "" with JWT off. Every item of
	// one request has the same. Not decoded from the wire. The store keeps
	// it once per segment (segments.producer_sub; a commit
	// fusing requests of several producers writes one segment per run of
	// the same producer), and pops, peeks and the DLQ show it as the
	// message's producerSub.
	ProducerSub string `json:"-"`
}

// Verdict is the outcome of one push item (SPEC.md §3).
type Verdict string

// The verdicts of SPEC.md §3.
const (
	// Queued: the item is committed as a new message.
	Queued Verdict = "queued"
	// Duplicate: nothing was written; MessageID is the original's (or ZeroUUID).
	Duplicate Verdict = "duplicate"
	// Failed: not known to be written; retry with the same transaction id.
	Failed Verdict = "failed"
)

// Result is the verdict of one item. It is the broker-internal form; the wire
// form is PushReply.
type Result struct {
	Verdict     Verdict
	MessageID   uuid.UUID
	PartitionID uuid.UUID
	// Offset of the stored message (Queued) or of the original (Duplicate, -1
	// when unknown). Not on the Queen wire.
	Offset int64
	// Err is set with Verdict Failed.
	Err *Error
	// PayloadMismatch is set on a Duplicate whose payload bytes differ from
	// the original's, when the queue's dedupCheckPayload is on and the
	// original is still stored (SPEC.md §6).
	PayloadMismatch bool
}

// FailedResult is the Failed verdict of an item whose outcome is not known
// (SPEC.md §3): Offset -1, err the registry error the client sees (code and
// message), partitionID the partition's id when known (the zero UUID
// otherwise, written as "" on the wire).
func FailedResult(partitionID uuid.UUID, err *Error) Result {
	return Result{Verdict: Failed, PartitionID: partitionID, Offset: -1, Err: err}
}

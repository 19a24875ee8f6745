package queen

import (
	"fmt"
	"net/url"
	"strconv"
	"time"
	"unicode/utf8"
)

// DedupState is the dedup inspector's verdict on one transactionId in one
// partition (SPEC.md §13).
type DedupState string

// The inspector's states (SPEC.md §13).
const (
	// InWindow: the next push of the id is answered duplicate, naming
	// MessageID, until WindowClosesAt.
	InWindow DedupState = "in_window"
	// Expired: the sidecar still holds the id, but its window has closed
	// (or the queue's window is 0): the next push is queued as a new message.
	Expired DedupState = "expired"
	// Unknown: the sidecar does not hold the id (never pushed there, or
	// purged by retention): the next push is queued.
	Unknown DedupState = "unknown"
)

// DedupInspection is the answer of GET /api/v1/dedup and queen.v1.dedup
// (SPEC.md §13). Times are PostgreSQL's. For Unknown, MessageID, Offset,
// CreatedAt and WindowClosesAt are null.
type DedupInspection struct {
	State DedupState `json:"state"`
	// MessageID is the original's id, as a duplicate push would name it:
	// ZeroUUID when its segment is gone (retention).
	MessageID *string `json:"messageId"`
	// Offset is the original's offset in the partition.
	Offset *int64 `json:"offset"`
	// CreatedAt is when the original was committed (its segment's created_at).
	CreatedAt *time.Time `json:"createdAt"`
	// WindowSeconds is the queue's dedupWindowSeconds, read from its row at
	// the probe (0: no check).
	WindowSeconds int64 `json:"windowSeconds"`
	// WindowClosesAt is CreatedAt + WindowSeconds: the id is a duplicate
	// until then, and a new message after (in the past for Expired).
	WindowClosesAt *time.Time `json:"windowClosesAt"`
}

// DedupQuery is a validated inspector request: which transactionId in which
// partition (SPEC.md §13). Hash is HashTxn(TransactionID).
type DedupQuery struct {
	Queue         string `json:"queue"`
	Partition     string `json:"partition"`
	TransactionID string `json:"transactionId"`
	Hash          Hash   `json:"-"`
}

// DecodeDedupQuery validates the inspector's HTTP query string
// (?queue=&partition=&transactionId=).
func DecodeDedupQuery(q url.Values) (DedupQuery, error) {
	get := func(k string) *string {
		if v, ok := q[k]; ok && len(v) > 0 {
			return &v[len(v)-1]
		}
		return nil
	}
	return dedupQuery(get("queue"), get("partition"), get("transactionId"))
}

// DecodeDedup validates the inspector's NATS body
// {"queue","partition","transactionId"}.
func DecodeDedup(body []byte) (DedupQuery, error) {
	var in struct {
		Queue         *string `json:"queue"`
		Partition     *string `json:"partition"`
		TransactionID *string `json:"transactionId"`
	}
	if err := DecodeObject(body, &in); err != nil {
		return DedupQuery{}, err
	}
	return dedupQuery(in.Queue, in.Partition, in.TransactionID)
}

// dedupQuery checks the inspector's fields: queue and transactionId are
// required and not empty; partition defaults to DefaultPartition when absent
// or empty, as in a push (SPEC.md §1). Names and ids follow the push's rules
// (SPEC.md §10): 400 missing_field, invalid_utf8, control_character,
// too_long.
func dedupQuery(queue, partition, txn *string) (DedupQuery, error) {
	var d DedupQuery
	if queue == nil || *queue == "" {
		return d, fieldErr(ErrMissingField.With("queue is required"), "queue")
	}
	if txn == nil || *txn == "" {
		return d, fieldErr(ErrMissingField.With("transactionId is required (the id whose window to inspect)"), "transactionId")
	}
	d.Queue, d.TransactionID, d.Partition = *queue, *txn, DefaultPartition
	if partition != nil && *partition != "" {
		d.Partition = *partition
	}
	if err := ValidateName(d.Queue, "queue"); err != nil {
		return d, err
	}
	if err := ValidateName(d.Partition, "partition"); err != nil {
		return d, err
	}
	if err := ValidateTransactionID(d.TransactionID, "transactionId"); err != nil {
		return d, err
	}
	d.Hash = HashTxn(d.TransactionID)
	return d, nil
}

// ValidateTransactionID checks a transactionId outside a push body by the
// push's rules (SPEC.md §10): valid UTF-8, at most MaxTransactionIDBytes, no
// C0 control character or DEL. field names it in the error.
func ValidateTransactionID(txn, field string) error {
	if !utf8.ValidString(txn) {
		return fieldErr(ErrInvalidUTF8.With("%s is not valid UTF-8", field), field)
	}
	if e := checkText(txn, MaxTransactionIDBytes, field); e != nil {
		return e
	}
	return nil
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

// ReplayTransactionID is the deterministic transactionId a replayed dead
// letter is pushed under, so a second replay is a duplicate (SPEC.md §13).
func ReplayTransactionID(deadLetterID int64) string {
	return "dlq:" + strconv.FormatInt(deadLetterID, 10)
}

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

// DecodeReplay validates a DLQ replay body (SPEC.md §13):
// {"queue","consumerGroup","ids":[...]} or {"queue","consumerGroup",
// "partition","from","to","limit"}. queue is required; ids (1 to
// MaxReplayIDs positive integers) exclude the filter fields; limit is 1 to
// MaxReplayIDs (default DefaultReplayLimit); from and to are RFC 3339
// times. Errors are 400s naming the field.
func DecodeReplay(body []byte) (ReplayRequest, error) {
	var in struct {
		Queue         *string  `json:"queue"`
		ConsumerGroup *string  `json:"consumerGroup"`
		IDs           *[]int64 `json:"ids"`
		Partition     *string  `json:"partition"`
		From          *string  `json:"from"`
		To            *string  `json:"to"`
		Limit         *int     `json:"limit"`
	}
	var r ReplayRequest
	if err := DecodeObject(body, &in); err != nil {
		return r, err
	}
	if in.Queue == nil || *in.Queue == "" {
		return r, fieldErr(ErrMissingField.With("queue is required"), "queue")
	}
	r.Queue = *in.Queue
	if err := ValidateName(r.Queue, "queue"); err != nil {
		return r, err
	}
	if in.ConsumerGroup != nil && *in.ConsumerGroup != "" {
		r.ConsumerGroup = *in.ConsumerGroup
		if err := ValidateName(r.ConsumerGroup, "consumerGroup"); err != nil {
			return r, err
		}
	}
	if in.IDs != nil {
		if in.Partition != nil || in.From != nil || in.To != nil || in.Limit != nil {
			return r, fieldErr(ErrInvalidField.With("ids and a filter (partition, from, to, limit) exclude each other"), "ids")
		}
		if len(*in.IDs) == 0 || len(*in.IDs) > MaxReplayIDs {
			return r, fieldErr(ErrInvalidField.With("ids must hold 1 to %d dead letter ids, got %d", MaxReplayIDs, len(*in.IDs)), "ids")
		}
		for i, id := range *in.IDs {
			if id <= 0 {
				return r, fieldErr(ErrInvalidField.With("ids[%d] must be a dead letter id (a positive integer), got %d", i, id), fmt.Sprintf("ids[%d]", i))
			}
		}
		r.IDs = *in.IDs
		return r, nil
	}
	if in.Partition != nil && *in.Partition != "" {
		r.Partition = *in.Partition
		if err := ValidateName(r.Partition, "partition"); err != nil {
			return r, err
		}
	}
	for _, t := range []struct {
		v    *string
		dst  **time.Time
		name string
	}{{in.From, &r.From, "from"}, {in.To, &r.To, "to"}} {
		if t.v == nil {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, *t.v)
		if err != nil {
			return r, fieldErr(ErrInvalidField.With("%s must be an RFC 3339 time, got %q", t.name, *t.v), t.name)
		}
		*t.dst = &ts
	}
	r.Limit = DefaultReplayLimit
	if in.Limit != nil {
		if *in.Limit < 1 || *in.Limit > MaxReplayIDs {
			return r, fieldErr(ErrInvalidField.With("limit must be 1 to %d, got %d", MaxReplayIDs, *in.Limit), "limit")
		}
		r.Limit = *in.Limit
	}
	return r, nil
}

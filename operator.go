package queen

import (
	"net/url"
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

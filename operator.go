package queen

import (
	"time"
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

package queen

import (
	"errors"
	"fmt"
)

// Error is an API error from the registry below: a stable snake_case Code, the
// HTTP status it maps to (also the NATS Nats-Service-Error-Code header), whether
// retrying the same request can help, and, for item errors, the item index and
// the field path (SPEC.md §10).
type Error struct {
	Status    int    `json:"-"`
	Code      string `json:"code"`
	Message   string `json:"error"`
	Index     *int   `json:"index,omitempty"`
	Field     string `json:"field,omitempty"`
	Retryable bool   `json:"retryable"`
}

func (e *Error) Error() string { return e.Message }

// Is matches errors by Code, so errors.Is(err, queen.ErrOverloaded) works for
// any message text.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// With returns a copy of the registry entry e with a formatted message.
func (e *Error) With(format string, args ...any) *Error {
	c := *e
	c.Message = fmt.Sprintf(format, args...)
	return &c
}

// At returns a copy of e naming item index i and field path f.
func (e *Error) At(i int, field string) *Error {
	c := *e
	c.Index = &i
	c.Field = field
	return &c
}

func reg(status int, code string, retryable bool, msg string) *Error {
	return &Error{Status: status, Code: code, Message: msg, Retryable: retryable}
}

// The error registry. Clients branch on Code; Message is for people.
var (
	ErrInvalidJSON     = reg(400, "invalid_json", false, "the request body is not valid JSON")
	ErrInvalidUTF8     = reg(400, "invalid_utf8", false, "the request body is not valid UTF-8")
	ErrInvalidField    = reg(400, "invalid_field", false, "a field has the wrong type or value")
	ErrMissingField    = reg(400, "missing_field", false, "a required field is missing")
	ErrControlChar     = reg(400, "control_character", false, "a name or transactionId contains a control character, or a name an invisible format or separator character")
	ErrTooLong         = reg(400, "too_long", false, "a value is too long")
	ErrPayloadTooLarge = reg(400, "payload_too_large", false, "an item's payload is over the limit")
	ErrTooManyItems    = reg(400, "too_many_items", false, "the request has too many items")
	ErrUnknownOption   = reg(400, "unknown_option", false, "unknown option")
	ErrInvalidOption   = reg(400, "invalid_option", false, "invalid option value")
	ErrBodyTooLarge    = reg(413, "body_too_large", false, "the request body is over 16 MiB")
	ErrBodyStalled     = reg(408, "body_stalled", true, "the request body stopped arriving; nothing was written, send it again")
	ErrNotFound        = reg(404, "not_found", false, "not found")
	// ErrUnauthorized: an admin route (SPEC.md §13) without the bearer token
	// QUEEN_ADMIN_TOKEN asks for, or with another one; with JWT on (SPEC.md
	// §14), a request without a valid token, the message saying why
	// (missing, malformed, expired, not yet valid, wrong issuer or
	// audience, bad signature, unknown key id, algorithm not accepted).
	ErrUnauthorized = reg(401, "unauthorized", false, "this route needs Authorization: Bearer <QUEEN_ADMIN_TOKEN>")
	// ErrForbidden: with JWT on (SPEC.md §14), a valid token whose roles do
	// not reach the route's access level; nothing was read or written.
	ErrForbidden        = reg(403, "forbidden", false, "the token's role does not allow this route")
	ErrMethodNotAllowed = reg(405, "method_not_allowed", false, "method not allowed")
	ErrOverloaded       = reg(503, "overloaded", true, "the broker is overloaded; retry with the same transaction ids")
	ErrTooManyPolls     = reg(429, "too_many_polls", true, "too many long polls are waiting; retry after a pause or poll without wait")
	ErrUnavailable      = reg(503, "unavailable", true, "the database is unavailable; retry with the same transaction ids")
	ErrCommitUnknown    = reg(503, "commit_unknown", true, "the outcome of the commit is unknown; retry with the same transaction ids")
	ErrShuttingDown     = reg(503, "shutting_down", true, "the broker is shutting down; retry with the same transaction ids")
	ErrPartitionGone    = reg(503, "partition_gone", true, "the partition was deleted while the push was in flight; retry with the same transaction ids")
	// ErrStarting answers every request but GET /health while the broker
	// starts (its migrations may wait on another broker's lock): nothing
	// was read or written.
	ErrStarting = reg(503, "starting", true, "the broker is starting; retry shortly with the same transaction ids")
	// ErrLockTimeout: a row lock (a partition's, or a consumer row's) was not
	// granted within the broker's lock timeout (QUEEN_LOCK_TIMEOUT, default
	// 5 s): another session holds it. Nothing was written for the items it
	// answers; other partitions of the same push are not held up by it.
	ErrLockTimeout = reg(503, "lock_timeout", true, "a row lock was not granted within the lock timeout; retry with the same transaction ids")
	ErrTimeout     = reg(504, "timeout", true, "the request timed out; retry with the same transaction ids")
	// ErrNATSUnavailable: this broker's NATS connection is down (every NATS
	// server unreachable, reconnecting), so the items of partitions another
	// broker owns cannot be handed to it; nothing was sent and nothing
	// written for them (SPEC.md §9, docs/contract.md §9). The items of this
	// broker's own shards are served as usual.
	ErrNATSUnavailable = reg(503, "nats_unavailable", true, "this broker's NATS connection is down, so partitions another broker owns cannot be reached; nothing was written, retry with the same transaction ids")
	// ErrStorageFull: PostgreSQL is out of disk space (SQLSTATE 53100
	// disk_full, "No space left on device"); nothing was written. Pushes
	// work again once space is freed (docs/contract.md §12).
	ErrStorageFull = reg(503, "storage_full", true, "the database is out of disk space; nothing was written, retry with the same transaction ids once space is freed")
	ErrInternal    = reg(500, "internal", true, "internal error")

	// ErrDuplicate: a transaction's push repeats a transactionId already in
	// its partition's window, or an earlier push of the same transaction; the
	// whole transaction rolled back (SPEC.md §5).
	ErrDuplicate = reg(409, "duplicate", false, "a push of the transaction is a duplicate; nothing was written")
	// ErrUnresolvable: a transaction's ack names no message (SPEC.md §4, §5).
	ErrUnresolvable = reg(409, "unresolvable", false, "an ack of the transaction names no message; nothing was written")
	// ErrLeaseInvalid answers a lease extension of a lease that is not live.
	ErrLeaseInvalid = reg(409, "lease_invalid", false, "the lease is not live")
)

// AsError returns err as an *Error, wrapping unknown errors as ErrInternal.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return ErrInternal.With("internal error: %v", err)
}

// fieldErr sets the field path of e, a fresh copy from With, and returns it.
func fieldErr(e *Error, field string) *Error {
	e.Field = field
	return e
}

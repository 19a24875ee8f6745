package queen

import (
	"github.com/google/uuid"
)

// TxnOpType is the type of one operation of a transaction (SPEC.md §5).
type TxnOpType string

// The operation types.
const (
	TxnPush TxnOpType = "push"
	TxnAck  TxnOpType = "ack"
)

// TxnOp is one validated operation of a transaction: a push of Items (as
// transport/wire.DecodePush returns them), or one Ack.
type TxnOp struct {
	Type  TxnOpType
	Items []Item
	Ack   AckItem
}

// TxnRequest is a validated POST /api/v1/transaction body.
type TxnRequest struct {
	Ops []TxnOp
	// RequiredLeases must each be the live lease of a consumer row when the
	// transaction locks it (the Queen SDKs send the leases of the messages
	// they ack here, not in the ack operations).
	RequiredLeases []uuid.UUID
}

// TxnOpResult is the outcome of one operation of a committed transaction:
// Push holds one Result per item (Queued; or, with a window of 0, every item
// Queued too), Ack the ack's result.
type TxnOpResult struct {
	Push []Result
	Ack  AckResult
}

// TxnErrorReply is the body of a transaction that rolled back because of one
// operation (HTTP 409): the registry error fields of SPEC.md §10, with index
// the operation's index and field the path of what failed
// ("operations[1].items[0].transactionId"), plus "success":false (what Queen
// SDKs read) and what names the culprit: queue, partition, partitionId and
// transactionId; item (the index inside a push's items); messageId, the
// original's id, for a duplicate of a stored message (the zero UUID when its
// segment is gone); leaseId for a lease that is not live.
type TxnErrorReply struct {
	Success       bool   `json:"success"`
	Message       string `json:"error"`
	Code          string `json:"code"`
	Index         *int   `json:"index,omitempty"`
	Field         string `json:"field,omitempty"`
	Retryable     bool   `json:"retryable"`
	Item          *int   `json:"item,omitempty"`
	Queue         string `json:"queue,omitempty"`
	Partition     string `json:"partition,omitempty"`
	PartitionID   string `json:"partitionId,omitempty"`
	TransactionID string `json:"transactionId,omitempty"`
	MessageID     string `json:"messageId,omitempty"`
	LeaseID       string `json:"leaseId,omitempty"`
}

// TxnAbort is the error of a transaction rolled back because of one of its
// operations (SPEC.md §5): a push whose transactionId is already in its
// partition's window or repeats an earlier push of the same transaction
// (ErrDuplicate), an ack that cannot be resolved (ErrUnresolvable) or names
// a lease that is not live (ErrLeaseInvalid). Nothing of the transaction was
// written. errors.Is(err, ErrDuplicate) etc. match it; it is also the reply
// body.
type TxnAbort struct {
	TxnErrorReply
	// Err is the registry error with the same message, index and field.
	Err *Error `json:"-"`
}

func (a *TxnAbort) Error() string { return a.Message }

// Unwrap returns the registry error, so AsError and errors.Is see it.
func (a *TxnAbort) Unwrap() error { return a.Err }

// NewTxnAbort returns the abort for registry entry e with message msg,
// naming operation op (-1: none) and field path field; the caller fills in
// the rest of the reply.
func NewTxnAbort(e *Error, op int, field, msg string) *TxnAbort {
	err := e.With("%s", msg)
	err.Field = field
	a := &TxnAbort{TxnErrorReply: TxnErrorReply{Message: msg, Code: e.Code, Field: field, Retryable: e.Retryable}, Err: err}
	if op >= 0 {
		a.Index, err.Index = &op, &op
	}
	return a
}

// TxnConflictKind is why an operation rolled a transaction back (SPEC.md §5).
type TxnConflictKind uint8

// The kinds of TxnConflict.
const (
	// TxnDuplicate: a pushed item's transactionId is already stored in its
	// partition, inside the window (ErrDuplicate).
	TxnDuplicate TxnConflictKind = iota + 1
	// TxnRepeat: a pushed item repeats an earlier item of the same
	// transaction in the same partition (ErrDuplicate).
	TxnRepeat
	// TxnUnresolvable: an ack names an offset or transactionId that cannot
	// be resolved (ErrUnresolvable).
	TxnUnresolvable
	// TxnLeaseInvalid: an ack names a lease that is not the live one
	// (ErrLeaseInvalid).
	TxnLeaseInvalid
	// TxnRequiredLease: one of the request's requiredLeases is not live
	// (ErrLeaseInvalid).
	TxnRequiredLease
)

// TxnConflict is a transaction rolled back because of one of its
// operations (SPEC.md §5), as domain values: nothing of it was written. The
// persistence layer returns it; transport/wire.TxnAbort renders it for the
// wire (the field path, the sentence, the 409 body). errors.Is(err,
// ErrDuplicate) etc. match it (Unwrap).
type TxnConflict struct {
	Kind TxnConflictKind
	// Op is the operation's index; for TxnRequiredLease the lease's index
	// in requiredLeases.
	Op int
	// Item is the item's index inside the push operation (TxnDuplicate,
	// TxnRepeat).
	Item int
	// Queue and Partition name a pushed item's partition (TxnDuplicate,
	// TxnRepeat); PartitionID is the partition of a push or an ack (zero for
	// TxnRequiredLease).
	Queue, Partition string
	PartitionID      uuid.UUID
	// TransactionID is the pushed item's, or the ack's (empty for an ack by
	// offset).
	TransactionID string
	// Original and OriginalOffset are the stored original's message id and
	// offset, WindowSeconds the partition's window (TxnDuplicate).
	Original       uuid.UUID
	OriginalOffset int64
	WindowSeconds  int64
	// EarlierOp and EarlierItem name the item repeated (TxnRepeat).
	EarlierOp, EarlierItem int
	// ByOffset: the ack named an offset, not a transactionId
	// (TxnUnresolvable).
	ByOffset bool
	// Detail is the ack's own answer (AckResult.Error) for TxnUnresolvable
	// and TxnLeaseInvalid.
	Detail string
	// LeaseID is the ack's lease (TxnLeaseInvalid, nil when it named none)
	// or the required lease (TxnRequiredLease).
	LeaseID *uuid.UUID
}

// Registry is the registry error of c's kind: ErrDuplicate,
// ErrUnresolvable or ErrLeaseInvalid.
func (c *TxnConflict) Registry() *Error {
	switch c.Kind {
	case TxnUnresolvable:
		return ErrUnresolvable
	case TxnLeaseInvalid, TxnRequiredLease:
		return ErrLeaseInvalid
	default:
		return ErrDuplicate
	}
}

// Error is a short sentence; transport/wire.TxnAbort gives the wire's.
func (c *TxnConflict) Error() string {
	switch c.Kind {
	case TxnDuplicate:
		return "transaction rolled back: transactionId " + c.TransactionID + " is already stored"
	case TxnRepeat:
		return "transaction rolled back: transactionId " + c.TransactionID + " repeats an earlier item"
	case TxnRequiredLease:
		return "transaction rolled back: a required lease is not live"
	default:
		return "transaction rolled back: " + c.Detail
	}
}

// Unwrap returns the registry error, so errors.Is matches by code.
func (c *TxnConflict) Unwrap() error { return c.Registry() }

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
// persistence layer returns it; transport/wire.NewTxnAbort renders it for the
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

// Error is a short sentence; transport/wire.NewTxnAbort gives the wire's.
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

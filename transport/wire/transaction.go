package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/queen-mq/queen-go"
)

// TxnReply is the reply of a committed transaction (HTTP 200): success and
// one result per operation, in request order. Queen SDKs read "success".
type TxnReply struct {
	Success bool         `json:"success"`
	Results []TxnOpReply `json:"results"`
}

// TxnOpReply is one operation's result. A push carries Items (one push reply
// per item, as SPEC.md §3); an ack carries the ack result fields.
type TxnOpReply struct {
	Index   int             `json:"index"`
	Type    queen.TxnOpType `json:"type"`
	Success bool            `json:"success"`
	// Items: push only (always present for a push, possibly empty).
	Items []PushReply `json:"items,omitempty"`
	// Ack only.
	Result        queen.AckOutcome `json:"result,omitempty"`
	TransactionID string           `json:"transactionId,omitempty"`
	PartitionID   string           `json:"partitionId,omitempty"`
	Offset        *int64           `json:"offset,omitempty"`
	Cursor        *int64           `json:"cursor,omitempty"`
	Error         string           `json:"error,omitempty"`
}

// MarshalJSON writes a push with its (possibly empty) items array and an ack
// without one.
func (r TxnOpReply) MarshalJSON() ([]byte, error) {
	type plain TxnOpReply
	if r.Type != queen.TxnPush {
		p := plain(r)
		p.Items = nil
		return json.Marshal(p)
	}
	items := r.Items
	if items == nil {
		items = []PushReply{}
	}
	return json.Marshal(struct {
		Index   int             `json:"index"`
		Type    queen.TxnOpType `json:"type"`
		Success bool            `json:"success"`
		Items   []PushReply     `json:"items"`
	}{r.Index, r.Type, r.Success, items})
}

// DecodeTransaction parses and validates a transaction body (SPEC.md §5, §10):
//
//	{"operations":[{"type":"push","items":[...]},
//	               {"type":"ack","transactionId"|"offset","partitionId","leaseId","status","error","consumerGroup"}],
//	 "requiredLeases":["<leaseId>", ...]}
//
// A push's items are validated as DecodePush does (a push operation without
// "items" is one item: the operation object itself, as Queen accepts); an
// ack as DecodeAck does. operations must be a non-empty array; the push
// items and acks of all operations together are at most MaxItems.
// requiredLeases is optional (null, absent or an array of lease ids; "" and
// null elements are skipped). Errors are *Error from the registry with index
// = the operation's index and field = the full path, e.g.
// "operations[2].items[0].queue"; nothing is written for a refused body.
func DecodeTransaction(body []byte, maxPayloadBytes int) (queen.TxnRequest, error) {
	var in struct {
		Operations     *[]json.RawMessage `json:"operations"`
		RequiredLeases *[]*string         `json:"requiredLeases"`
	}
	if err := DecodeObject(body, &in); err != nil {
		return queen.TxnRequest{}, err
	}
	if in.Operations == nil {
		return queen.TxnRequest{}, fieldErr(queen.ErrMissingField.With("operations is required (an array of {\"type\":\"push\"|\"ack\",...})"), "operations")
	}
	ops := *in.Operations
	if len(ops) == 0 {
		return queen.TxnRequest{}, fieldErr(queen.ErrInvalidField.With("operations must not be empty"), "operations")
	}
	req := queen.TxnRequest{Ops: make([]queen.TxnOp, len(ops))}
	units := 0
	for i, raw := range ops {
		prefix := "operations[" + strconv.Itoa(i) + "]"
		bad := func(e *queen.Error, field string) (queen.TxnRequest, error) {
			return queen.TxnRequest{}, e.At(i, prefix+field)
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || raw[0] != '{' {
			return bad(queen.ErrInvalidField.With("%s must be an object", prefix), "")
		}
		var head struct {
			Type  *string         `json:"type"`
			Items json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return bad(queen.ErrInvalidField.With("%s.type must be a string", prefix), ".type")
		}
		if head.Type == nil {
			return bad(queen.ErrMissingField.With("%s.type is required (\"push\" or \"ack\")", prefix), ".type")
		}
		switch queen.TxnOpType(*head.Type) {
		case queen.TxnPush:
			its, err := decodeTxnPush(raw, head.Items, maxPayloadBytes, i, prefix)
			if err != nil {
				return queen.TxnRequest{}, err
			}
			req.Ops[i] = queen.TxnOp{Type: queen.TxnPush, Items: its}
			units += len(its)
		case queen.TxnAck:
			var a ackInput
			if err := json.Unmarshal(raw, &a); err != nil {
				if te, ok := err.(*json.UnmarshalTypeError); ok {
					return bad(queen.ErrInvalidField.With("%s.%s has the wrong type: want %s, got JSON %s", prefix, te.Field, te.Type, te.Value), "."+te.Field)
				}
				return bad(queen.ErrInvalidJSON.With("%s is not valid JSON: %v", prefix, err), "")
			}
			ack, err := a.validate(i, prefix+".", "")
			if err != nil {
				return queen.TxnRequest{}, err
			}
			req.Ops[i] = queen.TxnOp{Type: queen.TxnAck, Ack: ack}
			units++
		default:
			return bad(queen.ErrInvalidField.With("%s.type must be \"push\" or \"ack\", got %q", prefix, *head.Type), ".type")
		}
		if units > queen.MaxItems {
			return queen.TxnRequest{}, fieldErr(queen.ErrTooManyItems.With("the operations hold more than %d push items and acks", queen.MaxItems), "operations")
		}
	}
	if in.RequiredLeases != nil {
		seen := map[uuid.UUID]bool{}
		for j, s := range *in.RequiredLeases {
			if s == nil || *s == "" {
				continue
			}
			id, err := uuid.Parse(*s)
			if err != nil {
				field := "requiredLeases[" + strconv.Itoa(j) + "]"
				return queen.TxnRequest{}, fieldErr(queen.ErrInvalidField.With("%s must be a lease id (a UUID), got %q", field, *s), field)
			}
			if !seen[id] {
				seen[id] = true
				req.RequiredLeases = append(req.RequiredLeases, id)
			}
		}
	}
	return req, nil
}

// decodeTxnPush validates the items of push operation op: the items array
// when present, else the operation object as one item. Errors name the full
// path.
func decodeTxnPush(op, items json.RawMessage, maxPayloadBytes, opIdx int, prefix string) ([]queen.Item, error) {
	var body []byte
	if items != nil {
		body = make([]byte, 0, len(items)+10)
		body = append(append(append(body, `{"items":`...), items...), '}')
	} else {
		body = make([]byte, 0, len(op)+11)
		body = append(append(append(body, `{"items":[`...), op...), "]}"...)
	}
	its, err := DecodePush(body, maxPayloadBytes)
	if err == nil {
		return its, nil
	}
	e := *queen.AsError(err)
	if items == nil {
		// The item is the operation itself: drop "items[0]" from the path.
		e.Field = strings.TrimPrefix(strings.TrimPrefix(e.Field, "items[0]"), ".")
		e.Message = strings.TrimPrefix(strings.TrimPrefix(e.Message, "items[0]"), ".")
	}
	if e.Field != "" {
		e.Field = "." + e.Field
	}
	e.Field = prefix + e.Field
	e.Message = prefix + ": " + e.Message
	e.Index = &opIdx
	return nil, &e
}

// TxnOpReplies builds the reply results of a committed transaction: ops and
// res in request order.
func TxnOpReplies(ops []queen.TxnOp, res []queen.TxnOpResult) []TxnOpReply {
	out := make([]TxnOpReply, len(ops))
	for i := range ops {
		r := TxnOpReply{Index: i, Type: ops[i].Type, Success: true}
		switch ops[i].Type {
		case queen.TxnPush:
			r.Items = make([]PushReply, len(ops[i].Items))
			for j := range ops[i].Items {
				r.Items[j] = Reply(j, &ops[i].Items[j], res[i].Push[j])
				if res[i].Push[j].Verdict != queen.Queued {
					r.Success = false
				}
			}
		case queen.TxnAck:
			a := res[i].Ack
			r.Success, r.Result, r.TransactionID, r.PartitionID = a.Success, a.Result, a.TransactionID, a.PartitionID
			r.Offset, r.Cursor, r.Error = a.Offset, a.Cursor, a.Error
		}
		out[i] = r
	}
	return out
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
// (queen.ErrDuplicate), an ack that cannot be resolved (queen.ErrUnresolvable)
// or names a lease that is not live (queen.ErrLeaseInvalid). Nothing of the
// transaction was written. errors.Is(err, queen.ErrDuplicate) etc. match it;
// it is also the reply body (NewTxnAbort builds it from a queen.TxnConflict;
// the Go client returns it for a 409).
type TxnAbort struct {
	TxnErrorReply
	// Err is the registry error with the same message, index and field.
	Err *queen.Error `json:"-"`
}

func (a *TxnAbort) Error() string { return a.Message }

// Unwrap returns the registry error, so queen.AsError and errors.Is see it.
func (a *TxnAbort) Unwrap() error { return a.Err }

// NewTxnAbort renders c for the wire (SPEC.md §5, §10): the 409 body with the
// registry error's code, the operation's index, the path of the field at
// fault ("operations[1].items[0].transactionId", "operations[2].leaseId",
// "requiredLeases[0]"), a sentence naming the culprit, and the culprit's
// queue, partition, ids and (for a duplicate of a stored message) the
// original's message id.
func NewTxnAbort(c *queen.TxnConflict) *TxnAbort {
	var (
		field, msg string
		op         = c.Op
	)
	switch c.Kind {
	case queen.TxnDuplicate, queen.TxnRepeat:
		at := fmt.Sprintf("operations[%d].items[%d]", c.Op, c.Item)
		field = at + ".transactionId"
		if c.Kind == queen.TxnRepeat {
			msg = fmt.Sprintf("%s: transactionId %q repeats operations[%d].items[%d] of the same transaction in partition %q of queue %q; the transaction was rolled back",
				at, c.TransactionID, c.EarlierOp, c.EarlierItem, c.Partition, c.Queue)
		} else {
			msg = fmt.Sprintf("%s: transactionId %q is already in partition %q of queue %q (message %s at offset %d, inside the %d s window); the transaction was rolled back",
				at, c.TransactionID, c.Partition, c.Queue, c.Original, c.OriginalOffset, c.WindowSeconds)
		}
	case queen.TxnRequiredLease:
		op = -1
		field = fmt.Sprintf("requiredLeases[%d]", c.Op)
		msg = fmt.Sprintf("%s: lease %s is not live (expired, released or unknown); the transaction was rolled back", field, c.LeaseID)
	default:
		name := "transactionId"
		switch {
		case c.Kind == queen.TxnLeaseInvalid:
			name = "leaseId"
		case c.ByOffset:
			name = "offset"
		}
		field = fmt.Sprintf("operations[%d].%s", c.Op, name)
		msg = fmt.Sprintf("operations[%d]: %s; the transaction was rolled back", c.Op, c.Detail)
	}
	a := newTxnAbort(c.Registry(), op, field, msg)
	switch c.Kind {
	case queen.TxnDuplicate, queen.TxnRepeat:
		item := c.Item
		a.Item = &item
		a.Queue, a.Partition = c.Queue, c.Partition
		if c.Kind == queen.TxnDuplicate {
			a.MessageID = c.Original.String()
		}
	}
	if c.PartitionID != uuid.Nil {
		a.PartitionID = c.PartitionID.String()
	}
	a.TransactionID = c.TransactionID
	if c.LeaseID != nil {
		a.LeaseID = c.LeaseID.String()
	}
	return a
}

// newTxnAbort returns the abort for registry entry e with message msg,
// naming operation op (-1: none) and field path field; the caller fills in
// the rest of the reply.
func newTxnAbort(e *queen.Error, op int, field, msg string) *TxnAbort {
	err := e.With("%s", msg)
	err.Field = field
	a := &TxnAbort{TxnErrorReply: TxnErrorReply{Message: msg, Code: e.Code, Field: field, Retryable: e.Retryable}, Err: err}
	if op >= 0 {
		a.Index, err.Index = &op, &op
	}
	return a
}

package client

import (
	"context"
	"encoding/json"
	"net/http"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// TxnBuilder builds a transaction for Client.Transaction: push and ack
// operations run in one PostgreSQL transaction, in the order added
// (SPEC.md §5). It is not safe for concurrent use.
type TxnBuilder struct {
	c      *Client
	ops    []json.RawMessage
	leases []string
	err    error
}

// Transaction starts a transaction:
//
//	res, err := c.Transaction().Ack(client.AckFor(msg)).Push(out...).Commit(ctx)
func (c *Client) Transaction() *TxnBuilder { return &TxnBuilder{c: c} }

// Push adds one push operation with items (SPEC.md §3 items). Inside a
// transaction a transactionId already in its partition's window, or
// repeated within the transaction, rolls everything back (queen.ErrDuplicate).
// Items the broker would refuse for their text (ValidatePushItems) make
// Body and Commit return that error; nothing is sent.
func (t *TxnBuilder) Push(items ...PushItem) *TxnBuilder {
	if err := ValidatePushItems(items); err != nil && t.err == nil {
		t.err = err
	}
	body := AppendPushRequest([]byte(`{"type":"push",`), items)
	// AppendPushRequest wrote {"items":[...]} after the prefix: drop its '{'.
	body = append(body[:len(`{"type":"push",`)], body[len(`{"type":"push",`)+1:]...)
	t.ops = append(t.ops, body)
	return t
}

// Ack adds one ack operation per ack (SPEC.md §4). An ack that names no
// message (queen.ErrUnresolvable) or a lease that is not live
// (queen.ErrLeaseInvalid) rolls everything back.
func (t *TxnBuilder) Ack(acks ...Ack) *TxnBuilder {
	for _, a := range acks {
		if err := a.validate(-1); err != nil && t.err == nil {
			t.err = err
		}
		b, err := json.Marshal(struct {
			Type queen.TxnOpType `json:"type"`
			Ack
		}{queen.TxnAck, a})
		if err != nil && t.err == nil {
			t.err = err
		}
		t.ops = append(t.ops, b)
	}
	return t
}

// RequireLeases adds leases that must be live when the transaction runs (the
// "requiredLeases" Queen SDKs send), else queen.ErrLeaseInvalid.
func (t *TxnBuilder) RequireLeases(ids ...string) *TxnBuilder {
	t.leases = append(t.leases, ids...)
	return t
}

// Body returns the request body the transaction sends (the HTTP and NATS
// body are the same).
func (t *TxnBuilder) Body() ([]byte, error) {
	if t.err != nil {
		return nil, t.err
	}
	ops := t.ops
	if ops == nil {
		ops = []json.RawMessage{}
	}
	return json.Marshal(struct {
		Operations     []json.RawMessage `json:"operations"`
		RequiredLeases []string          `json:"requiredLeases,omitempty"`
	}{ops, t.leases})
}

// Commit sends the transaction (queen.v1.transaction, POST
// /api/v1/transaction) and returns one result
// per operation, in order. A transaction rolled back by one of its
// operations is a *wire.TxnAbort (errors.Is with queen.ErrDuplicate,
// queen.ErrUnresolvable or queen.ErrLeaseInvalid), with nothing written;
// other errors are *queen.Error (bad input, or retryable: the database or the
// broker failed, and a retry of a transaction that did commit answers
// queen.ErrDuplicate for its pushes).
func (t *TxnBuilder) Commit(ctx context.Context) ([]wire.TxnOpReply, error) {
	body, err := t.Body()
	if err != nil {
		return nil, err
	}
	rep, err := t.c.roundTrip(ctx, &Request{Subject: wire.SubjectTransaction, Method: http.MethodPost, Path: "/api/v1/transaction", Body: body})
	if err != nil {
		return nil, err
	}
	if err := rep.Err(); err != nil {
		// A transaction's error body is the registry error with
		// "success":false (Reply.Err reads it); a rollback's (409) also
		// names the operation and item that caused it.
		e := queen.AsError(err)
		var r wire.TxnErrorReply
		if rep.Status == http.StatusConflict && json.Unmarshal(rep.Body, &r) == nil && r.Code != "" {
			return nil, &wire.TxnAbort{TxnErrorReply: r, Err: e}
		}
		return nil, e
	}
	var out wire.TxnReply
	if err := json.Unmarshal(rep.Body, &out); err != nil {
		return nil, queen.ErrInternal.With("decode transaction reply: %v", err)
	}
	return out.Results, nil
}

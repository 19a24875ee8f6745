package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// handleTransaction is POST /api/v1/transaction.
func (s *Service) handleTransaction(w http.ResponseWriter, r *http.Request) {
	body, release, rep, ok := s.readAdmitted(r)
	if !ok {
		writeReply(w, txnErrReply(rep))
		return
	}
	defer release()
	writeReply(w, s.transactionAdmitted(r.Context(), body))
}

// transaction handles a transaction body (SPEC.md §5): 200
// {"success":true,"results":[...]} with one result per operation once
// everything committed; otherwise nothing was written and the body is a
// wire.TxnErrorReply ("success":false with the registry error fields): 409
// when an operation rolled it back (duplicate, unresolvable,
// lease_invalid), 4xx for bad input, 503/504 when the database failed (retry
// the same transaction: a push that did commit answers 409 duplicate).
//
// The body holds its bytes of the in-flight budget while it is handled
// (503 overloaded when the budget is spent).
func (s *Service) transaction(ctx context.Context, body []byte) reply {
	if !s.admit(int64(len(body)), 0) {
		return txnErrReply(s.overloaded())
	}
	defer s.inFlight.Add(-int64(len(body)))
	return s.transactionAdmitted(ctx, body)
}

// transactionAdmitted is transaction for a body that already holds its
// share of the in-flight budget (readAdmitted for HTTP).
func (s *Service) transactionAdmitted(ctx context.Context, body []byte) reply {
	if s.cfg.Consumer == nil {
		return txnErrReply(errReply(queen.ErrNotFound.With("this broker does not run transactions")))
	}
	req, err := wire.DecodeTransaction(body, s.cfg.MaxPayloadBytes)
	if err != nil {
		return txnErrReply(errReply(err))
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	res, err := s.cfg.Consumer.Transaction(ctx, &req)
	if err != nil {
		var c *queen.TxnConflict
		if errors.As(err, &c) {
			ab := wire.NewTxnAbort(c)
			return reply{status: ab.Err.Status, body: ab}
		}
		return txnErrReply(errReply(err))
	}
	var pushed []*queen.Item
	var results []queen.Result
	for i, op := range req.Ops {
		switch op.Type {
		case queen.TxnPush:
			for j := range op.Items {
				pushed = append(pushed, &req.Ops[i].Items[j])
				results = append(results, res[i].Push[j])
				s.cfg.Metrics.PushItems.WithLabelValues(string(res[i].Push[j].Verdict)).Inc()
			}
		case queen.TxnAck:
			s.cfg.Metrics.AckItems.WithLabelValues(string(res[i].Ack.Result)).Inc()
		}
	}
	s.countQueues(pushed, results)
	if len(pushed) > 0 && s.cfg.OnPushed != nil {
		s.cfg.OnPushed(pushed, results)
	}
	return reply{status: http.StatusOK, body: wire.TxnReply{Success: true, Results: wire.TxnOpReplies(req.Ops, res)}}
}

// txnErrReply gives an error reply the transaction error body: the registry
// fields plus "success":false.
func txnErrReply(rep reply) reply {
	e, ok := rep.body.(*queen.Error)
	if !ok {
		return rep
	}
	rep.body = &wire.TxnAbort{TxnErrorReply: wire.TxnErrorReply{
		Message: e.Message, Code: e.Code, Index: e.Index, Field: e.Field, Retryable: e.Retryable,
	}, Err: e}
	return rep
}

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
//	res, err := client.Transaction().Ack(transport.AckFor(msg)).Push(out...).Commit(ctx)
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

// Commit sends the transaction (queen.v1.transaction) and returns one result
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
	data, status, err := t.c.request(ctx, SubjectTransaction, body)
	if err != nil {
		return nil, err
	}
	if status != 0 {
		var r wire.TxnErrorReply
		if err := json.Unmarshal(data, &r); err != nil || r.Code == "" {
			return nil, decodeError(data, status)
		}
		e := &queen.Error{Status: status, Code: r.Code, Message: r.Message, Index: r.Index, Field: r.Field, Retryable: r.Retryable}
		if status == http.StatusConflict {
			return nil, &wire.TxnAbort{TxnErrorReply: r, Err: e}
		}
		return nil, e
	}
	var out wire.TxnReply
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, queen.ErrInternal.With("decode transaction reply: %v", err)
	}
	return out.Results, nil
}

package transport

import (
	"context"
	"errors"
	"net/http"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// handleTransaction is POST /api/v1/transaction.
func (s *Service) handleTransaction(w http.ResponseWriter, r *http.Request) {
	body, release, rep, ok := s.readAdmitted(w, r)
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
	if sub := producerOf(ctx); sub != "" {
		for i := range req.Ops {
			for j := range req.Ops[i].Items {
				req.Ops[i].Items[j].ProducerSub = sub
			}
		}
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

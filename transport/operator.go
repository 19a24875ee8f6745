package transport

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// Operator is the operator API of SPEC.md §13 the transports need
// (persistence.Store).
type Operator interface {
	// InspectDedup answers the dedup inspector for the transactionId whose
	// hash is h in partition (queue, partition); queen.ErrNotFound when the
	// queue or partition does not exist.
	InspectDedup(ctx context.Context, queue, partition string, h queen.Hash) (queen.DedupInspection, error)
	// ReplayDeadLetters locks the dead letters among ids of queue (and of
	// group, "" = any) against every other replay of them, waiting while
	// one holds them, reads those that still exist (by id), calls replay
	// with them, deletes the ids replay returns and releases the locks;
	// removed lists the ids deleted (persistence.Store.ReplayDeadLetters).
	ReplayDeadLetters(ctx context.Context, queue, group string, ids []int64,
		replay func(letters []queen.DeadLetter) (remove []int64)) (removed []int64, err error)
	// Peek returns stored messages of one partition above an offset,
	// reading only; queen.ErrNotFound for an unknown queue or partition.
	Peek(ctx context.Context, q queen.PeekQuery) (queen.PeekResult, error)
	// QueueDetail returns a queue's partitions and its consumer groups'
	// cursors; queen.ErrNotFound for an unknown queue.
	QueueDetail(ctx context.Context, queue string) (queen.QueueDetail, error)
}

// peek answers GET /api/v1/queues/{queue}/messages and queen.v1.peek: 200
// with a queen.PeekResult (the stored messages of one partition above
// ?after=, in offset order, at most ?limit=, default 50, at most 1000); 400
// for bad input, 404 for an unknown queue or partition. It reads only: no
// lease is taken and no cursor moves, so consumers still get every message.
func (s *Service) peek(ctx context.Context, q queen.PeekQuery, err error) reply {
	if err != nil {
		return errReply(err)
	}
	if s.cfg.Operator == nil {
		return errReply(queen.ErrNotFound.With("this broker has no peek"))
	}
	res, err := s.cfg.Operator.Peek(ctx, q)
	if err != nil {
		return errReply(err)
	}
	return reply{status: http.StatusOK, body: res}
}

// queueDetail answers GET /api/v1/queues/{queue} and queen.v1.queue.detail
// ({"queue":"q"}): 200 with a queen.QueueDetail (partitions with their last
// offsets, consumer groups with cursor and lag per partition); 400 for a bad
// name, 404 for an unknown queue. Read-only.
func (s *Service) queueDetail(ctx context.Context, name string) reply {
	if err := queen.ValidateName(name, "queue"); err != nil {
		return errReply(err)
	}
	if s.cfg.Operator == nil {
		return errReply(queen.ErrNotFound.With("this broker has no queue detail"))
	}
	d, err := s.cfg.Operator.QueueDetail(ctx, name)
	if err != nil {
		return errReply(err)
	}
	return reply{status: http.StatusOK, body: d}
}

// queueDetailNATS decodes queen.v1.queue.detail's body {"queue":"q"}.
func (s *Service) queueDetailNATS(ctx context.Context, body []byte) reply {
	queue, err := wire.DecodeQueueDetail(body)
	if err != nil {
		return errReply(err)
	}
	return s.queueDetail(ctx, queue)
}

// dedup answers GET /api/v1/dedup and queen.v1.dedup (SPEC.md §13): 200 with
// a queen.DedupInspection; 400 for bad input, 404 for an unknown queue or
// partition. It writes nothing.
func (s *Service) dedup(ctx context.Context, q wire.DedupQuery, err error) reply {
	if err != nil {
		return errReply(err)
	}
	if s.cfg.Operator == nil {
		return errReply(queen.ErrNotFound.With("this broker has no dedup inspector"))
	}
	res, err := s.cfg.Operator.InspectDedup(ctx, q.Queue, q.Partition, q.Hash)
	if err != nil {
		return errReply(err)
	}
	return reply{status: http.StatusOK, body: res}
}

// maxReplays is how many DLQ replays one broker runs at once; more wait
// (Service.replays). Each holds a pooled connection idle in its transaction
// while its push needs others: a bound well below the pool's size means
// replays waiting for one another can never take every connection the
// push they wait for needs.
const maxReplays = 4

// replay answers POST /api/v1/dlq/replay and queen.v1.dlq.replay (SPEC.md
// §13): each dead letter selected is pushed back onto its partition with its
// original payload and traceId under the transactionId dlq:<id>, through the
// normal push path (Config.Pusher: routing, the partition actor, the window
// check), then removed when the push was queued. The dead letters are
// locked from before they are read until after they are removed
// (Operator.ReplayDeadLetters), so concurrent replays of one dead letter,
// on any broker, run one after the other: one answers moved, the others
// gone (the letter no longer exists), and it is stored once. 200 with a
// wire.ReplayReply; 400 for bad input, 404 for a queue that does not exist
// (nothing written); 503/504 (retryable, nothing pushed) when the database
// fails or the request times out before the push.
func (s *Service) replay(ctx context.Context, body []byte) reply {
	req, err := wire.DecodeReplay(body)
	if err != nil {
		return errReply(err)
	}
	if s.cfg.Operator == nil || s.cfg.Consumer == nil {
		return errReply(queen.ErrNotFound.With("this broker has no DLQ replay"))
	}
	if _, err := s.cfg.Queues.Queue(ctx, req.Queue); err != nil {
		return errReply(err)
	}
	order := req.IDs
	if len(order) == 0 {
		dls, _, err := s.cfg.Consumer.DeadLetters(ctx, queen.DLQFilter{Queue: req.Queue, ConsumerGroup: req.ConsumerGroup,
			Partition: req.Partition, From: req.From, To: req.To, Limit: req.Limit})
		if err != nil {
			return errReply(err)
		}
		for _, d := range dls {
			order = append(order, d.ID)
		}
	}
	out := wire.ReplayReply{Results: make([]wire.ReplayResult, len(order))}
	for i, id := range order {
		out.Results[i] = wire.ReplayResult{ID: id, Result: wire.Gone}
	}
	if len(order) > 0 {
		// The whole replay (waiting for another replay of the same dead
		// letters, the push, the removal) within twice the push timeout.
		rctx, cancel := context.WithTimeout(ctx, 2*s.cfg.RequestTimeout)
		defer cancel()
		select {
		case s.replays <- struct{}{}:
			defer func() { <-s.replays }()
		case <-rctx.Done():
			return errReply(queen.ErrTimeout.With("too many DLQ replays running on this broker; retry"))
		}
		pushed := false
		removed, err := s.cfg.Operator.ReplayDeadLetters(rctx, req.Queue, req.ConsumerGroup, order, func(dls []queen.DeadLetter) []int64 {
			pushed = true
			return s.replayLetters(rctx, dls, &out)
		})
		if err != nil && !pushed {
			return errReply(err)
		}
		if err != nil {
			// Pushed, but the dead letters could not be removed: the pushes
			// stand and the dead letters stay (a later replay answers
			// duplicate).
			gone := map[int64]bool{}
			for _, id := range removed {
				gone[id] = true
			}
			e := queen.AsError(err)
			for i := range out.Results {
				if r := &out.Results[i]; r.Result == wire.Moved && !gone[r.ID] {
					r.Result, r.Error, r.Code = wire.ReplayFailed, "pushed back, but the dead letter could not be removed: "+e.Message, e.Code
				}
			}
		}
	}
	for _, r := range out.Results {
		switch r.Result {
		case wire.Moved:
			out.Moved++
		case wire.ReplayDuplicate:
			out.Duplicate++
		case wire.Gone:
			out.Gone++
		default:
			out.Failed++
		}
	}
	return reply{status: http.StatusOK, body: out}
}

// replayLetters pushes the locked dead letters dls back onto their
// partitions (one push, each under ReplayTransactionID), records each
// outcome in out (whose results start gone, in the request's order), and
// returns the ids to remove: those queued. A dead letter whose partition no
// longer exists stays gone; an id repeated in the request is answered once.
func (s *Service) replayLetters(ctx context.Context, dls []queen.DeadLetter, out *wire.ReplayReply) []int64 {
	byID := make(map[int64]*queen.DeadLetter, len(dls))
	for i := range dls {
		byID[dls[i].ID] = &dls[i]
	}
	var items []*queen.Item
	var at []int // items[k] replays out.Results[at[k]]
	pushed := map[int64]bool{}
	for i := range out.Results {
		r := &out.Results[i]
		d := byID[r.ID]
		if d == nil || d.Partition == "" || pushed[r.ID] {
			continue
		}
		pushed[r.ID] = true
		txn := wire.ReplayTransactionID(r.ID)
		r.Queue, r.Partition, r.TransactionID = d.Queue, d.Partition, txn
		// The message goes back as its producer pushed it: with that
		// producer's identity, not the operator's (SPEC.md §14).
		var producer string
		if d.ProducerSub != nil {
			producer = *d.ProducerSub
		}
		items = append(items, &queen.Item{Queue: d.Queue, Partition: d.Partition, TransactionID: txn,
			TraceID: d.TraceID, Payload: d.Data, Hash: queen.HashTxn(txn), ProducerSub: producer})
		at = append(at, i)
	}
	if len(items) == 0 {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	results := s.cfg.Pusher.Push(pctx, items)
	cancel()
	if s.cfg.OnPushed != nil {
		s.cfg.OnPushed(items, results) // wakes long polls
	}
	s.countQueues(items, results)
	var queued []int64
	for k, res := range results {
		r := &out.Results[at[k]]
		s.cfg.Metrics.PushItems.WithLabelValues(string(res.Verdict)).Inc()
		switch res.Verdict {
		case queen.Queued:
			off := res.Offset
			r.Result, r.MessageID, r.Offset = wire.Moved, res.MessageID.String(), &off
			queued = append(queued, r.ID)
		case queen.Duplicate:
			r.Result, r.MessageID = wire.ReplayDuplicate, res.MessageID.String()
		default:
			r.Result = wire.ReplayFailed
			if res.Err != nil {
				r.Error, r.Code = res.Err.Message, res.Err.Code
			}
		}
	}
	return queued
}

// authorized reports whether an admin request may run: no token configured,
// or the Authorization value is "Bearer <token>" (the scheme in any case).
// The comparison is in constant time (of SHA-256 digests, so the token's
// length does not show either).
func (s *Service) authorized(header string) bool {
	if s.adminToken == nil {
		return true
	}
	const scheme = "bearer "
	if len(header) < len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(header[len(scheme):])))
	return subtle.ConstantTimeCompare(got[:], s.adminToken[:]) == 1
}

// unauthorized is the 401 of an admin route without the right token.
func unauthorized() reply {
	return errReply(queen.ErrUnauthorized.With("this admin route needs the header Authorization: Bearer <token>, the broker's QUEEN_ADMIN_TOKEN (missing or wrong)"))
}

// admin guards an HTTP admin route with the admin token (Config.AdminToken).
func (s *Service) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="queen"`)
			writeReply(w, unauthorized())
			return
		}
		h(w, r)
	}
}

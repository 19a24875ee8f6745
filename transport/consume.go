package transport

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// Consumer is the consumer side the transports need, as one value (in the
// broker, consume.Coordinator for pops and acks and persistence.Store for
// the rest).
type Consumer interface {
	Pop(ctx context.Context, req queen.PopRequest) (queen.PopResult, error)
	Ack(ctx context.Context, items []queen.AckItem) ([]queen.AckResult, error)
	ExtendLease(ctx context.Context, lease uuid.UUID, seconds int64) (time.Time, error)
	DeadLetters(ctx context.Context, f queen.DLQFilter) ([]queen.DeadLetter, int64, error)
	DeleteQueue(ctx context.Context, queue string) (existed bool, partitions int64, err error)
	ListQueues(ctx context.Context) ([]queen.QueueSummary, error)
	DeleteGroup(ctx context.Context, group string) (int64, error)
	Seek(ctx context.Context, queue, group string, req queen.SeekRequest) (int, error)
	SetSubscription(ctx context.Context, group string, ts time.Time) (int, error)
	// Transaction runs every operation in one PostgreSQL transaction and
	// returns one result per operation; a *queen.TxnConflict when an
	// operation rolled it back (rendered by wire.NewTxnAbort).
	Transaction(ctx context.Context, req *queen.TxnRequest) ([]queen.TxnOpResult, error)
}

// setSubscription answers POST /api/v1/consumer-groups/{group}/subscription
// {"subscriptionTimestamp":"<RFC 3339>"} (the upstream SDKs' call): a
// timestamp seek of the group in every queue it consumes.
func (s *Service) setSubscription(ctx context.Context, group string, body []byte) reply {
	if err := queen.ValidateName(group, "consumerGroup"); err != nil {
		return errReply(err)
	}
	ts, err := wire.DecodeSubscription(body)
	if err != nil {
		return errReply(err)
	}
	n, err := s.cfg.Consumer.SetSubscription(ctx, group, ts)
	if err != nil {
		return errReply(err)
	}
	return reply{status: http.StatusOK, body: wire.SubscriptionReply{Success: true, ConsumerGroup: group, Queues: n}}
}

// noContent is a 204 with no body (a pop that found nothing).
var noContent = reply{status: http.StatusNoContent}

// pop answers a decoded pop: 200 with the messages, or 204.
func (s *Service) pop(ctx context.Context, req queen.PopRequest, err error) reply {
	if err != nil {
		return errReply(err)
	}
	if req.Wait {
		client, _ := ctx.Value(clientKey{}).(string)
		if !s.parkPoll(client) {
			return s.tooManyPolls(client)
		}
		defer s.unparkPoll(client)
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(s.polls, cancel)()
	}
	res, err := s.cfg.Consumer.Pop(ctx, req)
	if err != nil && req.Wait && s.polls.Err() != nil {
		// Ended by StopPolls during (or before) a database call: answered
		// empty, as a parked long poll is, not 504 (whatever that call
		// claimed is rolled back, or its lease expires).
		return noContent
	}
	if err != nil {
		return errReply(err)
	}
	if len(res.Messages) == 0 {
		return noContent
	}
	s.cfg.Metrics.PopMessages.Add(float64(len(res.Messages)))
	return reply{status: http.StatusOK, body: res}
}

// parkPoll takes a slot for a long poll (a pop with wait) of client, or
// reports false when the broker already holds Config.MaxParkedPolls of
// them or client Config.MaxParkedPollsPerClient (issue 38: 8,000 polls of
// one client took a broker from 31 to 317 MiB). The slot is held until the
// poll is answered (unparkPoll).
func (s *Service) parkPoll(client string) bool {
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	if s.polling >= s.cfg.MaxParkedPolls || s.pollsOf[client] >= s.cfg.MaxParkedPollsPerClient {
		return false
	}
	s.polling++
	s.pollsOf[client]++
	return true
}

// unparkPoll gives back the slot parkPoll took.
func (s *Service) unparkPoll(client string) {
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	s.polling--
	if s.pollsOf[client]--; s.pollsOf[client] <= 0 {
		delete(s.pollsOf, client)
	}
}

// tooManyPolls is the refusal of a long poll over a cap: 429 too_many_polls
// with Retry-After.
func (s *Service) tooManyPolls(client string) reply {
	s.cfg.Metrics.PollsRefused.Inc()
	s.pollMu.Lock()
	all, mine := s.polling, s.pollsOf[client]
	s.pollMu.Unlock()
	return errReply(queen.ErrTooManyPolls.With("%d long polls are waiting on this broker (limit %d), %d of them this client's (limit %d); retry after a pause",
		all, s.cfg.MaxParkedPolls, mine, s.cfg.MaxParkedPollsPerClient))
}

// ack answers a single ack: 200 with its result object. A result that is not
// a success carries "error" (Queen clients read that key).
func (s *Service) ack(ctx context.Context, body []byte) reply {
	it, err := wire.DecodeAck(body)
	if err != nil {
		return errReply(err)
	}
	res, err := s.cfg.Consumer.Ack(ctx, []queen.AckItem{it})
	if err != nil {
		return errReply(err)
	}
	s.countAcks(res)
	return reply{status: http.StatusOK, body: res[0]}
}

// ackBatch answers a batch ack: 200 with one result per item, in order.
func (s *Service) ackBatch(ctx context.Context, body []byte) reply {
	items, err := wire.DecodeAckBatch(body)
	if err != nil {
		return errReply(err)
	}
	if len(items) == 0 {
		return reply{status: http.StatusOK, body: []queen.AckResult{}}
	}
	res, err := s.cfg.Consumer.Ack(ctx, items)
	if err != nil {
		return errReply(err)
	}
	s.countAcks(res)
	return reply{status: http.StatusOK, body: res}
}

func (s *Service) countAcks(res []queen.AckResult) {
	for _, r := range res {
		s.cfg.Metrics.AckItems.WithLabelValues(string(r.Result)).Inc()
	}
}

func (s *Service) extendLease(ctx context.Context, leaseID string, body []byte) reply {
	id, err := uuid.Parse(leaseID)
	if err != nil {
		e := queen.ErrInvalidField.With("leaseId must be a UUID, got %q", leaseID)
		e.Field = "leaseId"
		return errReply(e)
	}
	secs, err := wire.DecodeLeaseExtend(body)
	if err != nil {
		return errReply(err)
	}
	t, err := s.cfg.Consumer.ExtendLease(ctx, id, secs)
	if err != nil {
		return errReply(err)
	}
	return reply{status: http.StatusOK, body: wire.LeaseReply{LeaseID: id.String(), NewExpiresAt: t, Success: true}}
}

// extendLeaseNATS reads {"leaseId":...,"seconds":N}.
func (s *Service) extendLeaseNATS(ctx context.Context, body []byte) reply {
	leaseID, err := wire.DecodeLeaseID(body)
	if err != nil {
		return errReply(err)
	}
	return s.extendLease(ctx, leaseID, body)
}

func (s *Service) deadLetters(ctx context.Context, q url.Values) reply {
	limit, offset := 100, 0
	for _, p := range []struct {
		k   string
		dst *int
		max int
	}{{"limit", &limit, 10000}, {"offset", &offset, 1<<31 - 1}} {
		if v := q.Get(p.k); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > p.max {
				e := queen.ErrInvalidField.With("%s must be a whole number from 0 to %d, got %q", p.k, p.max, v)
				e.Field = p.k
				return errReply(e)
			}
			*p.dst = n
		}
	}
	f := queen.DLQFilter{Queue: q.Get("queue"), ConsumerGroup: q.Get("consumerGroup"), Partition: q.Get("partition"), Limit: limit, Offset: offset}
	for _, v := range []struct{ v, name string }{{f.Queue, "queue"}, {f.ConsumerGroup, "consumerGroup"}, {f.Partition, "partition"}} {
		if v.v != "" {
			if err := queen.ValidateName(v.v, v.name); err != nil {
				return errReply(err)
			}
		}
	}
	for _, t := range []struct {
		k   string
		dst **time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		if v := q.Get(t.k); v != "" {
			ts, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				e := queen.ErrInvalidField.With("%s must be an RFC 3339 time, got %q", t.k, v)
				e.Field = t.k
				return errReply(e)
			}
			*t.dst = &ts
		}
	}
	msgs, total, err := s.cfg.Consumer.DeadLetters(ctx, f)
	if err != nil {
		return errReply(err)
	}
	rep := wire.DeadLettersReply{Messages: msgs, Total: total, Limit: limit, Offset: offset}
	if next := offset + len(msgs); int64(next) < total {
		rep.NextOffset = &next
		rep.Truncated = len(msgs) < limit
	}
	return reply{status: http.StatusOK, body: rep}
}

func (s *Service) deleteQueue(ctx context.Context, name string) reply {
	// A look-alike name created before such names were refused can
	// still be deleted.
	if err := queen.ValidateNameToDelete(name, "queue"); err != nil {
		return errReply(err)
	}
	existed, parts, err := s.cfg.Consumer.DeleteQueue(ctx, name)
	if err != nil {
		return errReply(err)
	}
	s.cfg.Metrics.QueueItems.DeletePartialMatch(prometheus.Labels{"queue": name})
	if s.cfg.OnQueueDeleted != nil {
		s.cfg.OnQueueDeleted(name)
	}
	return reply{status: http.StatusOK, body: wire.DeleteQueueReply{Deleted: existed, Existed: existed, Queue: name, Partitions: parts}}
}

func (s *Service) listQueues(ctx context.Context) reply {
	qs, err := s.cfg.Consumer.ListQueues(ctx)
	if err != nil {
		return errReply(err)
	}
	counts := s.queueCounts()
	for i := range qs {
		c := counts[qs[i].Name]
		qs[i].QueuedSinceStart, qs[i].DuplicateSinceStart = c[0], c[1]
		if total := c[0] + c[1]; total > 0 {
			r := float64(c[1]) / float64(total)
			qs[i].DuplicateRate = &r
		}
	}
	return reply{status: http.StatusOK, body: wire.QueuesReply{Queues: qs}}
}

func (s *Service) deleteGroup(ctx context.Context, group string) reply {
	// A look-alike name created before such names were refused can
	// still be deleted.
	if err := queen.ValidateNameToDelete(group, "consumerGroup"); err != nil {
		return errReply(err)
	}
	n, err := s.cfg.Consumer.DeleteGroup(ctx, group)
	if err != nil {
		return errReply(err)
	}
	return reply{status: http.StatusOK, body: wire.DeleteGroupReply{Deleted: n > 0, ConsumerGroup: group, Cursors: n}}
}

func (s *Service) seek(ctx context.Context, group, queue string, body []byte) reply {
	if err := queen.ValidateName(group, "consumerGroup"); err != nil {
		return errReply(err)
	}
	if err := queen.ValidateName(queue, "queue"); err != nil {
		return errReply(err)
	}
	req, err := wire.DecodeSeek(body)
	if err != nil {
		return errReply(err)
	}
	n, err := s.cfg.Consumer.Seek(ctx, queue, group, req)
	if err != nil {
		return errReply(err)
	}
	return reply{status: http.StatusOK, body: wire.SeekReply{Success: true, ConsumerGroup: group, Queue: queue, Partitions: n}}
}

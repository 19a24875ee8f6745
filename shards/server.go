package shards

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/actors"
	"github.com/queen-mq/queen-go/lifecycle"
	"github.com/queen-mq/queen-go/transport/wire"
)

// PartitionPusher hands one partition's items to that partition's actor
// (shards.ActorPusher adapts *actors.Host to it).
type PartitionPusher interface {
	// Enqueue hands items to the partition's actor without waiting; calls from
	// one goroutine reach the actor in call order.
	Enqueue(queue, partition string, items []*queen.Item) (Waiter, error)
}

// Waiter waits for the verdicts of an enqueued push.
type Waiter interface {
	Wait(ctx context.Context) ([]queen.Result, error)
}

// ServerConfig configures a Server.
type ServerConfig struct {
	Conn   *nats.Conn
	Pusher PartitionPusher
	// Count is the shard count; default DefaultCount.
	Count int
	// Timeout bounds the wait for one shard request's verdicts; default 60s.
	Timeout time.Duration
	// MaxPayloadBytes is the largest payload an item of the internal
	// encoding may carry, as the front door's QUEEN_MAX_PAYLOAD_BYTES
	// (default queen.DefaultMaxPayloadBytes, 4 MiB; SPEC.md §10).
	MaxPayloadBytes int
	// PendingMsgs and PendingBytes bound each shard subscription's queue of
	// received messages not yet handled (the NATS client's pending limits);
	// defaults DefaultPendingMsgs and DefaultPendingBytes. A message past
	// either bound is dropped by the NATS client (a slow consumer, logged by
	// the connection's error handler): its requester gets no reply, and its
	// router answers the items failed with queen.ErrTimeout (outcome unknown,
	// retryable, SPEC.md §3). Dropped counts them.
	PendingMsgs, PendingBytes int
	// Authenticate, when set (JWT on, SPEC.md §14), checks the token a
	// shard hop carries (wire.HeaderAuthorization, the client request's,
	// sent along by the Router) at the read-write level, and returns the
	// producer identity to stamp on its items: the token's "sub", or, when
	// onBehalf (an admin token: a DLQ replay pushes with each message's
	// original producer), the hop's wire.HeaderProducerSub. A hop without
	// a valid token is refused with its 401 or 403 and nothing is written:
	// the shard subjects take no push the front door would have refused,
	// whoever may publish on them. nil: hops are not checked (JWT off).
	Authenticate func(ctx context.Context, authorization string) (producer string, onBehalf bool, e *queen.Error)

	Logger *slog.Logger
}

// The default bounds of a shard subscription's pending messages
// (ServerConfig.PendingMsgs, PendingBytes): 65,536 messages or 256 MiB
// (sixteen 16 MiB bodies), far above what the partition actors' mailbox
// bounds let wait in front of them.
const (
	DefaultPendingMsgs  = 1 << 16
	DefaultPendingBytes = 256 << 20
)

// Server serves the shard subjects this broker owns.
type Server struct {
	cfg    ServerConfig
	mu     sync.Mutex
	subs   map[int]*nats.Subscription
	closed bool
	// direct is SetDirect's handler (nil until it is set).
	direct nats.MsgHandler
	// dropped counts the messages the NATS client dropped on subscriptions
	// no longer in subs (see Dropped).
	dropped uint64
	// expired counts the requests not executed because they arrived after
	// their deadline (see Expired).
	expired atomic.Uint64
	wg      sync.WaitGroup
	// drains counts the subscriptions draining (Unserve, Stop) until NATS
	// reports them closed.
	drains sync.WaitGroup
}

// NewServer returns a Server that serves no shard yet. It refuses (a
// *lifecycle.SettingError) a missing Conn or Pusher and a negative Count,
// Timeout, MaxPayloadBytes, PendingMsgs or PendingBytes.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := errors.Join(
		lifecycle.Required("ServerConfig.Conn", cfg.Conn == nil),
		lifecycle.Required("ServerConfig.Pusher", cfg.Pusher == nil),
		lifecycle.NotNegative("ServerConfig.Count", cfg.Count),
		lifecycle.NotNegative("ServerConfig.Timeout", cfg.Timeout),
		lifecycle.NotNegative("ServerConfig.MaxPayloadBytes", cfg.MaxPayloadBytes),
		lifecycle.NotNegative("ServerConfig.PendingMsgs", cfg.PendingMsgs),
		lifecycle.NotNegative("ServerConfig.PendingBytes", cfg.PendingBytes),
	); err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	if cfg.Count == 0 {
		cfg.Count = DefaultCount
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = queen.DefaultMaxPayloadBytes
	}
	if cfg.PendingMsgs == 0 {
		cfg.PendingMsgs = DefaultPendingMsgs
	}
	if cfg.PendingBytes == 0 {
		cfg.PendingBytes = DefaultPendingBytes
	}
	return &Server{cfg: cfg, subs: map[int]*nats.Subscription{}}, nil
}

// SetDirect gives the Server the handler of clients' pushes on the shard
// subjects (messages with the header Content-Type: application/json, from a
// shard-aware client), which answers them as queen.v1.push does (the same
// validation, routing, replies and errors; SPEC.md §9, §11): the broker's
// NATS front door, transport.NATSService.ShardPush. The front door is built
// on the router and membership that are built on this Server, so the
// broker sets it once that front door exists, before the membership serves
// any shard. Until it is set such a push is answered 503 unavailable
// (retryable; shard-aware clients then use queen.v1.push).
func (s *Server) SetDirect(h nats.MsgHandler) {
	s.mu.Lock()
	s.direct = h
	s.mu.Unlock()
}

// Start does nothing: a Server subscribes shard by shard as it is told to
// Serve them (by Membership, or ServeAll). It is there so the Server has the
// lifecycle every service has (lifecycle.Service).
func (s *Server) Start(context.Context) error { return nil }

// queueGroup is the NATS queue group of shard subscriptions: should two
// brokers both serve a shard, each request reaches one of them.
const queueGroup = "queen-shard"

// ServeAll subscribes to every shard's subjects (one broker owning every shard).
func (s *Server) ServeAll() error {
	for n := 0; n < s.cfg.Count; n++ {
		if err := s.Serve(n); err != nil {
			return err
		}
	}
	return s.cfg.Conn.Flush()
}

// Serve subscribes to shard n's subjects; serving a shard twice is a no-op.
func (s *Server) Serve(n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.subs[n]; ok {
		return nil
	}
	sub, err := s.cfg.Conn.QueueSubscribe(wire.ShardPushSubject(n), queueGroup, func(m *nats.Msg) { s.handlePush(m, n) })
	if err != nil {
		return err
	}
	if err := sub.SetPendingLimits(s.cfg.PendingMsgs, s.cfg.PendingBytes); err != nil {
		return err
	}
	s.subs[n] = sub
	return nil
}

// Unserve stops serving shard n: its subscription drains (messages already
// received are still answered) and is removed. Unserving a shard not served
// is a no-op.
func (s *Server) Unserve(n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[n]
	if !ok {
		return nil
	}
	delete(s.subs, n)
	s.dropped += subDropped(sub)
	return s.drain(sub)
}

// drain drains sub (messages already received are still handled, as
// before the Server closes) and counts it in s.drains until NATS reports it
// closed. Call it with s.mu held.
func (s *Server) drain(sub *nats.Subscription) error {
	s.drains.Add(1)
	var once sync.Once
	done := func(string) { once.Do(s.drains.Done) }
	sub.SetClosedHandler(done)
	if err := sub.Drain(); err != nil {
		done("")
		return err
	}
	return nil
}

// Dropped counts the shard messages the NATS client dropped because a
// subscription's pending bound (ServerConfig.PendingMsgs, PendingBytes) was
// full, since the Server was created (queen_shard_pending_dropped_total).
func (s *Server) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.dropped
	for _, sub := range s.subs {
		n += subDropped(sub)
	}
	return n
}

// subDropped is sub.Dropped(), 0 once the subscription is closed.
func subDropped(sub *nats.Subscription) uint64 {
	n, err := sub.Dropped()
	if err != nil || n < 0 {
		return 0
	}
	return uint64(n)
}

// Expired counts the shard requests not executed because they arrived after
// the deadline their sender set (wire.HeaderDeadline; a request NATS kept in
// a reconnect buffer through an outage), since the Server was created
// (queen_shard_expired_total).
func (s *Server) Expired() uint64 { return s.expired.Load() }

// Serving lists the shards served, in order.
func (s *Server) Serving() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, 0, len(s.subs))
	for n := range s.subs {
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

// Stop unsubscribes from every shard and waits, bounded by ctx (ctx.Err()),
// first until every subscription has drained — the messages already received
// are answered, including those of shards unserved before (a hop's request
// is never left unanswered when the connection closes next): the items of
// each message's own shard are served as usual, those of a hop's other
// shards answered shutting_down, which their router serves itself —, then
// until the pushes in flight are answered. Calling it again waits again; it
// never fails otherwise.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	for n, sub := range s.subs {
		s.dropped += subDropped(sub)
		s.drain(sub) //nolint:errcheck // a subscription already closed has nothing to drain
		delete(s.subs, n)
	}
	s.mu.Unlock()
	if err := waitCtx(ctx, &s.drains); err != nil {
		return err
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return waitCtx(ctx, &s.wg)
}

// waitCtx waits for wg, or returns ctx.Err() when ctx ends first.
func waitCtx(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// handlePush runs on shard n's subscription goroutine: it enqueues every
// partition's group at once (so pushes keep their arrival order per
// partition) and waits for the verdicts on another goroutine. A client's
// push (Content-Type: application/json) goes to the direct handler instead.
// A hop from another broker's router carries the items of every shard of
// a push that the router believes this broker owns, on the subject of one
// of them (n): the items of shard n and of the other shards this Server
// serves are enqueued (shard n's also while its subscription drains, as
// before hops carried several shards), the others (their lease moved since
// the router's view) are answered failed with queen.ErrShuttingDown,
// nothing written, and the router serves them itself. A request that arrives after the deadline its sender set
// (wire.HeaderDeadline) is not executed: nothing reaches a partition, and
// it is answered queen.ErrTimeout (its sender, if still listening, retries
// with the same transaction ids).
func (s *Server) handlePush(m *nats.Msg, n int) {
	if late, e := pastDeadline(m, time.Now()); e != nil {
		respondError(m, e)
		return
	} else if late > 0 {
		s.expired.Add(1)
		s.cfg.Logger.Warn("shard push arrived after its deadline: not executed", "subject", m.Subject, "late", late)
		respondError(m, queen.ErrTimeout.With("the request on %s arrived %v after its deadline (NATS delivered it late, e.g. after an outage): not executed, nothing written; retry with the same transaction ids",
			m.Subject, late.Round(time.Millisecond)))
		return
	}
	if m.Header != nil && m.Header.Get(wire.HeaderContentType) == wire.ContentTypeJSON {
		s.mu.Lock()
		h, closed := s.direct, s.closed
		s.mu.Unlock()
		switch {
		case closed:
			respondError(m, queen.ErrShuttingDown)
		case h == nil:
			respondError(m, queen.ErrUnavailable.With("this broker does not take client pushes on %s yet; use queen.v1.push", m.Subject))
		default:
			h(m)
		}
		return
	}
	items, err := decodeItems(m.Data)
	if err != nil {
		respondError(m, queen.ErrInvalidJSON.With("%s carries the brokers' internal encoding or, with the header Content-Type: %s, the push body of queen.v1.push: %v", m.Subject, wire.ContentTypeJSON, err))
		return
	}
	sub := m.Header.Get(wire.HeaderProducerSub)
	if s.cfg.Authenticate != nil {
		producer, onBehalf, e := s.cfg.Authenticate(context.Background(), m.Header.Get(wire.HeaderAuthorization))
		if e != nil {
			s.cfg.Logger.Warn("shard push refused", "subject", m.Subject, "code", e.Code, "err", e.Message)
			respondError(m, e)
			return
		}
		if !onBehalf {
			sub = producer
		}
	}
	if sub != "" {
		for _, it := range items {
			it.ProducerSub = sub
		}
	}
	if e := checkItems(items, s.cfg.MaxPayloadBytes); e != nil {
		// The subject is reachable by any NATS client: refused whole with
		// the front door's error, nothing written (SPEC.md §10). From a
		// broker's router it means the brokers' limits differ.
		s.cfg.Logger.Warn("shard push refused", "subject", m.Subject, "code", e.Code, "field", e.Field, "err", e.Message)
		respondError(m, e)
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		failed := make([]queen.Result, len(items))
		for i := range failed {
			failed[i] = queen.FailedResult(uuid.Nil, queen.ErrShuttingDown)
		}
		m.Respond(encodeResults(nil, failed)) //nolint:errcheck
		return
	}
	// The items of the shards served, the others.
	here, elsewhere := make([]int, 0, len(items)), []int(nil)
	for i, it := range items {
		if k := queen.ShardOf(it.Queue, it.Partition, s.cfg.Count); k == n {
			here = append(here, i)
		} else if _, ok := s.subs[k]; ok {
			here = append(here, i)
		} else {
			elsewhere = append(elsewhere, i)
		}
	}
	s.wg.Add(1)
	s.mu.Unlock()
	groups := enqueueByPartition(s.cfg.Pusher, items, here)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
		defer cancel()
		results := make([]queen.Result, len(items))
		for _, i := range elsewhere {
			results[i] = queen.FailedResult(uuid.Nil, queen.ErrShuttingDown.With("shard %d is not served by this broker (its lease moved): nothing written; the sending broker serves it",
				queen.ShardOf(items[i].Queue, items[i].Partition, s.cfg.Count)))
		}
		waitGroups(ctx, groups, results)
		if err := m.Respond(encodeResults(make([]byte, 0, 48*len(results)), results)); err != nil {
			s.cfg.Logger.Warn("shard push reply not sent", "err", err)
		}
	}()
}

// pastDeadline reads m's wire.HeaderDeadline (Unix nanoseconds): how long
// ago, at now, the deadline passed (0 when it has not, or m has none), or
// the 400 invalid_field refusing a value that is not a decimal int64.
func pastDeadline(m *nats.Msg, now time.Time) (time.Duration, *queen.Error) {
	if m.Header == nil {
		return 0, nil
	}
	v := m.Header.Get(wire.HeaderDeadline)
	if v == "" {
		return 0, nil
	}
	ns, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		e := queen.ErrInvalidField.With("header %s is %q: want the deadline as Unix nanoseconds, a decimal int64", wire.HeaderDeadline, v)
		e.Field = wire.HeaderDeadline
		return 0, e
	}
	if late := now.Sub(time.Unix(0, ns)); late > 0 {
		return late, nil
	}
	return 0, nil
}

// partGroup is one partition's items of a request, handed to its actor.
type partGroup struct {
	idx []int // indexes into the request's items (and results)
	w   Waiter
	err error
}

// enqueueByPartition hands the items at idx (every item when idx is nil) to
// p, one Enqueue per partition in order of first appearance, without
// waiting: pushes enqueued one after another from one goroutine keep their
// arrival order per partition. The groups, their indexes and their items
// are carved from one allocation each: spread over many partitions, a
// request holds about one item per partition, and a few allocations per
// partition were a good part of what the collector had to do.
func enqueueByPartition(p PartitionPusher, items []*queen.Item, idx []int) []*partGroup {
	n := len(items)
	if idx != nil {
		n = len(idx)
	}
	at := func(j int) int {
		if idx == nil {
			return j
		}
		return idx[j]
	}
	byPartition := make(map[[2]string]int, n)
	of := make([]int, n) // the group of the j-th item
	var counts []int
	for j := range n {
		it := items[at(j)]
		k := [2]string{it.Queue, it.Partition}
		g, ok := byPartition[k]
		if !ok {
			g = len(counts)
			byPartition[k] = g
			counts = append(counts, 0)
		}
		of[j] = g
		counts[g]++
	}
	groups := make([]partGroup, len(counts))
	order := make([]*partGroup, len(counts))
	parts := make([][]*queen.Item, len(counts))
	idxs, its := make([]int, n), make([]*queen.Item, n)
	start := 0
	for g, c := range counts {
		end := start + c
		groups[g].idx, parts[g] = idxs[start:start:end], its[start:start:end]
		order[g] = &groups[g]
		start = end
	}
	for j, g := range of {
		i := at(j)
		groups[g].idx = append(groups[g].idx, i)
		parts[g] = append(parts[g], items[i])
	}
	for g := range groups {
		part := parts[g]
		groups[g].w, groups[g].err = p.Enqueue(part[0].Queue, part[0].Partition, part)
	}
	return order
}

// waitGroups waits for every group's verdicts and puts them at the groups'
// indexes in results; a group that failed as a whole fails each of its items.
func waitGroups(ctx context.Context, groups []*partGroup, results []queen.Result) {
	for _, g := range groups {
		var rs []queen.Result
		err := g.err
		if err == nil {
			rs, err = g.w.Wait(ctx)
		}
		for j, i := range g.idx {
			if err != nil || j >= len(rs) {
				results[i] = queen.FailedResult(uuid.Nil, queen.AsError(errOr(err)))
				continue
			}
			results[i] = rs[j]
		}
	}
}

// checkItems re-checks, on the shard side, what the front door validated
// (SPEC.md §10): the shard subjects are reachable by any NATS client, so a
// message that did not come through a front door must not be stored. It
// returns the front door's error for the first bad item (400, with its index
// and field), or nil.
func checkItems(items []*queen.Item, maxPayload int) *queen.Error {
	if len(items) > queen.MaxItems {
		e := queen.ErrTooManyItems.With("the request has %d items; the limit is %d", len(items), queen.MaxItems)
		e.Field = "items"
		return e
	}
	for i, it := range items {
		at := func(e error, field string) *queen.Error {
			return queen.AsError(e).At(i, fmt.Sprintf("items[%d].%s", i, field))
		}
		// A front door has defaulted the partition and generated the
		// transactionId: on a shard subject both must be there.
		if it.Queue != "" && it.Partition == "" {
			return at(queen.ErrMissingField.With("items[%d].partition must not be empty on a shard subject", i), "partition")
		}
		if it.Queue != "" && it.TransactionID == "" {
			return at(queen.ErrMissingField.With("items[%d].transactionId must not be empty on a shard subject", i), "transactionId")
		}
		var trace string
		if it.TraceID != nil {
			trace = *it.TraceID
		}
		// The one item validator the front doors and the clients use.
		if e := queen.ValidateItem(i, it.Queue, it.Partition, it.TransactionID, trace); e != nil {
			return e
		}
		// The one payload rule, shared with the front door's decoder.
		if e := queen.ValidatePayload(i, "payload", it.Payload, maxPayload); e != nil {
			return e
		}
	}
	return nil
}

// respondError answers m with e as the NATS API answers errors: the micro
// error headers (Nats-Service-Error-Code = the HTTP status) and the JSON
// error body (SPEC.md §10, §11).
func respondError(m *nats.Msg, e *queen.Error) {
	reply := nats.NewMsg(m.Reply)
	reply.Data, _ = json.Marshal(e)
	reply.Header.Set(ErrorHeader, e.Message)
	reply.Header.Set(ErrorCodeHeader, strconv.Itoa(e.Status))
	m.RespondMsg(reply) //nolint:errcheck // the requester went away
}

// The micro error headers of an error reply (SPEC.md §11).
const (
	ErrorHeader     = "Nats-Service-Error"
	ErrorCodeHeader = "Nats-Service-Error-Code"
)

func errOr(err error) error {
	if err != nil {
		return err
	}
	return queen.ErrInternal.With("missing verdict")
}

// ActorPusher adapts the partition actors' host to PartitionPusher.
func ActorPusher(h *actors.Host) PartitionPusher { return actorPusher{h} }

type actorPusher struct{ h *actors.Host }

func (a actorPusher) Enqueue(queue, partition string, items []*queen.Item) (Waiter, error) {
	p, err := a.h.Enqueue(queue, partition, items)
	if err != nil {
		return nil, err
	}
	return p, nil
}

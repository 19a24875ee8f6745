package shards

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/queen-mq/queen-go/actors"

	queen "github.com/queen-mq/queen-go"
)

// PartitionPusher hands one partition's items to that partition's actor
// (actors.Host satisfies it through HostAdapter-free methods).
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
	Logger  *slog.Logger
}

// Server serves the shard subjects this broker owns.
type Server struct {
	cfg    ServerConfig
	mu     sync.Mutex
	subs   map[int]*nats.Subscription
	closed bool
	wg     sync.WaitGroup
}

// NewServer returns a Server that serves no shard yet.
func NewServer(cfg ServerConfig) *Server {
	if cfg.Count <= 0 {
		cfg.Count = DefaultCount
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server{cfg: cfg, subs: map[int]*nats.Subscription{}}
}

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
	sub, err := s.cfg.Conn.QueueSubscribe(PushSubject(n), queueGroup, s.handlePush)
	if err != nil {
		return err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
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
	return sub.Drain()
}

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

// Stop unsubscribes from every shard (draining messages already received) and
// waits for the pushes in flight to be answered, or ctx to end.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	for n, sub := range s.subs {
		sub.Drain() //nolint:errcheck
		delete(s.subs, n)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// handlePush runs on the subscription's goroutine: it enqueues every
// partition's group at once (so pushes keep their arrival order per
// partition) and waits for the verdicts on another goroutine.
func (s *Server) handlePush(m *nats.Msg) {
	items, err := decodeItems(m.Data)
	if err == nil {
		err = checkItems(items)
	}
	if err != nil {
		// Only a broker's router should publish here; anything else is
		// refused whole, nothing written.
		s.cfg.Logger.Error("bad shard push message refused", "subject", m.Subject, "err", err)
		m.Respond(encodeResults(nil, nil)) //nolint:errcheck
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		failed := make([]queen.Result, len(items))
		for i := range failed {
			failed[i] = queen.Result{Verdict: queen.Failed, Offset: -1, Err: queen.ErrShuttingDown}
		}
		m.Respond(encodeResults(nil, failed)) //nolint:errcheck
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	groups := enqueueByPartition(s.cfg.Pusher, items, nil)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
		defer cancel()
		results := make([]queen.Result, len(items))
		waitGroups(ctx, groups, results)
		if err := m.Respond(encodeResults(make([]byte, 0, 48*len(results)), results)); err != nil {
			s.cfg.Logger.Warn("shard push reply not sent", "err", err)
		}
	}()
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
// arrival order per partition.
func enqueueByPartition(p PartitionPusher, items []*queen.Item, idx []int) []*partGroup {
	byPartition := map[[2]string]*partGroup{}
	var order []*partGroup
	add := func(i int) {
		k := [2]string{items[i].Queue, items[i].Partition}
		g, ok := byPartition[k]
		if !ok {
			g = &partGroup{}
			byPartition[k] = g
			order = append(order, g)
		}
		g.idx = append(g.idx, i)
	}
	if idx == nil {
		for i := range items {
			add(i)
		}
	} else {
		for _, i := range idx {
			add(i)
		}
	}
	for _, g := range order {
		part := make([]*queen.Item, len(g.idx))
		for j, i := range g.idx {
			part[j] = items[i]
		}
		g.w, g.err = p.Enqueue(part[0].Queue, part[0].Partition, part)
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
				results[i] = queen.Result{Verdict: queen.Failed, Offset: -1, Err: queen.AsError(errOr(err))}
				continue
			}
			results[i] = rs[j]
		}
	}
}

// checkItems re-checks, on the shard side, what the front door validated
// (SPEC.md §10): the shard subjects are reachable by any NATS client, so a
// message that did not come through a front door must not be stored.
func checkItems(items []*queen.Item) error {
	for i, it := range items {
		if err := queen.ValidateName(it.Queue, "queue"); err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
		if err := queen.ValidateName(it.Partition, "partition"); err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
		if it.TransactionID == "" || len(it.TransactionID) > queen.MaxTransactionIDBytes || strings.ContainsFunc(it.TransactionID, isControl) {
			return fmt.Errorf("item %d: bad transaction id", i)
		}
		if !json.Valid(it.Payload) {
			return fmt.Errorf("item %d: payload is not JSON", i)
		}
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

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

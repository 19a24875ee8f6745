package shards

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/lifecycle"
	"github.com/queen-mq/queen-go/transport/wire"
)

// Router splits push requests by shard and sends the items of the shards
// other brokers own to their owners, one hop per owner. It is safe for
// concurrent use.
type Router struct {
	nc    *nats.Conn
	count int
	// chunk is the largest internal message, kept below the server's max_payload.
	chunk int
	// owners and local make the router cluster-aware (RouterConfig.Owners).
	owners Owners
	local  PartitionPusher
	// hopTimeout bounds one request to a shard owner (0: the caller's
	// deadline only); see RouterConfig.HopTimeout.
	hopTimeout time.Duration
	stats      struct{ local, remote, hops, fallback, unreachable atomic.Uint64 }
}

// Owners is the Router's view of shard ownership (Membership).
type Owners interface {
	// RemoteOwner returns the id of the broker holding a live lease on
	// shard n when that is another broker (its items go there over NATS,
	// in one hop with the push's other shards that broker holds), and ""
	// to serve them here: this broker holds the lease, or no broker holds
	// a live one.
	RemoteOwner(n int) string
}

// RouterConfig configures a Router. Zero values take the defaults named.
type RouterConfig struct {
	// Conn carries the shard hops (required).
	Conn *nats.Conn
	// Count is the cluster's shard count; default DefaultCount.
	Count int
	// Owners and Local make the router cluster-aware: a shard's items go
	// over NATS only when Owners names another broker holding a live lease
	// on it, in one hop per owner and push (on the subject of the lowest of
	// the owner's shards, which only a broker serving it answers); every
	// other shard's items, and those of a hop with no responder (the
	// owner stopped or died) or that the broker answers shutting_down (it
	// is stopping, or no longer serves their shard: nothing written), go
	// straight to Local, this broker's partition actors. Correctness never
	// waits for ownership: the partition row lock decides every verdict
	// wherever the actor runs (SPEC.md §9). Nil Local (and Owners): every
	// shard's items go over NATS, one hop per shard on its subject
	// (wire.ShardPushSubject). Owners without Local is refused.
	Owners Owners
	Local  PartitionPusher
	// HopTimeout bounds each request to another broker's shard: a hop
	// already delivered to an owner that then dies is never answered, and
	// without a bound every push in flight across the cluster would wait
	// for its whole request timeout. A hop that times out is answered
	// failed with queen.ErrTimeout (outcome unknown: the client retries
	// with the same transaction ids and gets queued or duplicate). Default
	// 0: the caller's deadline only.
	//
	// Every hop carries its deadline (the earlier of the caller's and
	// HopTimeout's) in the header wire.HeaderDeadline, and the owner's
	// Server does not execute a hop that reaches it later (one NATS kept in
	// the connection's reconnect buffer through an outage). While Conn is
	// not connected (every NATS server unreachable, reconnecting) no hop is
	// sent at all: the items of other brokers' shards are answered failed
	// at once with queen.ErrNATSUnavailable (503, retryable, nothing
	// written); this broker's own shards are served as usual.
	HopTimeout time.Duration
}

// NewRouter returns a Router. It refuses (a *lifecycle.SettingError) a missing
// Conn, Owners without Local, and a negative Count or HopTimeout. A Router
// runs no goroutine of its own: it has no Start or Stop.
func NewRouter(cfg RouterConfig) (*Router, error) {
	if err := errors.Join(
		lifecycle.Required("RouterConfig.Conn", cfg.Conn == nil),
		lifecycle.Required("RouterConfig.Local", cfg.Owners != nil && cfg.Local == nil),
		lifecycle.NotNegative("RouterConfig.Count", cfg.Count),
		lifecycle.NotNegative("RouterConfig.HopTimeout", cfg.HopTimeout),
	); err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	if cfg.Count == 0 {
		cfg.Count = DefaultCount
	}
	nc := cfg.Conn
	chunk := int(nc.MaxPayload()) - 64<<10
	if chunk < 64<<10 {
		chunk = int(nc.MaxPayload()) / 2
	}
	return &Router{nc: nc, count: cfg.Count, chunk: chunk, owners: cfg.Owners, local: cfg.Local, hopTimeout: cfg.HopTimeout}, nil
}

// RouterStats counts the shard groups a Router handled: served here because
// this broker owns the shard or no one does (Local), and sent to the owner
// (Remote); the requests sent to other brokers (Hops: one per push, owner
// and chunk, however many of the owner's shards it carries); the chunks
// whose items were served here after all because no broker answered the
// subject, the owner did not serve them or an item was above the NATS
// server's max_payload (Fallback); and the chunks not sent because the NATS
// connection was down, their items answered failed with
// queen.ErrNATSUnavailable (Unreachable).
type RouterStats struct {
	Local, Remote, Hops, Fallback, Unreachable uint64
}

// Stats returns the counts so far.
func (r *Router) Stats() RouterStats {
	return RouterStats{Local: r.stats.local.Load(), Remote: r.stats.remote.Load(), Hops: r.stats.hops.Load(),
		Fallback: r.stats.fallback.Load(), Unreachable: r.stats.unreachable.Load()}
}

// hop is a group of a push's items sent to another broker in one request
// (one per chunk): every shard of the push one owner holds, or, for a
// router without Owners, one shard. It goes on the subject of its lowest
// shard (wire.ShardPushSubject), which only a broker serving that shard
// answers; that broker serves the items of the shards it serves and answers
// the others shutting_down (Server).
type hop struct {
	owner string // "" without Owners
	shard int    // the lowest shard of the group: its subject
	idx   []int  // indexes of the items, in request order
}

// name is the hop's destination in errors.
func (h *hop) name() string {
	if h.owner == "" {
		return "shard " + strconv.Itoa(h.shard)
	}
	return "broker " + h.owner + " (shards from " + strconv.Itoa(h.shard) + ")"
}

// Push routes items and returns one verdict per item in request order. It
// never fails as a whole: items whose shard could not be reached or answered
// in time are queen.Failed with a retryable error (their outcome may be
// unknown, so clients retry with the same transaction ids): queen.ErrTimeout
// for a hop not answered by its deadline, queen.ErrNATSUnavailable at once
// for another broker's shard while the NATS connection is down.
//
// The items of every shard one owner holds travel in one hop (chunked below
// the NATS payload limit), so a push spanning k shards of N brokers makes at
// most N-1 hops, not about k(N-1)/N.
func (r *Router) Push(ctx context.Context, items []*queen.Item) []queen.Result {
	results := make([]queen.Result, len(items))
	var here []int // indexes of the items served by this broker
	var hops []*hop
	byDest := map[string]*hop{}
	// Each shard's owner, read once per push: the view may change while
	// the push is split (a lease running out), and one partition's items
	// must all go one way, or its order breaks.
	owners := map[int]string{}
	localGroups, remoteGroups := 0, 0
	for i, it := range items {
		n := queen.ShardOf(it.Queue, it.Partition, r.count)
		owner, seen := owners[n]
		if !seen {
			if r.owners != nil {
				owner = r.owners.RemoteOwner(n)
			}
			owners[n] = owner
		}
		if r.local != nil && owner == "" {
			if !seen {
				localGroups++
			}
			here = append(here, i)
			continue
		}
		if !seen {
			remoteGroups++
		}
		key := owner
		if owner == "" {
			key = strconv.Itoa(n)
		}
		h, ok := byDest[key]
		if !ok {
			h = &hop{owner: owner, shard: n}
			byDest[key] = h
			hops = append(hops, h)
		}
		h.shard = min(h.shard, n)
		h.idx = append(h.idx, i)
	}
	var wg sync.WaitGroup
	for _, h := range hops {
		wg.Add(1)
		go func(h *hop) {
			defer wg.Done()
			r.pushHop(ctx, h, items, results)
		}(h)
	}
	if localGroups > 0 {
		r.stats.local.Add(uint64(localGroups))
		waitGroups(ctx, enqueueByPartition(r.local, items, here), results)
	}
	if remoteGroups > 0 {
		r.stats.remote.Add(uint64(remoteGroups))
	}
	wg.Wait()
	return results
}

// pushHop sends h's items in chunks below the NATS payload limit, one after
// another so that a partition's items keep request order.
func (r *Router) pushHop(ctx context.Context, h *hop, items []*queen.Item, results []queen.Result) {
	idx := h.idx
	for start := 0; start < len(idx); {
		end, size := start, 16
		for end < len(idx) {
			it := items[idx[end]]
			sz := len(it.Queue) + len(it.Partition) + len(it.TransactionID) + len(it.Payload) + 32
			if it.TraceID != nil {
				sz += len(*it.TraceID)
			}
			if end > start && (size+sz > r.chunk || it.ProducerSub != items[idx[start]].ProducerSub) {
				break // a hop carries one producer (wire.HeaderProducerSub)
			}
			size += sz
			end++
		}
		chunk := make([]*queen.Item, end-start)
		for j := range chunk {
			chunk[j] = items[idx[start+j]]
		}
		rs, err := r.request(ctx, h, chunk)
		if err == errTooLarge && r.local != nil {
			// One item above the NATS server's max_payload (an external
			// server with a smaller limit than the embedded one's 16 MiB):
			// serve it here, in order; the row lock decides its verdict
			// wherever it is served (SPEC.md §9).
			r.stats.fallback.Add(1)
			waitGroups(ctx, enqueueByPartition(r.local, items, idx[start:end]), results)
			start = end
			continue
		}
		if err == errTooLarge {
			// Refused before anything was sent (a router without Local):
			// that item alone fails, the hop goes on.
			e := queen.ErrPayloadTooLarge.With("an item for %s does not fit the NATS server's max_payload (%d bytes); raise max_payload to 16 MiB or more",
				h.name(), r.nc.MaxPayload())
			for _, i := range idx[start:end] {
				results[i] = queen.FailedResult(uuid.Nil, e)
			}
			start = end
			continue
		}
		if err == errNoResponders {
			if r.local != nil {
				// No broker answers the subject (the owner stopped or died,
				// or released the shard): serve the rest here, in order.
				r.stats.fallback.Add(1)
				waitGroups(ctx, enqueueByPartition(r.local, items, idx[start:]), results)
				return
			}
			err = queen.ErrUnavailable.With("no broker answers for %s; retry with the same transaction ids", h.name())
		}
		if err != nil {
			// This chunk's outcome may be unknown (a timeout: the owner
			// may still commit it). Nothing after it is sent or served
			// here, so no later item of its partitions can overtake it:
			// the rest of the hop fails with the same retryable error.
			for _, i := range idx[start:] {
				results[i] = queen.FailedResult(uuid.Nil, queen.AsError(err))
			}
			return
		}
		var again []int
		for j := range chunk {
			i := idx[start+j]
			results[i] = rs[j] // request answers one verdict per item, or an error
			if r.local != nil && rs[j].Verdict == queen.Failed && rs[j].Err != nil && rs[j].Err.Code == queen.ErrShuttingDown.Code {
				again = append(again, i)
			}
		}
		if len(again) > 0 {
			// The owner is shutting down, or no longer serves their
			// shards, and stored none of these: serve them here, before
			// the next chunk.
			r.stats.fallback.Add(1)
			waitGroups(ctx, enqueueByPartition(r.local, items, again), results)
		}
		start = end
	}
}

// hopMsg is a shard hop's request on subject with body, carrying ctx's
// deadline (if any) in wire.HeaderDeadline as Unix nanoseconds.
func hopMsg(ctx context.Context, subject string, body []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = body
	if dl, ok := ctx.Deadline(); ok {
		m.Header.Set(wire.HeaderDeadline, strconv.FormatInt(dl.UnixNano(), 10))
	}
	return m
}

// natsDown is the error of a hop to name (a broker or a shard) not sent
// because nc is not connected to any NATS server.
func natsDown(nc *nats.Conn, name string) *queen.Error {
	return queen.ErrNATSUnavailable.With("these items are served by another broker (%s) and this broker's NATS connection is %s (no NATS server reachable): nothing was sent or written; retry with the same transaction ids",
		name, strings.ToLower(nc.Status().String()))
}

// errNoResponders: no broker subscribes to the hop's subject. No broker
// received the items, so they may be served elsewhere.
var errNoResponders = errors.New("shards: no responders")

// errTooLarge: a chunk (then one item) above the NATS server's max_payload;
// nothing was sent.
var errTooLarge = errors.New("shards: above max_payload")

// request sends one chunk to h's subject and waits for its verdicts, at
// most until the hop's deadline (ctx's, or HopTimeout's when earlier), which
// travels with it (wire.HeaderDeadline). While the connection is down it
// sends nothing and answers queen.ErrNATSUnavailable: nats.go would keep the
// request in its reconnect buffer and deliver it when a server returns,
// long after the caller gave up.
func (r *Router) request(ctx context.Context, h *hop, chunk []*queen.Item) ([]queen.Result, error) {
	body := encodeItems(make([]byte, 0, 256*len(chunk)), chunk)
	if int64(len(body)) > r.nc.MaxPayload() {
		return nil, errTooLarge
	}
	if !r.nc.IsConnected() {
		r.stats.unreachable.Add(1)
		return nil, natsDown(r.nc, h.name())
	}
	if r.hopTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.hopTimeout)
		defer cancel()
	}
	req := hopMsg(ctx, wire.ShardPushSubject(h.shard), body)
	r.stats.hops.Add(1)
	if sub := chunk[0].ProducerSub; sub != "" {
		req.Header.Set(wire.HeaderProducerSub, sub)
	}
	// With JWT on, the client request's token goes along: the owner's
	// shard server verifies it (ServerConfig.Authenticate).
	if a := queen.AuthorizationFrom(ctx); a != "" {
		req.Header.Set(wire.HeaderAuthorization, a)
	}
	msg, err := r.nc.RequestMsgWithContext(ctx, req)
	switch {
	case err == nil:
	case errors.Is(err, nats.ErrNoResponders):
		return nil, errNoResponders
	case errors.Is(err, nats.ErrMaxPayload):
		// The body fitted; with the deadline header it does not.
		return nil, errTooLarge
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrReconnectBufExceeded):
		r.stats.unreachable.Add(1)
		return nil, natsDown(r.nc, h.name())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, context.Canceled):
		return nil, queen.ErrTimeout.With("%s did not answer in time; the outcome is unknown, retry with the same transaction ids", h.name())
	default:
		return nil, queen.ErrUnavailable.With("the request to %s failed: %v", h.name(), err)
	}
	if code := msg.Header.Get(ErrorCodeHeader); code != "" {
		// Refused whole (SPEC.md §10): the items are not written.
		e := &queen.Error{}
		if json.Unmarshal(msg.Data, e) != nil || e.Code == "" {
			return nil, queen.ErrInternal.With("%s answered status %s: %s", h.name(), code, msg.Data)
		}
		e.Status, _ = strconv.Atoi(code)
		return nil, e
	}
	rs, err := decodeResults(msg.Data)
	if err != nil {
		return nil, queen.ErrInternal.With("%s: %v", h.name(), err)
	}
	if len(rs) != len(chunk) {
		return nil, queen.ErrInternal.With("%s answered %d verdicts for %d items", h.name(), len(rs), len(chunk))
	}
	return rs, nil
}

package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// The shard-aware client's defaults (ShardOptions).
const (
	DefaultShardTimeout = 5 * time.Second
	// shardViewRetry spaces reads of the cluster view after one failed, or
	// after a shard subject had no responder.
	shardViewRetry = 5 * time.Second
)

// ShardOptions configures a shard-aware Client (ShardAware).
type ShardOptions struct {
	// Count is the cluster's shard count (SPEC.md §9; fixed when the
	// cluster's schema is created, default 64 on the brokers). 0 (the
	// default): read once from the cluster view (queen.v1.cluster,
	// shardCount) at the first push; until it is known, and for 5 s after a
	// failed read, pushes go whole to queen.v1.push. A wrong count is never
	// wrong about verdicts (any broker takes any shard's items), it only
	// brings back the broker-to-broker hop.
	Count int
	// AdminToken is sent as "Authorization: Bearer <token>" when reading the
	// cluster view, which is an admin subject on brokers with
	// QUEEN_ADMIN_TOKEN set (SPEC.md §13). Empty: no header.
	AdminToken string
	// Timeout bounds one request to a shard subject (default 5 s, at least
	// 1 ms; the push's context bounds it too). A shard that does not answer
	// in time has its items sent again, with the same transactionIds,
	// through queen.v1.push for the rest of the push's context.
	Timeout time.Duration
}

// ShardAware makes the client's Push shard-aware (SPEC.md §9): it splits
// the items by shard (XXH3-64 of queue + "\x1f" + partition modulo the
// shard count), sends each shard's items at once to that shard's subject
// queen.v1.shard.<n>.push, which only the broker owning the shard serves,
// and merges the verdicts back in request order. The broker the items
// enter owns their partitions, so a push never hops between brokers. A
// shard whose subject has no responder (its owner stopped or died), does
// not answer within Timeout, or answers shutting_down, has its items sent
// again with the same transactionIds through queen.v1.push, where any broker
// serves them: the partition's row lock decides the verdicts, so a retry of
// a stored item is duplicate with the original's id (SPEC.md §3). Without
// the option (the default), and over HTTP, every push goes whole to
// queen.v1.push (POST /api/v1/push).
func ShardAware(o ShardOptions) Option {
	if o.Timeout <= 0 {
		o.Timeout = DefaultShardTimeout
	}
	o.Timeout = max(o.Timeout, time.Millisecond)
	o.Count = max(o.Count, 0)
	return func(c *Client) { c.shard = &shardState{opts: o} }
}

// shardState is a shard-aware client's view of the cluster.
type shardState struct {
	opts ShardOptions
	mu   sync.Mutex
	// count is the shard count, 0 while unknown.
	count int
	// loading is closed when the cluster view being read arrives; nil
	// when none is being read.
	loading chan struct{}
	// stale: a shard subject had no responder; the view is read again
	// once readAt passes.
	stale  bool
	readAt time.Time
	stats  struct{ split, unsplit, groups, fallback atomic.Int64 }
}

// ShardStats are a shard-aware client's running totals (Client.ShardStats).
type ShardStats struct {
	// Split counts pushes sent to shard subjects; Unsplit pushes sent whole
	// to queen.v1.push instead (the shard count was not known yet, or an
	// item needs the broker's own validation to get its exact error).
	Split, Unsplit int64
	// Groups counts the shard groups sent to shard subjects; Fallback those
	// sent again, whole or in part, through queen.v1.push (no responder,
	// no answer within ShardOptions.Timeout, or shutting_down).
	Groups, Fallback int64
}

// ShardStats returns the running totals of a shard-aware client (zero
// without ShardAware).
func (c *Client) ShardStats() ShardStats {
	if c.shard == nil {
		return ShardStats{}
	}
	s := &c.shard.stats
	return ShardStats{Split: s.split.Load(), Unsplit: s.unsplit.Load(), Groups: s.groups.Load(), Fallback: s.fallback.Load()}
}

// shardCount returns the shard count, reading the cluster view when it is
// unknown (or stale); 0 when it is still unknown. A push that finds the
// view being read waits for it (or ctx).
func (c *Client) shardCount(ctx context.Context) int {
	st := c.shard
	if st.opts.Count > 0 {
		return st.opts.Count
	}
	st.mu.Lock()
	if ch := st.loading; ch != nil {
		st.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.count
	}
	if (st.count > 0 && !st.stale) || time.Now().Before(st.readAt) {
		n := st.count
		st.mu.Unlock()
		return n
	}
	ch := make(chan struct{})
	st.loading = ch
	st.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, st.opts.Timeout)
	v, err := c.ClusterView(rctx, st.opts.AdminToken)
	cancel()
	st.mu.Lock()
	defer st.mu.Unlock()
	st.loading = nil
	close(ch)
	st.readAt = time.Now().Add(shardViewRetry)
	if err == nil && v.ShardCount > 0 {
		st.count, st.stale = v.ShardCount, false
	}
	return st.count
}

// markStale asks for the cluster view to be read again (not before readAt).
func (st *shardState) markStale() {
	st.mu.Lock()
	st.stale = true
	st.mu.Unlock()
}

// vouch reports whether the broker's validation (SPEC.md §10) accepts it,
// by cheap checks that may say no to an item the broker would take: such a
// push goes whole to queen.v1.push, so a refusal names the request's item
// and nothing of it is written. Payloads above the brokers' default limit
// (4 MiB) are left to the broker.
func vouch(it *PushItem) bool {
	if it.Queue == "" || len(it.Queue) > queen.MaxNameBytes || len(it.Partition) > queen.MaxNameBytes ||
		len(it.TransactionID) > queen.MaxTransactionIDBytes || len(it.Payload) > queen.DefaultMaxPayloadBytes {
		return false
	}
	if it.Validate(-1) != nil { // Push has checked them; the same rule
		return false
	}
	if p := it.Payload; len(p) > 0 && queen.ValidatePayload(-1, "payload", p, queen.DefaultMaxPayloadBytes) != nil {
		return false
	}
	return true
}

// shardGroup is one shard's items of a push.
type shardGroup struct {
	shard int
	idx   []int // the items' indexes in the request
	// replies answer idx in order; err is the group's error when it got
	// no verdicts.
	replies []wire.PushReply
	err     error
}

// pushSharded is Push of a shard-aware client; ok is false when the push
// must go whole to queen.v1.push.
func (c *Client) pushSharded(ctx context.Context, items []PushItem) (out []wire.PushReply, ok bool, err error) {
	st := c.shard
	if len(items) > queen.MaxItems {
		return nil, false, nil
	}
	count := c.shardCount(ctx)
	if count <= 0 {
		return nil, false, nil
	}
	size := 0
	for i := range items {
		if !vouch(&items[i]) {
			return nil, false, nil
		}
		it := &items[i]
		size += len(it.Queue) + len(it.Partition) + len(it.TransactionID) + len(it.TraceID) + len(it.Payload) + itemOverhead
	}
	if size > maxBatchBytes {
		return nil, false, nil
	}
	st.stats.split.Add(1)

	var groups []*shardGroup
	byShard := map[int]*shardGroup{}
	lastQ, lastP, lastG := "", "", (*shardGroup)(nil)
	for i := range items {
		it := &items[i]
		g := lastG
		if g == nil || it.Queue != lastQ || it.Partition != lastP {
			n := queen.ShardOf(it.Queue, it.Partition, count)
			g = byShard[n]
			if g == nil {
				g = &shardGroup{shard: n}
				byShard[n] = g
				groups = append(groups, g)
			}
			lastQ, lastP, lastG = it.Queue, it.Partition, g
		}
		g.idx = append(g.idx, i)
	}
	st.stats.groups.Add(int64(len(groups)))
	if len(groups) == 1 {
		g := groups[0]
		g.replies, g.err = c.pushShard(ctx, g.shard, items)
	} else {
		var wg sync.WaitGroup
		for _, g := range groups[1:] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g.replies, g.err = c.pushShard(ctx, g.shard, pick(items, g.idx))
			}()
		}
		g := groups[0]
		g.replies, g.err = c.pushShard(ctx, g.shard, pick(items, g.idx))
		wg.Wait()
	}
	return merge(items, groups)
}

func pick(items []PushItem, idx []int) []PushItem {
	out := make([]PushItem, len(idx))
	for j, i := range idx {
		out[j] = items[i]
	}
	return out
}

// merge puts the groups' replies in request order. A group refused (4xx:
// nothing of it written) makes the push's error, its item index in request
// terms; the items of a group without verdicts for another reason are
// failed with the group's error.
func merge(items []PushItem, groups []*shardGroup) ([]wire.PushReply, bool, error) {
	out := make([]wire.PushReply, len(items))
	failed := 0
	for _, g := range groups {
		if g.err != nil {
			qe := queen.AsError(g.err)
			if !qe.Retryable {
				return nil, true, refusal(qe, g.idx)
			}
			for _, i := range g.idx {
				it := &items[i]
				part := it.Partition
				if part == "" {
					part = queen.DefaultPartition
				}
				out[i] = wire.PushReply{Index: i, TransactionID: it.TransactionID, QueueName: it.Queue, Partition: part,
					Status: queen.Failed, Error: qe.Message, Code: qe.Code}
				if it.TraceID != "" {
					t := it.TraceID
					out[i].TraceID = &t
				}
			}
			failed += len(g.idx)
			continue
		}
		for j, i := range g.idx {
			r := g.replies[j]
			r.Index = i
			if r.Status == queen.Failed {
				failed++
			}
			out[i] = r
		}
	}
	if failed == len(out) {
		return out, true, queen.ErrUnavailable.With("every item failed: %s", out[0].Error)
	}
	return out, true, nil
}

// refusal is a group's 4xx error naming the item by its request index.
func refusal(qe *queen.Error, idx []int) error {
	e := *qe
	if e.Index != nil && *e.Index >= 0 && *e.Index < len(idx) {
		j, i := *e.Index, idx[*e.Index]
		e.Index = &i
		e.Field = strings.Replace(e.Field, fmt.Sprintf("items[%d]", j), fmt.Sprintf("items[%d]", i), 1)
		e.Message = strings.Replace(e.Message, fmt.Sprintf("items[%d]", j), fmt.Sprintf("items[%d]", i), 1)
	}
	return fmt.Errorf("%w", &e)
}

// pushShard sends one shard's items to its subject and returns one reply
// per item, in order, or the group's error. Items the shard could not take
// (see ShardAware) go through queen.v1.push.
func (c *Client) pushShard(ctx context.Context, n int, items []PushItem) ([]wire.PushReply, error) {
	st := c.shard
	body := AppendPushRequest(make([]byte, 0, 64+len(items)*(itemOverhead+64)), items)
	sctx, cancel := context.WithTimeout(ctx, st.opts.Timeout)
	rep, err := c.roundTrip(sctx, &Request{Subject: wire.ShardPushSubject(n), Body: body, ContentType: wire.ContentTypeJSON})
	cancel()
	if err != nil {
		if errors.Is(err, queen.ErrUnavailable) {
			st.markStale() // no responder: the owner stopped, or the count is wrong
		}
		if ctx.Err() != nil {
			return nil, err
		}
		// No responder, or no answer in time: the outcome is unknown or
		// nothing was received; the same transactionIds through the public
		// subject are exact either way.
		st.stats.fallback.Add(1)
		return c.pushPublic(ctx, items)
	}
	replies, err := pushReplies(rep, len(items))
	if err != nil {
		if qe := queen.AsError(err); qe.Code == queen.ErrShuttingDown.Code || qe.Code == queen.ErrUnavailable.Code {
			st.stats.fallback.Add(1)
			return c.pushPublic(ctx, items)
		}
		return nil, err
	}
	var again []int
	for j, r := range replies {
		if r.Status == queen.Failed && r.Code == queen.ErrShuttingDown.Code {
			again = append(again, j)
		}
	}
	if len(again) > 0 {
		// The owner is shutting down and stored none of these: send them,
		// in order, where another broker serves them.
		st.stats.fallback.Add(1)
		rs, err := c.pushPublic(ctx, pick(items, again))
		if err == nil || len(rs) == len(again) {
			for k, j := range again {
				idx := replies[j].Index
				replies[j] = rs[k]
				replies[j].Index = idx
			}
		}
	}
	return replies, nil
}

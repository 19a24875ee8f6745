package consume

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
)

// Store is what the coordinator needs of a store, in the kernel's types
// (queen.PopSpec, queen.PopState): persistence.Store implements it against
// PostgreSQL, internal/storetest's MemStore in memory. Declared here, by
// its caller, so consume compiles without the database driver.
type Store interface {
	PopPartitions(ctx context.Context, spec queen.PopSpec, pids []uuid.UUID, most int) (queen.PopResult, []queen.PopState, error)
	PartitionID(ctx context.Context, queue, partition string) (uuid.UUID, error)
	Candidates(ctx context.Context, queue, group string, limit int) ([]uuid.UUID, error)
	Ack(ctx context.Context, items []queen.AckItem) ([]queen.AckResult, error)
	QueuesByLabel(ctx context.Context, namespace, task string) ([]string, error)
	Subscribe(ctx context.Context, queue, group string, from *time.Time, isNew bool) (bool, error)
}

// Options configures a Coordinator; the zero value takes the defaults.
type Options struct {
	// Recheck is how often a parked long poll looks again without a
	// wake-up (lease expiries and delayed messages wake nobody); <= 0
	// means 1s (the broker's Config.PollRecheck).
	Recheck time.Duration
	// OnAvailable, when set, is told of partitions whose messages became
	// deliverable again (a failed or retry ack), after the coordinator
	// woke its own polls, so other brokers' parked polls wake too
	// (transport.Announcer.Announce).
	OnAvailable func(queue string, pids []uuid.UUID)
}

// Coordinator serves pops (SPEC.md §4) for one broker: it keeps, per queue
// and consumer group, an in-memory hint of the partitions that may hold
// work, so a wildcard pop tries a few likely partitions instead of scanning
// them all, and it parks long polls until a push to their queue (Notify) or
// a periodic re-check. The hint is only an optimisation: PostgreSQL decides
// every pop under the consumer row lock, and a pop that finds nothing
// through the hint asks PostgreSQL for the candidates before answering
// empty, so a message committed before a pop started is visible to it. It is
// safe for concurrent use.
type Coordinator struct {
	store Store
	opts  Options

	parked atomic.Int64

	mu     sync.Mutex
	any    chan struct{} // closed (and replaced) by every Notify: label pops wait on it
	next   int           // rotates label pops over their queues
	queues map[string]*queueHint
	owner  map[uuid.UUID]string // partition id -> queue name, learnt from pops
	subbed map[[2]string]bool   // (queue, group) whose subscription is recorded
	// seq counts Notify calls; a hinted partition keeps the count of the
	// last one that named it (groupHint.in).
	seq uint64
}

type queueHint struct {
	wake   chan struct{} // closed (and replaced) by Notify
	groups map[string]*groupHint
}

type groupHint struct {
	cands []uuid.UUID
	// in holds the members of cands (pushes add often), each with the
	// Coordinator.seq of the last Notify that named it: a pop that found
	// the partition empty drops it only if no push was notified since the
	// pop began, so a message committed while the pop read stays hinted.
	in map[uuid.UUID]uint64
	// next is where the next pick starts in cands; drop keeps it on the
	// same partition, so a rotation visits every hinted partition once.
	next int
	// first holds hinted partitions that may keep messages a pop had no
	// room for, in the order reported, at most maxFirst: the ones it did
	// not reach (its batch, reply bytes or partition count were spent
	// first: queen.PopUnreached) and the ones it cut short (queen.PopCut;
	// at once with autoAck, at the ack otherwise: partial). The next pick
	// takes them before the rotation's, so what did not fit waits one pop
	// rather than a whole sweep of the hint: without it, at 10,000
	// partitions the skipped partitions gathered messages, filled later
	// pops sooner and were skipped again, and the p99 of a partition's wait
	// for its pop grew from 2.4 to 6.6 s within a minute.
	first []uuid.UUID
	// partial holds partitions a pop of several cut short (queen.PopCut)
	// under a lease, at most maxFirst: the ack that ends the lease
	// (Coordinator.Ack) moves each to first, so what the batch left behind
	// waits one ack rather than a sweep.
	partial map[uuid.UUID]struct{}
}

// maxFirst bounds a group's first and partial partitions; past it the
// oldest (partial: any) go, and stay in the rotation.
const maxFirst = 1024

// maxTries is how many partitions one wildcard pop attempt tries.
const maxTries = 8

// maxHinted bounds one group's hint (about 64 bytes a partition: 1 MiB):
// past it the older half is dropped. A partition that still holds work
// is found again by the candidate scan (PostgreSQL) or its next push.
const maxHinted = 1 << 14

// maxOwners bounds the partition-to-queue map the acks' wake-ups use
// (about 4 MiB): past it an arbitrary entry goes; a retry on a partition
// forgotten so wakes nobody early, and its polls find it at their next
// re-check.
const maxOwners = 1 << 16

// candidateLimit bounds one PostgreSQL candidate scan.
const candidateLimit = 512

// New returns the pop coordinator over store, with opts' defaults filled in.
func New(store Store, opts Options) *Coordinator {
	if opts.Recheck <= 0 {
		opts.Recheck = time.Second
	}
	return &Coordinator{store: store, opts: opts, any: make(chan struct{}), queues: map[string]*queueHint{}, owner: map[uuid.UUID]string{}, subbed: map[[2]string]bool{}}
}

// Parked returns how many long polls are waiting right now.
func (c *Coordinator) Parked() int64 { return c.parked.Load() }

func (c *Coordinator) queue(name string) *queueHint {
	q := c.queues[name]
	if q == nil {
		q = &queueHint{wake: make(chan struct{}), groups: map[string]*groupHint{}}
		c.queues[name] = q
	}
	return q
}

// Notify records that partitions pids of queue got new messages (a push
// committed, here or on another broker) and wakes the queue's parked polls.
func (c *Coordinator) Notify(queue string, pids []uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queue(queue)
	c.seq++
	for _, g := range q.groups {
		for _, pid := range pids {
			g.add(pid, c.seq)
		}
	}
	for _, pid := range pids {
		c.own(pid, queue)
	}
	close(q.wake)
	q.wake = make(chan struct{})
	close(c.any)
	c.any = make(chan struct{})
}

// Forget drops what is known of a queue (it was deleted) and wakes its polls.
func (c *Coordinator) Forget(queue string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.queues[queue]; q != nil {
		close(q.wake)
		delete(c.queues, queue)
	}
	for pid, name := range c.owner {
		if name == queue {
			delete(c.owner, pid)
		}
	}
	for key := range c.subbed {
		if key[0] == queue {
			delete(c.subbed, key)
		}
	}
}

// own records that partition pid is queue's, within maxOwners. c.mu held.
func (c *Coordinator) own(pid uuid.UUID, queue string) {
	if _, ok := c.owner[pid]; !ok && len(c.owner) >= maxOwners {
		for old := range c.owner {
			delete(c.owner, old)
			break
		}
	}
	c.owner[pid] = queue
}

// add hints pid, noticed at Notify count seq.
func (g *groupHint) add(pid uuid.UUID, seq uint64) {
	if _, ok := g.in[pid]; ok {
		g.in[pid] = seq
		return
	}
	if g.in == nil {
		g.in = map[uuid.UUID]uint64{}
	}
	if len(g.cands) >= maxHinted {
		// Drop the older half (added first); rebuild the set so the map
		// gives its buckets back.
		keep := g.cands[len(g.cands)/2:]
		g.cands = append(make([]uuid.UUID, 0, maxHinted), keep...)
		in := make(map[uuid.UUID]uint64, len(g.cands))
		for _, p := range g.cands {
			in[p] = g.in[p]
		}
		g.in = in
		g.next = 0
	}
	g.in[pid] = seq
	g.cands = append(g.cands, pid)
}

// drop removes pid from the hint. A partition before the rotation's next
// start moves next back by one: the partitions after it shift down, and
// without the step back the one that took its place would be skipped
// until the rotation came round again (at 10,000 partitions, pops emptying
// their partitions skipped as many as they emptied, and those waited a
// whole sweep more).
func (g *groupHint) drop(pid uuid.UUID) {
	if _, ok := g.in[pid]; !ok {
		return
	}
	delete(g.in, pid)
	for i, p := range g.cands {
		if p == pid {
			g.cands = append(g.cands[:i], g.cands[i+1:]...)
			if i < g.next {
				g.next--
			}
			return
		}
	}
}

// dropQuiet drops pid unless a Notify after count since named it.
func (g *groupHint) dropQuiet(pid uuid.UUID, since uint64) {
	if seq, ok := g.in[pid]; ok && seq <= since {
		g.drop(pid)
	}
}

// hold records that a pop of several cut pid short under a lease
// (groupHint.partial).
func (g *groupHint) hold(pid uuid.UUID) {
	if g.partial == nil {
		g.partial = map[uuid.UUID]struct{}{}
	}
	if len(g.partial) >= maxFirst {
		for old := range g.partial {
			delete(g.partial, old)
			break
		}
	}
	g.partial[pid] = struct{}{}
}

// putFirst records that pids may keep messages a pop had no room for
// (groupHint.first), so the next pick tries them first; partitions no
// longer hinted are left out.
func (g *groupHint) putFirst(pids []uuid.UUID) {
	for _, pid := range pids {
		if _, ok := g.in[pid]; ok {
			g.first = append(g.first, pid)
		}
	}
	if over := len(g.first) - maxFirst; over > 0 {
		g.first = append(g.first[:0], g.first[over:]...)
	}
}

// pick returns up to n distinct hinted partitions: first the ones pops
// did not reach (groupHint.first) that are still hinted, then the
// rotation's, whose start moves on by step each call (by fewer when the
// unreached filled the pick) so consumers of a group spread over the
// partitions.
func (c *Coordinator) pick(queue, group string, n, step int) []uuid.UUID {
	var out []uuid.UUID
	c.update(queue, group, func(g *groupHint) {
		if len(g.cands) == 0 {
			g.first = g.first[:0]
			return
		}
		out = make([]uuid.UUID, 0, min(n, len(g.cands)))
		taken := 0
		for ; taken < len(g.first) && len(out) < cap(out); taken++ {
			if pid := g.first[taken]; g.hinted(pid) && !slices.Contains(out, pid) {
				out = append(out, pid)
			}
		}
		g.first = append(g.first[:0], g.first[taken:]...)
		start := g.next % len(g.cands)
		seen := 0
		for ; seen < len(g.cands) && len(out) < cap(out); seen++ {
			if pid := g.cands[(start+seen)%len(g.cands)]; !slices.Contains(out, pid) {
				out = append(out, pid)
			}
		}
		g.next = (start + min(step, seen)) % len(g.cands)
	})
	return out
}

// hinted reports whether pid is in the hint.
func (g *groupHint) hinted(pid uuid.UUID) bool {
	_, ok := g.in[pid]
	return ok
}

// update runs fn on the hint of (queue, group), created on first use.
func (c *Coordinator) update(queue, group string, fn func(g *groupHint)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queue(queue)
	g := q.groups[group]
	if g == nil {
		g = &groupHint{}
		q.groups[group] = g
	}
	fn(g)
}

func (c *Coordinator) wakeChan(queue string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if queue == "" {
		return c.any
	}
	return c.queue(queue).wake
}

// Pop answers a pop (SPEC.md §4): messages, or none (HTTP 204). A long poll
// (req.Wait) waits up to req.Timeout for messages, waking on Notify for its
// queue and re-checking every Options.Recheck; it ends early, empty, when
// ctx ends.
func (c *Coordinator) Pop(ctx context.Context, req queen.PopRequest) (queen.PopResult, error) {
	deadline := time.Now().Add(req.Timeout)
	for {
		wake := c.wakeChan(req.Queue)
		res, soon, err := c.tryOnce(ctx, req)
		if err != nil || len(res.Messages) > 0 || !req.Wait {
			return res, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return res, nil
		}
		wait := min(left, c.opts.Recheck)
		if soon {
			wait = min(wait, 20*time.Millisecond)
		}
		t := time.NewTimer(wait)
		c.parked.Add(1)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			c.parked.Add(-1)
			t.Stop()
			return queen.PopResult{}, nil
		}
		c.parked.Add(-1)
		t.Stop()
	}
}

// tryOnce makes one pop attempt; soon reports that a partition was skipped
// because another request held it, so a long poll should look again shortly.
// Every pop, of a named partition, of any partition or of several, is a
// Store.PopPartitions call over a list of partitions (SPEC.md §4): a pop of
// one partition is a pop of several with most = 1.
func (c *Coordinator) tryOnce(ctx context.Context, req queen.PopRequest) (queen.PopResult, bool, error) {
	if req.Queue == "" {
		return c.tryLabels(ctx, req)
	}
	if err := c.subscribe(ctx, req); err != nil {
		return queen.PopResult{}, false, err
	}
	spec := queen.PopSpec{Group: req.ConsumerGroup, Batch: req.Batch, AutoAck: req.AutoAck,
		SubscriptionFrom: req.SubscriptionFrom, SubscriptionNew: req.SubscriptionNew}
	if req.Partition != "" {
		pid, err := c.store.PartitionID(ctx, req.Queue, req.Partition)
		if err != nil || pid == uuid.Nil {
			return queen.PopResult{}, false, err
		}
		res, states, err := c.store.PopPartitions(ctx, spec, []uuid.UUID{pid}, 1)
		if err == nil && (states[0] == queen.PopDelivered || states[0] == queen.PopCut) {
			c.learn(req.Queue, pid)
		}
		return res, false, err
	}
	spec.SkipLocked = true
	return c.tryAny(ctx, req, spec, max(req.Partitions, 1))
}

// tryAny makes one attempt to claim up to want partitions of req's queue
// (req.Partitions > 1: up to req.Batch messages or MaxPopReplyBytes, all
// leased under one id, upstream Queen's v4 pop): first over hinted
// partitions, then, when they deliver nothing, over PostgreSQL's
// candidates, at most max(want, 2*maxTries) of them. A pop of one partition
// tries up to maxTries hinted partitions, one transaction each, so it holds
// one consumer row at a time; a pop of several tries want hinted partitions
// in one transaction, then the candidates in one more.
func (c *Coordinator) tryAny(ctx context.Context, req queen.PopRequest, spec queen.PopSpec, want int) (queen.PopResult, bool, error) {
	soon := false
	tried := map[uuid.UUID]bool{}
	try := func(pids []uuid.UUID, limit int) (queen.PopResult, error) {
		var fresh []uuid.UUID
		for _, pid := range pids {
			if len(fresh) < limit && !tried[pid] {
				tried[pid] = true
				fresh = append(fresh, pid)
			}
		}
		step := len(fresh)
		if want == 1 {
			step = 1
		}
		for len(fresh) > 0 {
			call := fresh[:step]
			fresh = fresh[step:]
			c.mu.Lock()
			since := c.seq
			c.mu.Unlock()
			res, states, err := c.store.PopPartitions(ctx, spec, call, want)
			if err != nil {
				return queen.PopResult{}, err
			}
			claimed := 0
			var empty, unreached, cut []uuid.UUID
			for i, st := range states {
				pid := call[i]
				switch st {
				case queen.PopDelivered, queen.PopCut:
					c.learn(req.Queue, pid)
					claimed++
					if st == queen.PopCut {
						cut = append(cut, pid)
					}
				case queen.PopEmpty:
					empty = append(empty, pid)
				case queen.PopBusy:
					soon = true
				case queen.PopUnreached:
					unreached = append(unreached, pid)
				}
			}
			// A partition the pop cut short (queen.PopCut) keeps messages
			// now; the group's next pick tries it early (at once with
			// autoAck, at the ack that ends its lease otherwise), unless it
			// was the only one delivered: it took the batch alone, and
			// putting it first again would let one deep partition keep
			// every pop.
			if claimed == 1 {
				cut = nil
			}
			if len(cut) > 0 && spec.AutoAck {
				unreached = append(cut, unreached...)
				cut = nil
			}
			if len(empty)+len(unreached)+len(cut) > 0 {
				c.update(req.Queue, req.ConsumerGroup, func(g *groupHint) {
					for _, pid := range empty {
						g.dropQuiet(pid, since)
					}
					g.putFirst(unreached)
					for _, pid := range cut {
						g.hold(pid)
					}
				})
			}
			if len(res.Messages) > 0 {
				if want > 1 {
					res.PartitionsClaimed = claimed
				}
				return res, nil
			}
		}
		return queen.PopResult{}, nil
	}
	hinted, step := want, want
	if want == 1 {
		hinted, step = maxTries, 1
	}
	res, err := try(c.pick(req.Queue, req.ConsumerGroup, hinted, step), hinted)
	if err != nil || len(res.Messages) > 0 {
		return res, false, err
	}
	// Nothing through the hint: PostgreSQL corrects it.
	cands, err := c.candidates(ctx, req)
	if err != nil {
		return queen.PopResult{}, false, err
	}
	res, err = try(cands, max(want, 2*maxTries))
	return res, soon && len(res.Messages) == 0, err
}

// candidates asks PostgreSQL for partitions of req's queue that may hold
// work for its group and adds them to the group's hint.
func (c *Coordinator) candidates(ctx context.Context, req queen.PopRequest) ([]uuid.UUID, error) {
	cands, err := c.store.Candidates(ctx, req.Queue, req.ConsumerGroup, candidateLimit)
	if err != nil {
		return nil, err
	}
	c.update(req.Queue, req.ConsumerGroup, func(g *groupHint) {
		for _, pid := range cands {
			g.add(pid, c.seq)
		}
	})
	return cands, nil
}

// tryLabels makes one attempt on every queue labelled req.Namespace /
// req.Task, starting at a rotating queue so consumers spread.
func (c *Coordinator) tryLabels(ctx context.Context, req queen.PopRequest) (queen.PopResult, bool, error) {
	names, err := c.store.QueuesByLabel(ctx, req.Namespace, req.Task)
	if err != nil || len(names) == 0 {
		return queen.PopResult{}, false, err
	}
	c.mu.Lock()
	start := c.next % len(names)
	c.next++
	c.mu.Unlock()
	soon := false
	for i := range names {
		r := req
		r.Queue = names[(start+i)%len(names)]
		res, s, err := c.tryOnce(ctx, r)
		if err != nil || len(res.Messages) > 0 {
			return res, false, err
		}
		soon = soon || s
	}
	return queen.PopResult{}, soon, nil
}

// subscribe records the group's subscription of the queue at its first pop
// (before any partition may exist, so a group that subscribes "new" and
// waits gets what is pushed after), once per broker process.
func (c *Coordinator) subscribe(ctx context.Context, req queen.PopRequest) error {
	key := [2]string{req.Queue, req.ConsumerGroup}
	c.mu.Lock()
	done := c.subbed[key]
	c.mu.Unlock()
	if done {
		return nil
	}
	exists, err := c.store.Subscribe(ctx, req.Queue, req.ConsumerGroup, req.SubscriptionFrom, req.SubscriptionNew)
	if err != nil || !exists {
		return err
	}
	c.mu.Lock()
	c.subbed[key] = true
	c.mu.Unlock()
	return nil
}

func (c *Coordinator) learn(queue string, pid uuid.UUID) {
	c.mu.Lock()
	c.own(pid, queue)
	c.mu.Unlock()
}

// Ack applies acks (persistence.Store.Ack), moves the partitions a pop of
// several cut short to the front of their group's picks (groupHint.partial)
// and wakes the polls of queues whose messages became deliverable again
// (failed or retry acks).
func (c *Coordinator) Ack(ctx context.Context, items []queen.AckItem) ([]queen.AckResult, error) {
	res, err := c.store.Ack(ctx, items)
	if err != nil {
		return res, err
	}
	again := map[string][]uuid.UUID{}
	c.mu.Lock()
	for i, r := range res {
		pid := items[i].PartitionID
		queue, ok := c.owner[pid]
		if !ok {
			continue
		}
		if q := c.queues[queue]; q != nil {
			if g := q.groups[items[i].ConsumerGroup]; g != nil {
				if _, held := g.partial[pid]; held {
					delete(g.partial, pid)
					g.putFirst([]uuid.UUID{pid})
				}
			}
		}
		if r.Result == queen.RetryScheduled {
			again[queue] = append(again[queue], pid)
		}
	}
	c.mu.Unlock()
	for queue, pids := range again {
		c.Notify(queue, pids)
		if c.opts.OnAvailable != nil {
			c.opts.OnAvailable(queue, pids)
		}
	}
	return res, nil
}

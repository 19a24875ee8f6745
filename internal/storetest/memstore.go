package storetest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/rules"
)

// MemStore is an in-memory store for tests of the packages above
// persistence: it answers the push (actors.Store) and consume
// (consume.Store) calls of persistence.Store as PostgreSQL does, deciding
// with the same pure rules (rules.Assign, rules.Ack, rules.Bisection), so
// that RunSuite passes on both. Differences that no caller may rely on: no
// retention, no dedupCheckPayload comparison, no lock waits (one mutex
// serialises every call, so SkipLocked never skips), and time is the
// process's clock (time.Now), which AgePartitions and ExpireLeases move for
// the stored data as their PostgreSQL counterparts do. It is safe for
// concurrent use.
type MemStore struct {
	// Stateless makes the store keep nothing per partition: every commit
	// finds no duplicate and starts right after the batch's Watermark (at
	// offset 0 for -1), as if the cache's knowledge were the partition's
	// end and no other writer wrote; for measurements of the actors alone,
	// where a commit starting elsewhere would send the cache to read a gap
	// on every commit. Set it before the first call.
	Stateless bool

	ensures atomic.Int64 // partitions resolved by EnsurePartitions
	commits atomic.Int64 // CommitBundle calls

	mu     sync.Mutex
	queues map[string]*memQueue
	parts  map[uuid.UUID]*memPartition
	order  []uuid.UUID // partitions in creation order (Candidates)
	cons   map[consKey]*memConsumer
	subs   map[[2]string]*time.Time // (queue, group) -> from (nil: from the oldest)
	dead   []queen.DeadLetter
	leases queen.LeaseStats
}

type memQueue struct {
	name, namespace, task string
	opts                  queen.Options
}

type memPartition struct {
	id    uuid.UUID
	name  string
	queue *memQueue
	msgs  []memMessage // by offset (no retention: offset = first + index)
	// first is the offset of msgs[0]: 0, or with Stateless the batch's
	// watermark + 1 (the store keeps nothing, so the cache's knowledge is
	// taken as the partition's end, as if no other writer had written).
	first int64
	// byHash lists the offsets holding each hash, ascending.
	byHash map[queen.Hash][]int64
}

type memMessage struct {
	id      uuid.UUID
	txn     string
	trace   *string
	payload []byte
	hash    queen.Hash
	created time.Time
	// producer is the item's queen.Item.ProducerSub (nil for ""), as the
	// real store keeps it per segment.
	producer *string
}

type consKey struct {
	pid   uuid.UUID
	group string
}

type memConsumer struct {
	cursor     int64
	lease      uuid.UUID // uuid.Nil: none
	leaseExp   time.Time
	leaseTo    *int64
	failCounts map[int64]int32
	bisect     rules.Bisection
}

// NewMem returns an empty MemStore.
func NewMem() *MemStore {
	return &MemStore{
		queues: map[string]*memQueue{},
		parts:  map[uuid.UUID]*memPartition{},
		cons:   map[consKey]*memConsumer{},
		subs:   map[[2]string]*time.Time{},
	}
}

// Ensures returns how many partitions EnsurePartitions resolved (keys
// looked up, repeats included).
func (s *MemStore) Ensures() int64 { return s.ensures.Load() }

// Commits returns how many CommitBundle calls were made.
func (s *MemStore) Commits() int64 { return s.commits.Load() }

// PartitionIDOf is the id MemStore gives partition (queue, name): derived
// from the names, so tests can compute it without a store.
func PartitionIDOf(queueName, partition string) uuid.UUID {
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte(queueName+"\x1f"+partition))
}

// queueLocked returns queue name, created with default options on first
// use. s.mu held.
func (s *MemStore) queueLocked(name string) (*memQueue, bool) {
	if q := s.queues[name]; q != nil {
		return q, false
	}
	q := &memQueue{name: name, opts: queen.DefaultOptions()}
	s.queues[name] = q
	return q, true
}

// EnsurePartitions returns the partitions' ids in the order of keys,
// creating queues (default options) and partitions on first use, like
// persistence.Store.EnsurePartitions.
func (s *MemStore) EnsurePartitions(_ context.Context, keys []queen.PartitionKey) ([]uuid.UUID, error) {
	s.ensures.Add(int64(len(keys)))
	ids := make([]uuid.UUID, len(keys))
	if s.Stateless {
		for i, k := range keys {
			ids[i] = PartitionIDOf(k.Queue, k.Partition)
		}
		return ids, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range keys {
		ids[i] = s.partitionLocked(k.Queue, k.Partition).id
	}
	return ids, nil
}

// partitionLocked returns partition (queue, name), created on first use.
// s.mu held.
func (s *MemStore) partitionLocked(queueName, name string) *memPartition {
	id := PartitionIDOf(queueName, name)
	if p := s.parts[id]; p != nil {
		return p
	}
	q, _ := s.queueLocked(queueName)
	p := &memPartition{id: id, name: name, queue: q, byHash: map[queen.Hash][]int64{}}
	s.parts[id] = p
	s.order = append(s.order, id)
	return p
}

// CommitBundle runs the push transaction of SPEC.md §3 for every batch
// (each names a distinct partition), like persistence.Store.CommitBundle:
// the window is the queue's dedupWindowSeconds at the moment of the call; a
// leader is a duplicate of the oldest stored message with its hash whose
// created_at is inside the window (as the probe finds it); rules.Assign
// decides the rest. A batch
// of a partition EnsurePartitions never returned is answered
// queen.ErrPartitionGone for the whole bundle, nothing written.
func (s *MemStore) CommitBundle(_ context.Context, bs []*queen.PushBatch) ([]queen.PushOutcome, error) {
	s.commits.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	outs := make([]queen.PushOutcome, len(bs))
	parts := make([]*memPartition, len(bs))
	for k, b := range bs {
		p := s.parts[b.PartitionID]
		if s.Stateless {
			p = &memPartition{id: b.PartitionID, queue: &memQueue{opts: queen.DefaultOptions()}, byHash: map[queen.Hash][]int64{}, first: max(b.Watermark+1, 0)}
		}
		if p == nil {
			err := queen.ErrPartitionGone.With("partition %s does not exist", b.PartitionID)
			for i := range outs {
				outs[i] = queen.PushOutcome{Results: make([]queen.Result, len(bs[i].Items)), Err: err}
				for j := range outs[i].Results {
					outs[i].Results[j] = queen.FailedResult(bs[i].PartitionID, err)
				}
			}
			return outs, err
		}
		parts[k] = p
	}
	now := time.Now()
	for k, b := range bs {
		outs[k] = s.commitLocked(parts[k], b, now)
	}
	return outs, nil
}

// commitLocked commits one batch to p at time now. s.mu held.
func (s *MemStore) commitLocked(p *memPartition, b *queen.PushBatch, now time.Time) queen.PushOutcome {
	window := p.queue.opts.DedupWindowSeconds
	last := p.first + int64(len(p.msgs)) - 1
	if n := len(p.msgs); n > 0 && !now.After(p.msgs[n-1].created) {
		now = p.msgs[n-1].created.Add(time.Microsecond) // monotone per partition, as under the row lock
	}
	out := queen.PushOutcome{Results: make([]queen.Result, len(b.Items)), Window: window, FullProbe: b.Watermark < 0}
	cut := now.Add(-time.Duration(window) * time.Second)
	clean := rules.Assign(out.Results, b.Items, b.LeaderOf, p.id, window, last, func(h queen.Hash) (rules.Original, bool) {
		for _, off := range p.byHash[h] {
			if m := p.msgs[off-p.first]; m.created.After(cut) {
				return rules.Original{Offset: off, MessageID: m.id}, true
			}
		}
		return rules.Original{}, false
	}, func(int64) uuid.UUID { return uuid.Must(uuid.NewV7()) })
	out.FirstOffset, out.LastOffset = last+1, last+int64(clean)
	if clean == 0 {
		return out
	}
	out.CreatedAt = now
	for i, it := range b.Items {
		r := out.Results[i]
		if r.Verdict != queen.Queued {
			continue
		}
		p.msgs = append(p.msgs, memMessage{id: r.MessageID, txn: it.TransactionID, trace: it.TraceID, payload: it.Payload, hash: it.Hash, created: now, producer: producerOf(it)})
		p.byHash[it.Hash] = append(p.byHash[it.Hash], r.Offset)
	}
	return out
}

// Configure creates or reconfigures a queue like persistence.Store.Configure
// (a full replace unless req.Merge; labels kept unless given). The reply
// carries Created, the options and the labels; Changed is not computed.
func (s *MemStore) Configure(_ context.Context, req queen.ConfigureRequest) (queen.ConfigureResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, created := s.queueLocked(req.Queue)
	base := queen.DefaultOptions()
	if req.Merge {
		base = q.opts
	}
	next := req.Options.Apply(base)
	if req.Guard != nil {
		if err := req.Guard(created, q.opts, next); err != nil {
			if created {
				delete(s.queues, req.Queue)
			}
			return queen.ConfigureResult{}, err
		}
	}
	q.opts = next
	if req.NamespaceSet {
		q.namespace = req.Namespace
	}
	if req.TaskSet {
		q.task = req.Task
	}
	return queen.ConfigureResult{Queue: q.name, Namespace: q.namespace, Task: q.task, Options: next, Created: created}, nil
}

// AgePartitions moves the stored time of partitions pids back by d, like
// persistence.Store.AgePartitions (tests only): their messages look d
// older to the window check and the visibility rules.
func (s *MemStore) AgePartitions(_ context.Context, pids []uuid.UUID, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pid := range pids {
		if p := s.parts[pid]; p != nil {
			for i := range p.msgs {
				p.msgs[i].created = p.msgs[i].created.Add(-d)
			}
		}
	}
	return nil
}

// ExpireLeases makes every lease held now expired (as if its leaseTime had
// passed), without settling it: the next pop or ack of its row does.
func (s *MemStore) ExpireLeases(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	past := time.Now().Add(-time.Second)
	for _, c := range s.cons {
		if c.lease != uuid.Nil {
			c.leaseExp = past
		}
	}
	return nil
}

// PartitionID returns the id of partition (queue, name), or uuid.Nil when
// it does not exist (pops never create partitions).
func (s *MemStore) PartitionID(_ context.Context, queueName, partition string) (uuid.UUID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := PartitionIDOf(queueName, partition)
	if s.parts[id] == nil {
		return uuid.Nil, nil
	}
	return id, nil
}

// QueuesByLabel returns the queues labelled namespace and task ("" = any),
// by name.
func (s *MemStore) QueuesByLabel(_ context.Context, namespace, task string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name, q := range s.queues {
		if (namespace == "" || q.namespace == namespace) && (task == "" || q.task == task) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Subscribe records group's subscription of queue at its first pop: from,
// or now when isNew, or from the oldest message (SPEC.md §4); a no-op once
// subscribed. exists is false when the queue does not exist.
func (s *MemStore) Subscribe(_ context.Context, queueName, group string, from *time.Time, isNew bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queues[queueName] == nil {
		return false, nil
	}
	s.subscribeLocked(queueName, group, from, isNew)
	return true, nil
}

// subscribeLocked records the subscription unless there is one. s.mu held.
func (s *MemStore) subscribeLocked(queueName, group string, from *time.Time, isNew bool) {
	key := [2]string{queueName, group}
	if _, ok := s.subs[key]; ok {
		return
	}
	if isNew {
		now := time.Now()
		from = &now
	}
	s.subs[key] = from
}

// consumerLocked returns (p, group)'s consumer row, created on first use
// at the group's subscription point (consume_ensure.sql): a pop (subscribe)
// records the subscription first when the group has none. created reports
// a new row. s.mu held.
func (s *MemStore) consumerLocked(p *memPartition, group string, subscribe bool, from *time.Time, isNew bool) (c *memConsumer, created bool) {
	k := consKey{p.id, group}
	if c := s.cons[k]; c != nil {
		return c, false
	}
	if subscribe {
		s.subscribeLocked(p.queue.name, group, from, isNew)
	}
	c = &memConsumer{cursor: -1, failCounts: map[int64]int32{}}
	if at := s.subs[[2]string{p.queue.name, group}]; at != nil {
		for off := len(p.msgs) - 1; off >= 0; off-- {
			if p.msgs[off].created.Before(*at) {
				c.cursor = int64(off)
				break
			}
		}
	}
	s.cons[k] = c
	return c, true
}

// live reports whether c holds a lease that has not expired at now.
func (c *memConsumer) live(now time.Time) bool {
	return c.lease != uuid.Nil && c.leaseExp.After(now)
}

// expireLocked settles an expired lease nobody released, as
// persistence's expireLease: a span of several unacked messages bisects
// the next deliveries, a single message counts one failed delivery and is
// dead-lettered past retryLimit. s.mu held.
func (s *MemStore) expireLocked(p *memPartition, group string, c *memConsumer, now time.Time) {
	if c.live(now) || c.lease == uuid.Nil {
		return
	}
	leaseTo := c.leaseTo
	c.lease, c.leaseTo, c.leaseExp = uuid.Nil, nil, time.Time{}
	if leaseTo == nil || c.cursor >= *leaseTo {
		return
	}
	off := c.cursor + 1
	if off >= int64(len(p.msgs)) || off > *leaseTo {
		return
	}
	s.leases.Expiries++
	charge, bisected := c.bisect.Expire(c.cursor, off, *leaseTo, now)
	if bisected {
		s.leases.Bisections++
	}
	if !charge {
		return
	}
	c.failCounts[off]++
	if attempts := c.failCounts[off]; int64(attempts) > p.queue.opts.RetryLimit {
		s.deadLetterLocked(p, group, off, queen.LeaseExpiredError, attempts, now)
		s.leases.DeadLettered++
		c.cursor = off
		c.bisect.Mark = off
		for o := range c.failCounts {
			if o <= off {
				delete(c.failCounts, o)
			}
		}
	}
}

// producerOf is the stored form of it's producer: nil when it has none.
func producerOf(it *queen.Item) *string {
	if it.ProducerSub == "" {
		return nil
	}
	sub := it.ProducerSub
	return &sub
}

// deadLetterLocked copies the message at off to the DLQ. s.mu held.
func (s *MemStore) deadLetterLocked(p *memPartition, group string, off int64, errText string, attempts int32, now time.Time) {
	m := p.msgs[off]
	s.dead = append(s.dead, queen.DeadLetter{
		ID: int64(len(s.dead) + 1), Queue: p.queue.name, Partition: p.name, PartitionID: p.id.String(),
		ConsumerGroup: group, Offset: off, MessageID: m.id.String(), TransactionID: m.txn, TraceID: m.trace,
		Data: m.payload, Error: errText, Attempts: int(attempts), CreatedAt: m.created, DeadAt: now,
		ErrorMessage: errText, RetryCount: int(attempts) - 1, ProducerSub: m.producer,
	})
}

// DeadLetters lists dead letters oldest first, filtered like
// persistence.Store.DeadLetters (queue, group, partition; the time bounds,
// Limit, Offset and MaxBytes are ignored), with their count.
func (s *MemStore) DeadLetters(_ context.Context, f queen.DLQFilter) ([]queen.DeadLetter, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []queen.DeadLetter{}
	for _, d := range s.dead {
		if (f.Queue == "" || d.Queue == f.Queue) && (f.ConsumerGroup == "" || d.ConsumerGroup == f.ConsumerGroup) &&
			(f.Partition == "" || d.Partition == f.Partition) {
			out = append(out, d)
		}
	}
	return out, int64(len(out)), nil
}

// queen.LeaseStats returns what pops and acks settled of expired leases.
func (s *MemStore) LeaseStats() queen.LeaseStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leases
}

// PopPartitions is a multi-partition pop, like
// persistence.Store.PopPartitions: partitions pids in order, claimed until
// most (<= 0: no bound), spec.Batch messages or spec.MaxBytes are reached,
// every claimed span leased under one id.
func (s *MemStore) PopPartitions(_ context.Context, spec queen.PopSpec, pids []uuid.UUID, most int) (queen.PopResult, []queen.PopState, error) {
	states := make([]queen.PopState, len(pids))
	if len(pids) == 0 {
		return queen.PopResult{}, states, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	lease := spec.LeaseID
	if lease == uuid.Nil && !spec.AutoAck {
		lease = uuid.Must(uuid.NewV7())
	}
	maxBytes := spec.MaxBytes
	if maxBytes <= 0 {
		maxBytes = queen.MaxPopReplyBytes
	}
	var out queen.PopResult
	var exp time.Time
	size, claimed := 0, 0
	for i, pid := range pids {
		states[i] = queen.PopBusy
		p := s.parts[pid]
		if p == nil {
			continue
		}
		c, _ := s.consumerLocked(p, spec.Group, true, spec.SubscriptionFrom, spec.SubscriptionNew)
		if c.live(now) {
			continue
		}
		s.expireLocked(p, spec.Group, c, now)
		left := spec.Batch - len(out.Messages)
		if left <= 0 || (most > 0 && claimed >= most) || (len(out.Messages) > 0 && size+queen.PopMessageOverhead > maxBytes) {
			states[i] = queen.PopUnreached
			continue
		}
		ps := spec
		ps.PartitionID, ps.MaxBytes, ps.BytesStrict = pid, maxBytes-size, spec.BytesStrict || len(out.Messages) > 0
		res, st := s.claimLocked(p, ps, c, left, now)
		states[i] = st
		if st != queen.PopDelivered && st != queen.PopCut {
			continue
		}
		if !spec.AutoAck {
			exp = s.leaseLocked(p, c, lease, res.Messages[len(res.Messages)-1].Offset, now)
		}
		size += out.Join(res)
		claimed++
	}
	if claimed > 0 && !spec.AutoAck {
		setLease(&out, lease, exp)
	}
	return out, states, nil
}

// claimLocked builds the messages (at most batch, within the row's
// bisection and spec.MaxBytes) of p above c's cursor that are visible at
// now, and with spec.AutoAck moves the cursor past them. s.mu held.
func (s *MemStore) claimLocked(p *memPartition, spec queen.PopSpec, c *memConsumer, batch int, now time.Time) (queen.PopResult, queen.PopState) {
	limit, stall, changed := c.bisect.Deliver(c.cursor, batch, now)
	if changed && !c.bisect.Active {
		s.leases.Stalls++
		s.leases.StallSeconds += stall.Seconds()
	}
	last := int64(len(p.msgs)) - 1
	if c.cursor >= last {
		return queen.PopResult{}, queen.PopEmpty
	}
	opts := p.queue.opts
	if opts.WindowBuffer > 0 && p.msgs[last].created.After(now.Add(-time.Duration(opts.WindowBuffer)*time.Second)) {
		return queen.PopResult{}, queen.PopNotYet
	}
	visible := now.Add(-time.Duration(opts.DelayedProcessing) * time.Second)
	maxBytes := spec.MaxBytes
	if maxBytes <= 0 {
		maxBytes = queen.MaxPopReplyBytes
	}
	var res queen.PopResult
	size := 0
	pidText := p.id.String()
	off := c.cursor + 1
	for ; off <= last && len(res.Messages) < limit; off++ {
		m := p.msgs[off]
		if m.created.After(visible) {
			break
		}
		if size += queen.PopMessageBytes(len(m.payload), m.producer); size > maxBytes && (len(res.Messages) > 0 || spec.BytesStrict) {
			break
		}
		res.Messages = append(res.Messages, queen.Message{
			ID: m.id.String(), TransactionID: m.txn, TraceID: m.trace, Data: m.payload, CreatedAt: m.created,
			PartitionID: pidText, Partition: p.name, Queue: p.queue.name, Offset: off, ConsumerGroup: spec.Group,
			RetryCount: int(c.failCounts[off]), ProducerSub: m.producer,
		})
	}
	if len(res.Messages) == 0 {
		return queen.PopResult{}, queen.PopNotYet
	}
	state := queen.PopDelivered
	if off <= last && !p.msgs[off].created.After(visible) {
		state = queen.PopCut // the batch or the bytes ended first
	}
	res.Queue, res.Partition, res.PartitionID, res.ConsumerGroup = p.queue.name, p.name, pidText, spec.Group
	if spec.AutoAck {
		to := res.Messages[len(res.Messages)-1].Offset
		c.cursor = to
		for off := range c.failCounts {
			if off <= to {
				delete(c.failCounts, off)
			}
		}
	}
	return res, state
}

// leaseLocked leases c's span up to last under id for the queue's
// leaseTime and returns the expiry. s.mu held.
func (s *MemStore) leaseLocked(p *memPartition, c *memConsumer, id uuid.UUID, last int64, now time.Time) time.Time {
	to := last
	c.lease, c.leaseTo = id, &to
	c.leaseExp = now.Add(time.Duration(p.queue.opts.LeaseTime) * time.Second)
	return c.leaseExp
}

// setLease writes lease id and its expiry into res and its messages.
func setLease(res *queen.PopResult, id uuid.UUID, exp time.Time) {
	ls := id.String()
	res.LeaseID, res.LeaseExpiresAt = &ls, &exp
	for i := range res.Messages {
		res.Messages[i].LeaseID = &ls
	}
}

// Candidates returns up to limit partitions of queue that group may take
// now (messages above its cursor, no live lease), in creation order.
func (s *MemStore) Candidates(_ context.Context, queueName, group string, limit int) ([]uuid.UUID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []uuid.UUID
	for _, pid := range s.order {
		if len(out) >= limit {
			break
		}
		p := s.parts[pid]
		if p == nil || p.queue.name != queueName {
			continue
		}
		cursor := int64(-1)
		if c := s.cons[consKey{pid, group}]; c != nil {
			if c.live(now) {
				continue
			}
			cursor = c.cursor
		}
		if int64(len(p.msgs))-1 > cursor {
			out = append(out, pid)
		}
	}
	return out, nil
}

// Ack applies acks as offset commits (SPEC.md §4), like
// persistence.Store.Ack: per consumer row, items resolve to offsets (by
// offset, or by transactionId to the lowest offset above the cursor),
// rules.Ack decides, dead letters are copied. An item naming an offset and
// a transactionId of different messages refuses the whole call
// (queen.ErrInvalidField), nothing applied.
func (s *MemStore) Ack(_ context.Context, items []queen.AckItem) ([]queen.AckResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, it := range items {
		p := s.parts[it.PartitionID]
		if p == nil || it.Offset < 0 || it.TransactionID == "" || it.Offset >= int64(len(p.msgs)) {
			continue
		}
		if p.msgs[it.Offset].hash != queen.HashTxn(it.TransactionID) {
			return nil, queen.ErrInvalidField.With("transactionId %q is not the message at offset %d of partition %s: give one of them, or both of the same message", it.TransactionID, it.Offset, p.id).At(i, "transactionId")
		}
	}
	out := make([]queen.AckResult, len(items))
	var keys []consKey
	byKey := map[consKey][]int{}
	for i, it := range items {
		out[i] = queen.AckResult{Index: i, TransactionID: it.TransactionID, PartitionID: it.PartitionID.String()}
		k := consKey{it.PartitionID, it.ConsumerGroup}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], i)
	}
	now := time.Now()
	for _, k := range keys {
		s.ackRowLocked(k, items, byKey[k], out, now)
	}
	return out, nil
}

// ackRowLocked applies the acks idx of items to consumer row k. s.mu held.
func (s *MemStore) ackRowLocked(k consKey, items []queen.AckItem, idx []int, out []queen.AckResult, now time.Time) {
	p := s.parts[k.pid]
	if p == nil {
		for _, i := range idx {
			out[i].Result = queen.Unresolvable
			out[i].Error = fmt.Sprintf("partition %s does not exist", k.pid)
		}
		return
	}
	c, created := s.consumerLocked(p, k.group, false, nil, false)
	s.expireLocked(p, k.group, c, now)
	last := int64(len(p.msgs)) - 1
	var targets []rules.AckTarget
	var at []int
	for _, i := range idx {
		it := &items[i]
		off := it.Offset
		if off >= 0 {
			if off > last {
				out[i].Result = queen.Unresolvable
				out[i].Error = fmt.Sprintf("offset %d was never allocated in partition %s (last offset %d)", off, k.pid, last)
				continue
			}
		} else {
			offs := p.byHash[it.Hash]
			if len(offs) == 0 {
				out[i].Result = queen.Unresolvable
				out[i].Error = fmt.Sprintf("transactionId %q is not in partition %s's sidecar (never pushed there, or aged out); ack by offset instead", it.TransactionID, k.pid)
				continue
			}
			j := sort.Search(len(offs), func(j int) bool { return offs[j] > c.cursor })
			if j == len(offs) {
				out[i].Result, out[i].Success = queen.Stale, true
				continue
			}
			off = offs[j]
		}
		o := off
		out[i].Offset = &o
		targets = append(targets, rules.AckTarget{Offset: off, Status: it.Status, LeaseID: it.LeaseID, Error: it.Error})
		at = append(at, i)
	}
	row := rules.ConsumerRow{Partition: k.pid.String(), Group: k.group, Cursor: c.cursor, Lease: c.lease,
		HasLease: c.lease != uuid.Nil, Live: c.live(now), LeaseTo: c.leaseTo, RetryLimit: p.queue.opts.RetryLimit, FailCounts: c.failCounts}
	d := rules.Ack(row, targets)
	for n, v := range d.Verdicts {
		out[at[n]].Result, out[at[n]].Success, out[at[n]].Error = v.Result, v.Success, v.Error
	}
	for _, dl := range d.DeadLetters {
		s.deadLetterLocked(p, k.group, dl.Offset, dl.Error, dl.Attempts, now)
	}
	cursor := d.Cursor
	if created && d.Cursor == c.cursor && len(d.DeadLetters) == 0 && len(d.FailCounts) == 0 {
		delete(s.cons, k) // nothing applied: no row for a group that never popped
	} else {
		c.cursor, c.failCounts = d.Cursor, d.FailCounts
		if !d.KeepLease {
			c.lease, c.leaseTo, c.leaseExp = uuid.Nil, nil, time.Time{}
		}
	}
	for _, i := range idx {
		cur := cursor
		out[i].Cursor = &cur
	}
}

// Push is a test convenience: it pushes one item per transaction id to
// (queue, partition) as the actors would (EnsurePartitions, then one
// CommitBundle with the leaders marked), payload {"n":i}, and returns the
// partition's id and the verdicts. It panics on an error (MemStore has
// none for a partition it created).
func (s *MemStore) Push(queueName, partition string, txns ...string) (uuid.UUID, []queen.Result) {
	ctx := context.Background()
	ids, err := s.EnsurePartitions(ctx, []queen.PartitionKey{{Queue: queueName, Partition: partition}})
	if err != nil {
		panic(err)
	}
	outs, err := s.CommitBundle(ctx, []*queen.PushBatch{batch(ids[0], queueName, partition, txns...)})
	if err != nil {
		panic(err)
	}
	return ids[0], outs[0].Results
}

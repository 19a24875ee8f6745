package consumers

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/target"
	"github.com/queen-mq/queen-go/loadtest/txnid"
	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/rules"
	"github.com/queen-mq/queen-go/transport/client"
)

// fakeConsumeBroker is one queue held in memory with the consume semantics
// of SPEC.md §4: per (group, partition) a cursor and a lease on a span; a
// completed ack commits the cursor; a failed ack releases the span and
// counts a retry, and the retryLimit+1-th failure dead-letters the message
// and moves the cursor past it; completed acks above a failure in one call
// are not applied. Its bug knobs make it misbehave for the audit to catch.
type fakeConsumeBroker struct {
	mu         sync.Mutex
	queue      string
	parts      []string
	partIDs    []string
	msgs       [][]fakeMsg
	groups     map[string][]*fakeCursor
	dead       []persistence.StoredDeadLetter
	retryLimit int
	rr         int
	changed    chan struct{}
	// pops counts pops, partitionPops those of one partition.
	pops, partitionPops int

	// loseAckReplies: every n-th ack call is answered with a timeout;
	// odd ones applied, even ones not applied (and the lease dropped, as
	// if it expired).
	loseAckReplies int
	ackCalls       int
	// dlqEarly dead-letters at the retryLimit-th failure.
	dlqEarly bool
	// skipAfterAck moves the cursor one further at the first ack that ends
	// a leased span after every 50 acks (the message skipped was never
	// delivered to the group: the audit must say so).
	skipAfterAck bool
	acksSeen     int
	// hidePartition is never served (the drain times out).
	hidePartition string
	// leaseTTL > 0 models lease expiry as the broker does (SPEC.md §4): a
	// lease older than leaseTTL is expired at the next pop; a single
	// unacked message counts one failed delivery, several are bisected
	// (rules.Bisection, as the broker does); acks release a lease
	// only on a failure or at its span's end. 0: leases never expire and
	// every ack call releases the leases it touched.
	leaseTTL time.Duration
	// crashesOn, when set with leaseTTL, lets a lease expire only once its
	// unacked span holds a message the consumer crashes on (it has
	// abandoned the span): a consumer that a busy machine merely slows
	// down never loses its lease to the wall clock.
	crashesOn func(txn string) bool
}

type fakeMsg struct {
	txn     string
	created time.Time
	// gone: deleted by retention (never delivered again).
	gone bool
}

type fakeCursor struct {
	cursor      int64
	lease       string
	leaseAt     time.Time
	leaseTo     int64
	retryOffset int64
	retryCount  int
	bisect      rules.Bisection
}

func newFakeConsumeBroker(queue string, parts []string, retryLimit int) *fakeConsumeBroker {
	f := &fakeConsumeBroker{queue: queue, parts: parts, msgs: make([][]fakeMsg, len(parts)), groups: map[string][]*fakeCursor{},
		retryLimit: retryLimit, changed: make(chan struct{})}
	for range parts {
		f.partIDs = append(f.partIDs, uuid.NewString())
	}
	return f
}

// notify wakes the parked long polls; the caller holds mu.
func (f *fakeConsumeBroker) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// push stores txns in partition p.
func (f *fakeConsumeBroker) push(p int, txns ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, txn := range txns {
		f.msgs[p] = append(f.msgs[p], fakeMsg{txn: txn, created: time.Now()})
	}
	f.notify()
}

func (f *fakeConsumeBroker) cursors(group string) []*fakeCursor {
	cs := f.groups[group]
	if cs == nil {
		for range f.parts {
			cs = append(cs, &fakeCursor{cursor: -1, retryOffset: -1})
		}
		f.groups[group] = cs
	}
	return cs
}

func (f *fakeConsumeBroker) Pop(ctx context.Context, r target.PopReq) (queen.PopResult, error) {
	f.mu.Lock()
	f.pops++
	if r.Partition != "" {
		f.partitionPops++
	}
	f.mu.Unlock()
	timer := time.NewTimer(r.Wait)
	defer timer.Stop()
	for {
		f.mu.Lock()
		res, ok := f.tryPop(r.Queue, r.Partition, r.Group, r.Batch)
		changed := f.changed
		f.mu.Unlock()
		if ok || r.Wait == 0 {
			return res, nil
		}
		select {
		case <-ctx.Done():
			return res, queen.ErrTimeout.With("pop: %v", ctx.Err())
		case <-timer.C:
			return res, nil
		case <-changed:
		}
	}
}

func (f *fakeConsumeBroker) tryPop(queue, partition, group string, batch int) (queen.PopResult, bool) {
	var res queen.PopResult
	if queue != f.queue {
		return res, false
	}
	cs := f.cursors(group)
	for i := range f.parts {
		p := (f.rr + i) % len(f.parts)
		c := cs[p]
		last := int64(len(f.msgs[p])) - 1
		if c.lease != "" && f.leaseTTL > 0 && time.Since(c.leaseAt) > f.leaseTTL && f.abandoned(p, c) {
			f.expire(group, p, c)
		}
		// Retention's deletions are skipped (SPEC.md §4: a pop reads what is
		// stored above the cursor).
		start := c.cursor + 1
		for start <= last && f.msgs[p][start].gone {
			start++
		}
		if c.lease != "" || start > last || f.parts[p] == f.hidePartition || (partition != "" && partition != f.parts[p]) {
			continue
		}
		f.rr = p + 1
		c.lease, c.leaseAt = uuid.NewString(), time.Now()
		limit, _, _ := c.bisect.Deliver(c.cursor, batch, time.Now())
		c.leaseTo = min(start-1+int64(limit), last)
		lease := c.lease
		res.LeaseID = &lease
		for off := start; off <= c.leaseTo; off++ {
			m := f.msgs[p][off]
			rc := 0
			if off == c.retryOffset {
				rc = c.retryCount
			}
			res.Messages = append(res.Messages, queen.Message{ID: uuid.NewString(), TransactionID: m.txn, Data: json.RawMessage(`{}`),
				CreatedAt: m.created, PartitionID: f.partIDs[p], Partition: f.parts[p], Queue: f.queue, Offset: off,
				LeaseID: &lease, ConsumerGroup: group, RetryCount: rc})
		}
		return res, true
	}
	return res, false
}

func (f *fakeConsumeBroker) Ack(_ context.Context, group string, acks []client.Ack) ([]queen.AckResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.notify()
	f.ackCalls++
	lost := f.loseAckReplies > 0 && f.ackCalls%f.loseAckReplies == 0
	if lost && (f.ackCalls/f.loseAckReplies)%2 == 0 {
		// Not applied, and the lease is gone (as if it expired).
		for _, a := range acks {
			for p, id := range f.partIDs {
				if id == a.PartitionID {
					f.cursors(group)[p].lease = ""
				}
			}
		}
		return nil, queen.ErrTimeout.With("ack: reply lost")
	}
	cs := f.cursors(group)
	out := make([]queen.AckResult, len(acks))
	failedIn := map[int]bool{}
	for i, a := range acks {
		r := queen.AckResult{Index: i, PartitionID: a.PartitionID}
		p := -1
		for j, id := range f.partIDs {
			if id == a.PartitionID {
				p = j
			}
		}
		switch {
		case p < 0 || a.Offset == nil || *a.Offset >= int64(len(f.msgs[p])):
			r.Result = queen.Unresolvable
		case cs[p].lease == "" || cs[p].lease != a.LeaseID:
			r.Result = queen.LeaseInvalid
		case *a.Offset <= cs[p].cursor:
			r.Result, r.Success = queen.Stale, true
		case failedIn[p]:
			r.Result = queen.RetryScheduled
		case a.Status == string(queen.AckFailed):
			c := cs[p]
			failedIn[p] = true
			if c.retryOffset != *a.Offset {
				c.retryOffset, c.retryCount = *a.Offset, 0
			}
			c.retryCount++
			limit := f.retryLimit + 1
			if f.dlqEarly {
				limit = f.retryLimit
			}
			if c.retryCount >= limit {
				f.dead = append(f.dead, persistence.StoredDeadLetter{Queue: f.queue, Partition: f.parts[p], ConsumerGroup: group,
					Offset: *a.Offset, TransactionID: f.msgs[p][*a.Offset].txn, Attempts: c.retryCount, Error: a.Error})
				c.cursor = *a.Offset
				r.Result, r.Success = queen.DeadLettered, true
			} else {
				c.cursor = *a.Offset - 1
				r.Result, r.Success = queen.RetryScheduled, true
			}
		default:
			cs[p].cursor = *a.Offset
			f.acksSeen++
			if f.skipAfterAck && f.acksSeen >= 50 && cs[p].cursor >= cs[p].leaseTo && cs[p].cursor < int64(len(f.msgs[p]))-1 {
				// At the end of a leased span: the message after it was
				// never delivered to this group, and now never will be.
				cs[p].cursor++
				f.acksSeen = 0
			}
			r.Result, r.Success = queen.Acked, true
		}
		out[i] = r
	}
	// Every call releases the leases it touched (the harness acks up to
	// the first failure; the rest is redelivered); with leaseTTL, only a
	// failure or the span's end does.
	for _, a := range acks {
		for p, id := range f.partIDs {
			if id == a.PartitionID && (f.leaseTTL == 0 || failedIn[p] || cs[p].cursor >= cs[p].leaseTo) {
				cs[p].lease = ""
			}
		}
	}
	if lost {
		return nil, queen.ErrTimeout.With("ack: reply lost")
	}
	return out, nil
}

// abandoned reports whether partition p's lease may expire: always without
// crashesOn; with it, once the consumer stopped with a message it crashes
// on unacked (or acked its whole span).
func (f *fakeConsumeBroker) abandoned(p int, c *fakeCursor) bool {
	if f.crashesOn == nil || c.cursor >= c.leaseTo {
		return true
	}
	for off := c.cursor + 1; off <= c.leaseTo; off++ {
		if f.crashesOn(f.msgs[p][off].txn) {
			return true
		}
	}
	return false
}

// expire ends c's expired lease as the broker does (rules.Bisection): a
// span of several unacked messages is bisected; a single one counts a
// failed delivery and is dead-lettered with "lease expired" past
// retryLimit.
func (f *fakeConsumeBroker) expire(group string, p int, c *fakeCursor) {
	c.lease = ""
	off := c.cursor + 1
	if off > c.leaseTo {
		return
	}
	if charge, _ := c.bisect.Expire(c.cursor, off, c.leaseTo, time.Now()); !charge {
		return
	}
	if c.retryOffset != off {
		c.retryOffset, c.retryCount = off, 0
	}
	c.retryCount++
	if c.retryCount > f.retryLimit {
		f.dead = append(f.dead, persistence.StoredDeadLetter{Queue: f.queue, Partition: f.parts[p], ConsumerGroup: group,
			Offset: off, TransactionID: f.msgs[p][off].txn, Attempts: c.retryCount, Error: queen.LeaseExpiredError})
		c.cursor = off
		c.bisect.Mark = off
	}
}

func (f *fakeConsumeBroker) Configure(_ context.Context, body []byte) ([]byte, error) {
	var in struct {
		Options map[string]int `json:"options"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.retryLimit = in.Options["retryLimit"]
	f.mu.Unlock()
	return json.Marshal(map[string]any{"configured": true, "options": in.Options})
}

func (f *fakeConsumeBroker) Close() {}

func (f *fakeConsumeBroker) Cursors(_ context.Context, _ []string) ([]persistence.Cursor, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []persistence.Cursor
	for g, cs := range f.groups {
		for p, c := range cs {
			out = append(out, persistence.Cursor{Queue: f.queue, Partition: f.parts[p], ConsumerGroup: g, Cursor: c.cursor, LastOffset: int64(len(f.msgs[p])) - 1})
		}
	}
	return out, nil
}

func (f *fakeConsumeBroker) DeadLetters(_ context.Context, _ []string) ([]persistence.StoredDeadLetter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]persistence.StoredDeadLetter(nil), f.dead...), nil
}

// stored feeds the messages stored after after[p] in each partition p to
// fn, in offset order, and moves after on, as the storage audit's passes
// do (nil after: every stored message).
func (f *fakeConsumeBroker) stored(after []int64, fn func(*persistence.StoredMessage)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for p, ms := range f.msgs {
		from := 0
		if after != nil {
			from = int(after[p]) + 1
		}
		for off := from; off < len(ms); off++ {
			if ms[off].gone {
				continue // deleted before the storage audit read it
			}
			fn(&persistence.StoredMessage{Queue: f.queue, Partition: f.parts[p], Offset: int64(off), TransactionID: ms[off].txn, CreatedAt: ms[off].created})
		}
		if after != nil {
			after[p] = int64(len(ms)) - 1
		}
	}
}

// fakeConsumeRun is a consume phase against a fake broker.
type fakeConsumeRun struct {
	f     *fakeConsumeBroker
	cfg   Config
	cp    *Phase
	parts []string
	// messages and poison pushed (per group).
	messages, poison int64
	// ca is the phase's audit, read the storage audit's offset read per
	// partition.
	ca   *Auditor
	read []int64
}

func newFakeConsumeRun(t *testing.T, tune func(*Config, *fakeConsumeBroker)) *fakeConsumeRun {
	t.Helper()
	// `queen loadtest`'s defaults (loadtest.DefaultConfig), a small run.
	cfg := Config{Queue: "q", Target: "nats://127.0.0.1:4222", RequestTimeout: 30 * time.Second,
		Consumption: Consumption{Consumers: 3, Groups: 2, FailRatio: 0.05, FailMode: txnid.FailNack, ConsumeBatch: 7,
			ConsumePartitions: 1, RetryLimit: 3, PollTimeout: 200 * time.Millisecond, ConsumeDrainTimeout: 20 * time.Second}}
	parts := txnid.PartitionNames(4)
	f := newFakeConsumeBroker(cfg.Queue, parts, 0)
	if tune != nil {
		tune(&cfg, f)
	}
	cfg.LeaseSeconds = DefaultLease(cfg.FailMode)
	r := &fakeConsumeRun{f: f, cfg: cfg, parts: parts}
	cp, err := New(&r.cfg, parts, func(string) (target.ConsumeClient, error) { return f, nil })
	require.NoError(t, err)
	r.cp = cp
	r.ca = cp.NewAuditor(0)
	r.read = make([]int64, len(parts))
	for p := range r.read {
		r.read[p] = -1
	}
	require.NoError(t, target.ConfigureQueue(context.Background(), cp.Admin(), cfg.Queue, cfg.QueueOptions(), cfg.RequestTimeout))
	require.Equal(t, cfg.RetryLimit, f.retryLimit, "the queue is configured with the run's retryLimit")
	return r
}

// run pushes 1,000 messages in batches while the consumers run, drains,
// and audits.
func (r *fakeConsumeRun) run(t *testing.T) *report.ConsumeReport {
	t.Helper()
	ctx := context.Background()
	r.cp.Run(ctx, time.Now())
	r.cp.StartAudit(ctx, r.f, 5*time.Millisecond)
	for b := range 20 {
		if b%5 == 0 {
			r.f.stored(r.read, r.ca.Stored)
		}
		p := b % len(r.parts)
		var txns []string
		for i := range 50 {
			txn := string(txnid.AppendTxn(nil, 0, uint64(b*50+i)))
			txns = append(txns, txn)
			r.messages++
			if txnid.IsPoison(txn, r.cfg.FailRatio) {
				r.poison++
			}
		}
		r.f.push(p, txns...)
		r.cp.touched[p].Store(true)
	}
	r.cp.Drain(ctx, r.f)
	r.f.stored(r.read, r.ca.Stored)
	a, err := r.cp.FinishAudit(ctx, r.f, true)
	require.NoError(t, err)
	rep := r.cp.Report(a)
	var text strings.Builder
	(&report.Report{Mode: report.ModeBroker, Consume: rep}).WriteText(&text) // the consume section, after an empty push section
	t.Log(text.String())
	return rep
}

func TestConsumeAgainstFakeBroker(t *testing.T) {
	t.Parallel()
	r := newFakeConsumeRun(t, nil)
	rep := r.run(t)
	require.True(t, rep.Audit.Passed, "issues %v, examples %v", rep.Audit.Issues, rep.Audit.Examples)
	require.True(t, rep.Drained)
	require.Positive(t, r.poison, "some messages are poison at fail ratio 0.05")
	g, R := int64(r.cfg.Groups), int64(r.cfg.RetryLimit)
	require.Equal(t, r.messages, rep.Audit.Messages)
	require.Equal(t, r.poison, rep.Audit.Poison)
	// Exact counts: each message handled once per group, a poison one
	// retryLimit+1 times; every other one acked once; every poison one
	// dead-lettered once.
	require.Equal(t, g*(r.messages+r.poison*R), rep.Handled)
	require.Equal(t, g*(r.messages-r.poison), rep.Acked)
	require.Equal(t, g*r.poison, rep.DeadLettered)
	require.Equal(t, g*r.poison, rep.Audit.DeadLetters)
	require.Equal(t, g*r.poison, rep.AckResults[string(queen.DeadLettered)])
	require.Equal(t, g*r.poison*R, rep.AckResults[string(queen.RetryScheduled)])
	require.Equal(t, g*(r.messages-r.poison), rep.AckResults[string(queen.Acked)])
	require.Len(t, rep.PerGroup, 2)
	for _, gr := range rep.PerGroup {
		require.Equal(t, r.messages-r.poison, gr.Acked)
		require.Equal(t, r.poison, gr.DeadLettered)
		require.Equal(t, r.messages, gr.Messages)
	}
	require.Equal(t, []string{"q-g0", "q-g1"}, rep.Groups)
	require.Equal(t, g*r.messages, rep.E2ESamples)
	require.Positive(t, rep.Latency.Max)
	require.Zero(t, rep.AckErrors)
	require.Positive(t, r.f.partitionPops, "a failed message is retried by popping its partition")
	// Without the focused retries a batch would be re-popped whole after
	// each failure: ~4 deliveries per message at this ratio and batch.
	require.Less(t, rep.Deliveries, 2*g*r.messages)
}

// crashRun runs the fake-broker consume phase with a crash fail mode:
// few poison messages (the transactionIds are fixed: about 10 of 1,000),
// leases of 1 s that expire only where the consumer crashed (a consumer
// slowed down by a busy machine keeps its lease). It checks what every
// crash mode shares: the lease shortened to 2 s, the audit passed, the
// drain done, some poison messages.
func crashRun(t *testing.T, mode string) (*fakeConsumeRun, *report.ConsumeReport) {
	t.Helper()
	r := newFakeConsumeRun(t, func(cfg *Config, f *fakeConsumeBroker) {
		cfg.FailMode, cfg.FailRatio, cfg.PollTimeout = mode, 0.01, 50*time.Millisecond
		f.leaseTTL = time.Second
		f.crashesOn = func(txn string) bool { return txnid.IsPoison(txn, 0.01) }
	})
	require.Equal(t, 2, r.cfg.LeaseSeconds, "a crash mode shortens the lease")
	rep := r.run(t)
	require.True(t, rep.Audit.Passed, "issues %v, examples %v", rep.Audit.Issues, rep.Audit.Examples)
	require.True(t, rep.Drained)
	require.Positive(t, r.poison)
	return r, rep
}

// A consumer that crashes on a poison message acks what came before it and
// abandons the rest of its batch and the lease: an abandoned span of
// several messages is bisected, so every poison message is charged
// retryLimit+1 single-message expiries and dead-lettered once, by lease
// expiry; it is handled once more per bisected span.
func TestConsumeCrashModeAgainstFakeBroker(t *testing.T) {
	t.Parallel()
	r, rep := crashRun(t, txnid.FailCrash)
	g, R := int64(r.cfg.Groups), int64(r.cfg.RetryLimit)
	require.NotNil(t, rep.Poison)
	require.Equal(t, g*(r.messages+r.poison*R)+rep.Poison.AbandonedSpans, rep.Handled)
	require.Equal(t, g*r.poison*(R+1)+rep.Poison.AbandonedSpans, rep.Poison.AbandonedLeases)
	// A stall ends with a delivery past the poison message: one that is
	// its partition's last message leaves its stall open.
	require.Equal(t, g*r.poison, rep.Poison.Stalls+rep.Poison.OpenStalls, "each poison message held its partition once per group")
	require.Equal(t, g*(r.messages-r.poison), rep.Acked)
	require.Equal(t, g*r.poison, rep.Audit.DeadLetters)
	require.Zero(t, rep.DeadLettered, "no ack is answered dead_lettered: the expiries dead-letter")
	require.Zero(t, rep.AckResults[string(queen.RetryScheduled)])
	require.Equal(t, txnid.FailCrash, rep.FailMode)

	// The same run's dead letters with the nack error text fail the audit.
	for i := range r.f.dead {
		r.f.dead[i].Error = txnid.PoisonError
	}
	// The poison messages' records are kept for the dead letters: a fresh
	// auditor judges them again.
	ca := newAuditor(r.cp.groups, r.parts, r.cfg.FailRatio, r.cfg.RetryLimit)
	ca.failMode = r.cfg.FailMode
	requireConsumeIssue(t, ca.finish(true, r.f.dead, nil, time.Now()), report.IssueDLQError)
}

// A consumer that handles a whole batch and acks it at the end acks nothing
// when a poison message crashes it (FailCrashBatch): the broker bisects the
// abandoned spans, only the poison messages are dead-lettered, each once
// per group, and every other message is acked once.
func TestConsumeCrashBatchModeAgainstFakeBroker(t *testing.T) {
	t.Parallel()
	r, rep := crashRun(t, txnid.FailCrashBatch)
	g, R := int64(r.cfg.Groups), int64(r.cfg.RetryLimit)
	require.Equal(t, g*(r.messages-r.poison), rep.Acked)
	require.Equal(t, g*r.poison, rep.Audit.DeadLetters)
	require.Zero(t, rep.DeadLettered, "no ack is answered dead_lettered: the expiries dead-letter")
	require.NotNil(t, rep.Poison)
	require.Positive(t, rep.Poison.AbandonedSpans, "batches of several messages were abandoned and bisected")
	require.Equal(t, g*r.poison*(R+1)+rep.Poison.AbandonedSpans, rep.Poison.AbandonedLeases)
	require.Equal(t, g*r.poison, rep.Poison.Stalls+rep.Poison.OpenStalls)
	require.Positive(t, rep.Poison.IsolateMS.Max)
	require.Equal(t, txnid.FailCrashBatch, rep.FailMode)
}

func TestConsumeLostAckRepliesAreReportedNotFailed(t *testing.T) {
	t.Parallel()
	r := newFakeConsumeRun(t, func(_ *Config, f *fakeConsumeBroker) { f.loseAckReplies = 5 })
	rep := r.run(t)
	require.True(t, rep.Audit.Passed, "issues %v, examples %v", rep.Audit.Issues, rep.Audit.Examples)
	require.Positive(t, rep.AckErrors)
	require.Positive(t, rep.Audit.AckOutcomeUnknown, "an applied ack whose reply was lost")
	require.Positive(t, rep.Audit.RedeliveredAfterLostAck, "a lost ack that was not applied: redelivered")
}

func requireConsumeIssue(t *testing.T, a *report.ConsumeAudit, kind string) {
	t.Helper()
	require.False(t, a.Passed, "the audit must fail")
	require.Positive(t, a.Issues[kind], "issues %v, examples %v", a.Issues, a.Examples)
	require.Contains(t, strings.Join(a.Examples, "\n"), kind+": ")
}

func TestConsumeAuditCatchesEarlyDeadLetters(t *testing.T) {
	t.Parallel()
	r := newFakeConsumeRun(t, func(_ *Config, f *fakeConsumeBroker) { f.dlqEarly = true })
	a := r.run(t).Audit
	requireConsumeIssue(t, a, report.IssuePoisonDeliveries)
	requireConsumeIssue(t, a, report.IssueDLQAttempts)
}

func TestConsumeAuditCatchesSkippedMessages(t *testing.T) {
	t.Parallel()
	r := newFakeConsumeRun(t, func(_ *Config, f *fakeConsumeBroker) { f.skipAfterAck = true })
	a := r.run(t).Audit
	requireConsumeIssue(t, a, report.IssueNeverDelivered)
}

func TestConsumeAuditCatchesDrainTimeout(t *testing.T) {
	t.Parallel()
	r := newFakeConsumeRun(t, func(c *Config, f *fakeConsumeBroker) {
		f.hidePartition = "p-03"
		c.ConsumeDrainTimeout = 300 * time.Millisecond
	})
	rep := r.run(t)
	require.False(t, rep.Drained)
	require.Contains(t, rep.DrainProblem, "p-03")
	require.Contains(t, rep.DrainProblem, "no cursor moved for 300ms")
	a := rep.Audit
	requireConsumeIssue(t, a, report.IssueNotDrained)
	requireConsumeIssue(t, a, report.IssueNeverDelivered)
	requireConsumeIssue(t, a, report.IssueCursorWrong)
}

// TestConsumeAuditRules feeds the auditor records by hand: each rule of
// the end-to-end audit on its own.
func TestConsumeAuditRules(t *testing.T) {
	t.Parallel()
	parts := txnid.PartitionNames(2)
	ratio := 0.3
	var poison, plain []string
	for i := 0; len(poison) < 3 || len(plain) < 6; i++ {
		txn := string(txnid.AppendTxn(nil, 0, uint64(i)))
		if txnid.IsPoison(txn, ratio) {
			poison = append(poison, txn)
		} else {
			plain = append(plain, txn)
		}
	}
	// Partition p-00: plain[0], poison[0], plain[1]; p-01: plain[2], poison[1].
	stored := []persistence.StoredMessage{
		{Partition: "p-00", Offset: 0, TransactionID: plain[0]},
		{Partition: "p-00", Offset: 1, TransactionID: poison[0]},
		{Partition: "p-00", Offset: 2, TransactionID: plain[1]},
		{Partition: "p-01", Offset: 0, TransactionID: plain[2]},
		{Partition: "p-01", Offset: 1, TransactionID: poison[1]},
	}
	const R = 2
	clean := func() (*group, []persistence.StoredDeadLetter, []persistence.Cursor) {
		g := newGroup("g")
		for _, m := range stored {
			e := consEntry{txn: txnid.Fingerprint(m.TransactionID), popped: 1, handled: 1, acked: 1}
			if txnid.IsPoison(m.TransactionID, ratio) {
				e = consEntry{txn: txnid.Fingerprint(m.TransactionID), popped: R + 1, handled: R + 1, charged: R + 1, failed: R, dead: 1}
			}
			g.m.put(txnid.MakeKey(map[string]int{"p-00": 0, "p-01": 1}[m.Partition], uint64(m.Offset)), e)
		}
		dead := []persistence.StoredDeadLetter{
			{Partition: "p-00", ConsumerGroup: "g", Offset: 1, TransactionID: poison[0], Attempts: R + 1},
			{Partition: "p-01", ConsumerGroup: "g", Offset: 1, TransactionID: poison[1], Attempts: R + 1},
		}
		cursors := []persistence.Cursor{
			{Partition: "p-00", ConsumerGroup: "g", Cursor: 2, LastOffset: 2},
			{Partition: "p-01", ConsumerGroup: "g", Cursor: 1, LastOffset: 1},
		}
		return g, dead, cursors
	}
	audit := func(g *group, dead []persistence.StoredDeadLetter, cursors []persistence.Cursor, complete bool) *report.ConsumeAudit {
		ca := newAuditor([]*group{g}, parts, ratio, R)
		for i := range stored {
			ca.Stored(&stored[i])
		}
		return ca.finish(complete, dead, cursors, time.Now())
	}
	key := func(p int, off uint64) uint64 { return txnid.MakeKey(p, off) }

	g, dead, cursors := clean()
	a := audit(g, dead, cursors, true)
	require.True(t, a.Passed, "issues %v, examples %v", a.Issues, a.Examples)
	require.Equal(t, int64(5), a.Messages)
	require.Equal(t, int64(2), a.Poison)

	cases := []struct {
		name   string
		tamper func(g *group, dead *[]persistence.StoredDeadLetter, cursors *[]persistence.Cursor)
		kind   string
	}{
		{"acked twice", func(g *group, _ *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			e := g.m.get(key(0, 0))
			e.acked, e.handled, e.popped = 2, 2, 2
			g.m.put(key(0, 0), e)
		}, report.IssueAckedTwice},
		{"redelivered after ack", func(g *group, _ *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			e := g.m.get(key(0, 2))
			e.handled, e.popped, e.stale = 2, 2, 1
			g.m.put(key(0, 2), e)
		}, report.IssueRedelivered},
		{"never acked", func(g *group, _ *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			e := g.m.get(key(1, 0))
			e.acked = 0
			g.m.put(key(1, 0), e)
		}, report.IssueNotAcked},
		{"never delivered", func(g *group, _ *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			g.m.put(key(1, 0), consEntry{})
		}, report.IssueNeverDelivered},
		{"poison charged too often", func(g *group, _ *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			e := g.m.get(key(0, 1))
			e.handled, e.charged = R+2, R+2
			g.m.put(key(0, 1), e)
		}, report.IssuePoisonDeliveries},
		{"poison charged too rarely", func(g *group, _ *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			e := g.m.get(key(0, 1))
			e.charged = R
			g.m.put(key(0, 1), e)
		}, report.IssuePoisonDeliveries},
		{"handled again after a crash-batch abandon, without the abandon", func(g *group, _ *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			e := g.m.get(key(0, 0))
			e.handled, e.popped = 2, 2
			g.m.put(key(0, 0), e)
		}, report.IssueRedelivered},
		{"poison not dead-lettered", func(_ *group, dead *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			*dead = (*dead)[1:]
		}, report.IssueDLQMissing},
		{"dead-lettered twice", func(_ *group, dead *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			*dead = append(*dead, (*dead)[0])
		}, report.IssueDLQTwice},
		{"wrong attempts", func(_ *group, dead *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			(*dead)[0].Attempts = R
		}, report.IssueDLQAttempts},
		{"plain message dead-lettered", func(_ *group, dead *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			*dead = append(*dead, persistence.StoredDeadLetter{Partition: "p-00", ConsumerGroup: "g", Offset: 2, TransactionID: plain[1], Attempts: R + 1})
		}, report.IssueDLQUnexpected},
		{"dead letter of another group", func(_ *group, dead *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			*dead = append(*dead, persistence.StoredDeadLetter{Partition: "p-00", ConsumerGroup: "other", Offset: 1, TransactionID: poison[0], Attempts: R + 1})
		}, report.IssueDLQUnexpected},
		{"cursor behind", func(_ *group, _ *[]persistence.StoredDeadLetter, cursors *[]persistence.Cursor) {
			(*cursors)[1].Cursor = 0
		}, report.IssueCursorWrong},
		{"no cursor", func(_ *group, _ *[]persistence.StoredDeadLetter, cursors *[]persistence.Cursor) {
			*cursors = (*cursors)[:1]
		}, report.IssueCursorWrong},
		{"delivered an offset that is not stored", func(g *group, _ *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			g.m.put(key(1, 7), consEntry{popped: 1, handled: 1, acked: 1})
		}, report.IssueDeliveredUnknown},
		{"delivered another transactionId", func(g *group, _ *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			e := g.m.get(key(0, 0))
			e.txn++
			g.m.put(key(0, 0), e)
		}, report.IssueWrongDelivery},
		{"wrong retry count", func(g *group, _ *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			g.retryMismatch[key(0, 1)] = retryMismatch{desc: "retryCount 0, want 1"}
		}, report.IssueWrongRetryCount},
		{"refused ack", func(g *group, _ *[]persistence.StoredDeadLetter, _ *[]persistence.Cursor) {
			g.issues.Add(report.IssueAckRefused, "answered lease_invalid")
		}, report.IssueAckRefused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, dead, cursors := clean()
			tc.tamper(g, &dead, &cursors)
			a := audit(g, dead, cursors, true)
			requireConsumeIssue(t, a, tc.kind)
		})
	}

	t.Run("lost ack reply is reported, not failed", func(t *testing.T) {
		g, dead, cursors := clean()
		e := g.m.get(key(0, 0))
		e.acked, e.unknown = 0, 1
		g.m.put(key(0, 0), e)
		e = g.m.get(key(0, 2))
		e.unknown, e.handled, e.popped = 1, 2, 2
		g.m.put(key(0, 2), e)
		a := audit(g, dead, cursors, true)
		require.True(t, a.Passed, "issues %v, examples %v", a.Issues, a.Examples)
		require.Equal(t, int64(1), a.AckOutcomeUnknown)
		require.Equal(t, int64(1), a.RedeliveredAfterLostAck)
	})

	t.Run("interrupted: only what does not need the end", func(t *testing.T) {
		g, dead, cursors := clean()
		g.m.put(key(1, 0), consEntry{})
		dead = dead[1:]
		cursors[1].Cursor = 0
		a := audit(g, dead, cursors, false)
		require.True(t, a.Passed, "issues %v, examples %v", a.Issues, a.Examples)
		require.False(t, a.Complete)
		// The audit released the records it checked: tamper a fresh set.
		g, dead, cursors = clean()
		dead = dead[1:]
		cursors[1].Cursor = 0
		e := g.m.get(key(0, 0))
		e.acked = 2
		g.m.put(key(0, 0), e)
		requireConsumeIssue(t, audit(g, dead, cursors, false), report.IssueAckedTwice)
	})
}

func TestCursorsBehind(t *testing.T) {
	t.Parallel()
	parts := txnid.PartitionNames(3)
	groups := []*group{newGroup("a"), newGroup("b")}
	touched := make([]atomic.Bool, 3)
	rows := []persistence.Cursor{
		{Partition: "p-00", ConsumerGroup: "a", Cursor: 4, LastOffset: 4},
		{Partition: "p-00", ConsumerGroup: "b", Cursor: 4, LastOffset: 4},
	}
	require.Empty(t, cursorsBehind(groups, parts, touched, rows).behind)
	touched[2].Store(true)
	require.Contains(t, cursorsBehind(groups, parts, touched, rows).behind, "group a has not consumed partition p-02 yet")
	rows = append(rows, persistence.Cursor{Partition: "p-02", ConsumerGroup: "a", Cursor: 1, LastOffset: 3},
		persistence.Cursor{Partition: "p-02", ConsumerGroup: "b", Cursor: 3, LastOffset: 3})
	b := cursorsBehind(groups, parts, touched, rows).behind
	require.Contains(t, b, "1 (group, partition) pairs")
	require.Contains(t, b, "group a's cursor in partition p-02 is 1, the last offset 3")
	rows[2].Cursor = 3
	require.Empty(t, cursorsBehind(groups, parts, touched, rows).behind)
	// Group a has no row in p-02, which holds messages (b's row says so,
	// even when no producer saw a verdict there).
	touched[2].Store(false)
	rows = append(rows[:2], rows[3])
	require.Contains(t, cursorsBehind(groups, parts, touched, rows).behind, "group a has not consumed partition p-02")
}

// An ack answered lease_invalid at least the lease time after its pop was
// sent found the lease run out (a frozen broker, a restarted database): it
// is counted, not a finding, and explains the redelivery. Sooner, it is a
// finding.
func TestAckAfterLease(t *testing.T) {
	t.Parallel()
	msgs := []queen.Message{{Partition: "p-00", Offset: 0, TransactionID: "lt0-1"}}
	acks := []client.Ack{{TransactionID: "lt0-1", Status: string(queen.AckCompleted), LeaseID: "l1"}}
	invalid := []queen.AckResult{{Index: 0, Result: queen.LeaseInvalid, Error: "lease l1 is not the live lease"}}
	key := txnid.MakeKey(0, 0)

	g := newGroup("g")
	require.True(t, g.record([]uint64{key}, msgs, acks, invalid, nil, &Counters{}, true))
	require.Zero(t, g.issues.Total())
	require.Equal(t, int64(1), g.ackAfterLease)
	require.Equal(t, uint8(1), g.m.get(key).refused)

	g = newGroup("g")
	require.False(t, g.record([]uint64{key}, msgs, acks, invalid, nil, &Counters{}, false))
	require.Equal(t, int64(1), g.issues.Counts[report.IssueAckRefused])
	require.Zero(t, g.ackAfterLease)
}

// TestNextDrainPoll: near the end of the drain the cursors are read sooner,
// at the pace the pairs behind are clearing, within [minDrainPoll,
// drainPoll]; without progress the full interval.
func TestNextDrainPoll(t *testing.T) {
	require.Equal(t, drainPoll, nextDrainPoll(500, 0, 250*time.Millisecond), "nothing cleared")
	require.Equal(t, drainPoll, nextDrainPoll(500, -3, 250*time.Millisecond), "a pair fell behind again")
	require.Equal(t, drainPoll, nextDrainPoll(5000, 1000, 250*time.Millisecond), "far from the end")
	require.Equal(t, 50*time.Millisecond, nextDrainPoll(200, 1000, 250*time.Millisecond))
	require.Equal(t, minDrainPoll, nextDrainPoll(1, 1000, 250*time.Millisecond), "almost drained")
}

// The consume audit forgets what every group has passed: over a run with
// retention whose messages grow tenfold, the records it holds (Counters.
// RecordBytes, the timeline's ledger_bytes share) stay those of the
// backlog. Messages that retention deletes after the storage audit read
// them and before a group got to them are counted expired, not lost, when
// the group passed them at least the retention after they were stored; with
// a retention longer than that, the same deletions are findings.
func TestConsumeAuditForgetsWhatEveryGroupPassed(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, retention time.Duration) (*fakeConsumeRun, *report.ConsumeReport, []int64, int64) {
		r := newFakeConsumeRun(t, func(c *Config, _ *fakeConsumeBroker) { c.FailRatio = 0 })
		r.ca.retention = retention
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r.cp.Run(ctx, time.Now())
		r.cp.StartAudit(ctx, r.f, 5*time.Millisecond)
		const perPart = 250 // a round: 1,000 messages over 4 partitions
		var held []int64
		var gone int64
		for round := range 10 {
			// p-00 is hidden while its round is pushed, read by the storage
			// audit, and its first 10 messages of the round deleted.
			r.f.mu.Lock()
			r.f.hidePartition = r.parts[0]
			r.f.mu.Unlock()
			for p := range r.parts {
				var txns []string
				for i := range perPart {
					txns = append(txns, string(txnid.AppendTxn(nil, p, uint64(round*perPart+i))))
				}
				r.messages += perPart
				r.f.push(p, txns...)
				r.cp.touched[p].Store(true)
			}
			r.f.stored(r.read, r.ca.Stored)
			r.f.mu.Lock()
			for i := range 10 {
				r.f.msgs[0][round*perPart+i].gone = true
				gone++
			}
			r.f.hidePartition = ""
			r.f.notify()
			r.f.mu.Unlock()
			// Wait until every group is at the end and the audit has
			// checked everything stored.
			deadline := time.Now().Add(20 * time.Second)
			for !r.caughtUp() {
				require.True(t, time.Now().Before(deadline), "round %d: the groups or the audit did not catch up", round)
				runtime.Gosched()
				time.Sleep(time.Millisecond) // a poll under the deadline
			}
			held = append(held, r.cp.c.RecordBytes.Load())
		}
		r.cp.Drain(ctx, r.f)
		a, err := r.cp.FinishAudit(ctx, r.f, true)
		require.NoError(t, err)
		return r, r.cp.Report(a), held, gone
	}

	t.Run("expired after the retention", func(t *testing.T) {
		t.Parallel()
		r, rep, held, gone := run(t, time.Nanosecond)
		t.Logf("record bytes after each 1,000 messages: %v", held)
		require.Positive(t, held[0])
		require.LessOrEqual(t, held[9], 2*held[0], "the records grow with the run (%v), not with the backlog", held)
		require.True(t, rep.Audit.Passed, "issues %v, examples %v", rep.Audit.Issues, rep.Audit.Examples)
		g := int64(r.cfg.Groups)
		require.Equal(t, r.messages, rep.Audit.Messages)
		require.Equal(t, g*gone, rep.Audit.ExpiredBeforeAcked)
		for _, gr := range rep.PerGroup {
			require.Equal(t, gone, gr.ExpiredBeforeAcked, gr.Group)
			require.Equal(t, r.messages-gone, gr.Acked, gr.Group)
		}
		var text strings.Builder
		(&report.Report{Mode: report.ModeBroker, Consume: rep}).WriteText(&text)
		require.Contains(t, text.String(), "expired before acked (retention deleted them first, not lost): q-g0 100 · q-g1 100")
	})
	t.Run("deleted sooner than the retention", func(t *testing.T) {
		t.Parallel()
		_, rep, _, _ := run(t, time.Hour)
		requireConsumeIssue(t, rep.Audit, report.IssueNeverDelivered)
		require.Zero(t, rep.Audit.ExpiredBeforeAcked)
	})
}

// TestBacklogPerGroup: a group's backlog (the timeline's) is the stored
// messages past its cursors: whole partitions where it has no consumer row,
// the stored count beyond the partitions any group has a row in.
func TestBacklogPerGroup(t *testing.T) {
	t.Parallel()
	r := newFakeConsumeRun(t, nil)
	want := func(g0, g1 int64) []report.GroupBacklog {
		return []report.GroupBacklog{{Group: "q-g0", Messages: g0}, {Group: "q-g1", Messages: g1}}
	}
	row := func(group, part string, cursor, last int64) persistence.Cursor {
		return persistence.Cursor{Queue: "q", Partition: part, ConsumerGroup: group, Cursor: cursor, LastOffset: last}
	}
	require.Equal(t, want(0, 0), r.cp.Backlog(nil, 0))
	require.Equal(t, want(120, 120), r.cp.Backlog(nil, 120), "no group has popped: everything stored")
	rows := []persistence.Cursor{
		row("q-g0", "p-00", 9, 49),  // 40 behind
		row("q-g0", "p-01", -1, 29), // nothing committed: 30
		row("q-g1", "p-00", 49, 49), // at the end
		row("q-g1", "p-02", 5, 4),   // a cursor past a last offset read a moment earlier
		row("other", "p-03", 0, 99), // another group: its partition counts
		{Queue: "other-queue", Partition: "p-03", ConsumerGroup: "q-g0", Cursor: 0, LastOffset: 1000},
	}
	// Partitions with a row hold 50 + 30 + 5 + 100 = 185; 200 stored: 15
	// in partitions no group has popped.
	require.Equal(t, want(15+40+30+5+100, 15+0+30+0+100), r.cp.Backlog(rows, 200))
	require.Equal(t, want(40+30+5+100, 30+100), r.cp.Backlog(rows, 100), "the stored count trails the cursors")

	// Against the fake broker: everything before the consumers run, nothing
	// after the drain.
	for b := range 8 {
		var txns []string
		for i := range 25 {
			txns = append(txns, string(txnid.AppendTxn(nil, 0, uint64(b*25+i))))
			r.messages++
		}
		r.f.push(b%len(r.parts), txns...)
		r.cp.touched[b%len(r.parts)].Store(true)
	}
	ctx := context.Background()
	cursors := func() []persistence.Cursor {
		c, err := r.f.Cursors(ctx, nil)
		require.NoError(t, err)
		return c
	}
	require.Equal(t, want(200, 200), r.cp.Backlog(cursors(), 200))
	r.cp.Run(ctx, time.Now())
	r.cp.StartAudit(ctx, r.f, 5*time.Millisecond)
	r.cp.Drain(ctx, r.f)
	r.f.stored(r.read, r.ca.Stored)
	require.Equal(t, want(0, 0), r.cp.Backlog(cursors(), 200), "drained")
	a, err := r.cp.FinishAudit(ctx, r.f, true)
	require.NoError(t, err)
	require.True(t, a.Passed, "issues %v, examples %v", a.Issues, a.Examples)
}

// caughtUp reports whether every group's cursor is at every partition's
// last offset and the audit has checked every stored message.
func (r *fakeConsumeRun) caughtUp() bool {
	r.f.mu.Lock()
	for g := range r.cfg.Groups {
		cs := r.f.cursors(groupName(r.cfg.Queue, g))
		for p := range r.parts {
			if cs[p].cursor != int64(len(r.f.msgs[p]))-1 {
				r.f.mu.Unlock()
				return false
			}
		}
	}
	r.f.mu.Unlock()
	r.ca.mu.Lock()
	defer r.ca.mu.Unlock()
	for p := range r.parts {
		if r.ca.checked[p] != r.ca.lastStored[p] {
			return false
		}
	}
	return true
}

package consumers

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/loadtest/clientstats"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/target"
	"github.com/queen-mq/queen-go/loadtest/txnid"
	"github.com/queen-mq/queen-go/transport/client"
)

// consEntry is what one consumer group saw of one message (keyed by
// txnid.MakeKey(partition index, offset)): 16 bytes (entrySize), so
// millions of messages per group stay small; it holds no pointer, so the
// group's record lives outside the Go heap (entries). Counts saturate at
// 255.
type consEntry struct {
	// txn is txnPrint of the transactionId of the first delivery.
	txn uint32
	// popped: deliveries (in pop replies); handled: handler invocations.
	popped, handled uint8
	// charged: deliveries of a poison message that count a failed delivery
	// at the broker (SPEC.md §4): each failed ack (FailNack), each
	// abandoned lease in which it was the only unacked message (the crash
	// modes; an expired span of several is bisected, not charged).
	// abandoned: handlings in a batch whose lease the consumer abandoned
	// unacked (FailCrashBatch): the message is delivered again.
	charged, abandoned uint8
	// Ack results of the harness's acks of this message: acked (completed
	// → acked), stale (completed → stale), failed (failed →
	// retry_scheduled), dead (failed → dead_lettered), refused
	// (unresolvable or lease_invalid: not applied), unknown (the ack call
	// got no reply: applied or not).
	acked, stale, failed, dead, refused, unknown uint8
	// seen is set by the audit when the message is found stored (txn is
	// then the stored transactionId's), poison with it when that is a
	// poison message.
	seen, poison bool
}

// group is one consumer group's shared record, written by its consumers
// under mu and read by the audit after they stopped.
type group struct {
	name string
	mu   sync.Mutex
	m    *entries
	// issues found while consuming (wrong replies, refused acks).
	issues  *report.Findings
	results map[queen.AckOutcome]int64
	// retryMismatch describes the first delivery of a message whose
	// retryCount was not its earlier failures (judged by the audit).
	retryMismatch map[uint64]retryMismatch

	delivered, handled, redelivered, acked, dead atomic.Int64
	// lostPops counts pops that got no answer (the broker may have leased
	// a span nobody saw: its expiry counts a failed delivery).
	lostPops atomic.Int64
	// ackAfterLease counts acks answered lease_invalid at least the lease
	// time after their pop was sent (under mu).
	ackAfterLease int64
	// The poison stalls (under mu): crashes counts leases abandoned on a
	// poison message, bisected those that left several messages unacked
	// (the broker bisects their redelivery); stalls holds each partition
	// waiting on a poison message since its first failed handling, and
	// stallDur the waits that ended (a delivery past every poison message
	// that failed there).
	crashes, bisected int64
	stalls            map[int]*stall
	stallDur          []time.Duration
	// kept holds the checked poison messages' records until the dead
	// letters are read (Auditor.finishPoison).
	kept map[uint64]keptPoison
}

// stall is a partition waiting on poison messages for a group: since the
// first failed handling, until a delivery starts past poison, the highest
// poison offset that failed there meanwhile.
type stall struct {
	since  time.Time
	poison int64
}

func newGroup(name string) *group {
	return &group{name: name, m: newEntries(), issues: report.NewFindings(), results: map[queen.AckOutcome]int64{},
		retryMismatch: map[uint64]retryMismatch{}, stalls: map[int]*stall{}, kept: map[uint64]keptPoison{}}
}

// retryMismatch is the first delivery of a message whose retryCount was not
// its earlier failures; over: the count was higher (a lost pop's lease
// expiry can explain that).
type retryMismatch struct {
	desc string
	over bool
}

// Counters are the consume phase's live totals, for the progress line and
// the report (counts since the phase started).
type Counters struct {
	// Pops counts pops answered, EmptyPops those with no message,
	// PopErrors those that failed.
	Pops, EmptyPops, PopErrors atomic.Int64
	// Delivered counts messages in pop replies, Handled handler
	// invocations, Acked messages answered acked.
	Delivered, Handled, Acked atomic.Int64
	// DeadLettered counts failed acks answered dead_lettered.
	DeadLettered atomic.Int64
	// AckCalls and AckErrors count ack calls and those that got no answer.
	AckCalls, AckErrors atomic.Int64
	// Redelivered counts deliveries after the first, FirstDeliveries first
	// handlings (each one an end-to-end latency sample).
	Redelivered, FirstDeliveries atomic.Int64
	// Spans counts the partitions' spans of the pops that returned messages.
	Spans atomic.Int64
	// Latency is push commit → handler of each first handling; PopLatency
	// and AckLatency the request latencies of pops that returned messages
	// and of ack calls. Histograms, so a run of any length keeps no memory
	// per message.
	Latency, PopLatency, AckLatency report.Histogram
	// RecordBytes is the memory of the groups' records for the consume
	// audit, outside the Go heap: 16 bytes per offset of the 256-offset
	// chunks the delivered messages fall in.
	RecordBytes atomic.Int64
	// Obs, when set (a cluster run), sees every request's outcome.
	Obs *clientstats.Stats
}

// consumer long-polls the run's queue for its group, handles each popped
// message in order (failing poison messages), and acks each batch in one
// call up to and including the first failure (SPEC.md §4: the cursor stops
// below a failure, so the rest of the batch is redelivered anyway).
type consumer struct {
	idx     int
	g       *group
	cfg     *Config
	cl      target.ConsumeClient
	partIdx map[string]int
	c       *Counters

	// fatal is the refusal that stopped the consumer (nil: stopped by ctx).
	fatal     error
	lastError string

	keys []uint64
	acks []client.Ack

	// epoch is the phase's audit epoch; inCall is the epoch at which the
	// consumer's current pop (with its handling and ack) started, 0 between
	// two (Phase.settled).
	epoch  *atomic.Uint64
	inCall atomic.Uint64
}

// noKey marks a delivered message the run cannot place (unknown partition,
// offset out of range).
const noKey = ^uint64(0)

// run consumes until ctx ends or the broker refuses a request (4xx).
//
// After a failure the broker redelivers the failed message and everything
// after it in its partition; with batches of 100 and a few percent of poison
// messages, re-popping whole batches would move each message dozens of
// times. So after a failure answered retry_scheduled the consumer pops that
// partition alone, one message at a time without waiting, until the poison
// message is dead-lettered (or the partition is taken or empty), then goes
// back to long polls of any partition. Every delivery still goes through
// the broker and is counted.
func (k *consumer) run(ctx context.Context) {
	var backoff time.Duration
	focus := ""
	for ctx.Err() == nil {
		if backoff > 0 && !sleep(ctx, backoff) {
			return
		}
		req := target.PopReq{Queue: k.cfg.Queue, Group: k.g.name, Batch: k.cfg.ConsumeBatch, Wait: k.cfg.PollTimeout, Partitions: k.cfg.ConsumePartitions}
		if focus != "" {
			req.Partition, req.Batch, req.Wait, req.Partitions = focus, 1, 0, 1
			focus = ""
		}
		k.inCall.Store(k.epoch.Load())
		popStart := time.Now()
		res, err := k.cl.Pop(ctx, req)
		popTook := time.Since(popStart)
		if err != nil {
			k.inCall.Store(0)
			if ctx.Err() != nil {
				return
			}
			k.c.PopErrors.Add(1)
			k.g.lostPops.Add(1)
			qe := queen.AsError(err)
			k.c.Obs.Record("pop:" + qe.Code)
			k.lastError = "pop: " + qe.Error()
			if !qe.Retryable {
				k.fatal = fmt.Errorf("group %s consumer %d: pop refused (%s): %s", k.g.name, k.idx, qe.Code, qe.Error())
				return
			}
			backoff = min(max(2*backoff, 20*time.Millisecond), time.Second)
			continue
		}
		backoff = 0
		k.c.Obs.Record("")
		k.c.Pops.Add(1)
		if len(res.Messages) == 0 {
			k.inCall.Store(0)
			k.c.EmptyPops.Add(1)
			continue
		}
		k.c.PopLatency.Record(popTook)
		focus = k.handleSpans(ctx, &res, popStart)
		k.inCall.Store(0)
	}
}

// handleSpans handles a pop reply: a multi-partition pop
// (Config.ConsumePartitions) returns several partitions' spans, partition by
// partition, under one lease. A reply without a poison message is handled
// and acked in one call; one with a poison message span by span, as if each
// came from its own pop, so each partition fails (or crashes) as a
// single-partition batch would. It returns the first span's retry partition
// ("" when none).
func (k *consumer) handleSpans(ctx context.Context, res *queen.PopResult, popStart time.Time) (retry string) {
	msgs := res.Messages
	spans := 1
	for i := 1; i < len(msgs); i++ {
		if msgs[i].PartitionID != msgs[i-1].PartitionID {
			spans++
		}
	}
	k.c.Spans.Add(int64(spans))
	poison := false
	for i := range msgs {
		poison = poison || txnid.IsPoison(msgs[i].TransactionID, k.cfg.FailRatio)
	}
	if spans == 1 || !poison {
		return k.handle(ctx, res, popStart)
	}
	for i := 0; i < len(msgs); {
		j := i + 1
		for j < len(msgs) && msgs[j].PartitionID == msgs[i].PartitionID {
			j++
		}
		sub := *res
		sub.Messages = msgs[i:j]
		if r := k.handle(ctx, &sub, popStart); retry == "" {
			retry = r
		}
		i = j
	}
	return retry
}

// handle runs the handler over a popped batch and acks it. It returns the
// partition of a failure answered retry_scheduled ("" when none). With
// FailCrash a poison message ends the batch as a crash would: the messages
// before it are acked completed, it and the rest are never acked, and the
// lease is abandoned. With FailCrashBatch nothing of a batch that holds a
// poison message is acked: the handler acks its batch at the end and
// crashed before.
//
// popStart is when the pop was sent: an ack answered at least the queue's
// leaseTime after it may find the lease run out (SPEC.md §4), and its
// lease_invalid answer is then the broker's right answer (a frozen broker,
// a restarted database or a busy machine held the pop or the ack), not a
// finding.
func (k *consumer) handle(ctx context.Context, res *queen.PopResult, popStart time.Time) (retry string) {
	now := time.Now()
	msgs := res.Messages
	// The handler: every message succeeds but a poison one, which fails;
	// the batch stops at the first failure.
	k.acks = k.acks[:0]
	for i := range msgs {
		a := client.AckFor(msgs[i])
		if a.LeaseID == "" && res.LeaseID != nil {
			a.LeaseID = *res.LeaseID
		}
		if a.ConsumerGroup == "" {
			a.ConsumerGroup = k.g.name
		}
		if txnid.IsPoison(msgs[i].TransactionID, k.cfg.FailRatio) {
			a.Status, a.Error = string(queen.AckFailed), txnid.PoisonError
			k.acks = append(k.acks, a)
			break
		}
		k.acks = append(k.acks, a)
	}
	handled := len(k.acks)
	poisoned := k.acks[handled-1].Status == string(queen.AckFailed)
	crashed := poisoned && txnid.Crashes(k.cfg.FailMode)
	// Whether the broker counts this delivery as a failed delivery of the
	// poison message (SPEC.md §4): a failed ack always; an abandoned lease
	// only when the poison message is the one unacked message it leaves.
	charge := poisoned
	switch k.cfg.FailMode {
	case txnid.FailCrash:
		charge = poisoned && handled == len(msgs)
	case txnid.FailCrashBatch:
		charge = poisoned && len(msgs) == 1
	}
	k.keys = k.g.deliver(k.keys[:0], msgs, handled, now, k, charge)
	if crashed {
		k.g.crash(k, msgs, handled, now)
		if k.cfg.FailMode == txnid.FailCrashBatch {
			return ""
		}
		k.acks = k.acks[:handled-1]
		if len(k.acks) == 0 {
			return ""
		}
	}

	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.cfg.RequestTimeout)
	ackStart := time.Now()
	results, err := k.cl.Ack(actx, k.g.name, k.acks)
	k.c.AckLatency.Record(time.Since(ackStart))
	cancel()
	k.c.AckCalls.Add(1)
	if err != nil {
		k.c.AckErrors.Add(1)
		qe := queen.AsError(err)
		k.lastError = "ack: " + qe.Error()
		k.c.Obs.Record("ack:" + qe.Code)
	} else {
		k.c.Obs.Record("")
	}
	late := time.Since(popStart) >= time.Duration(k.cfg.LeaseSeconds)*time.Second
	expired := k.g.record(k.keys[:len(k.acks)], msgs[:len(k.acks)], k.acks, results, err, k.c, late)
	if crashed {
		if (err != nil || expired) && k.keys[handled-1] != noKey {
			// The prefix's ack may not have applied: the expiry may then
			// count a message of the prefix instead of the poison one.
			k.g.mu.Lock()
			e := k.g.m.get(k.keys[handled-1])
			e.unknown = inc(e.unknown)
			k.g.m.put(k.keys[handled-1], e)
			k.g.mu.Unlock()
		}
		return ""
	}
	if last := handled - 1; err == nil && len(results) == handled && k.acks[last].Status == string(queen.AckFailed) &&
		results[last].Result == queen.RetryScheduled {
		return msgs[last].Partition
	}
	return ""
}

// crash books a lease the consumer abandoned on the poison message
// msgs[handled-1] (the crash modes): a lease expiry at the broker, which
// bisects the redelivery when it leaves several messages unacked; with
// FailCrashBatch the handled messages before the poison one were handled
// for nothing (abandoned). It opens or extends the partition's stall.
func (g *group) crash(k *consumer, msgs []queen.Message, handled int, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.crashes++
	unacked := len(msgs) - handled + 1
	if k.cfg.FailMode == txnid.FailCrashBatch {
		unacked = len(msgs)
		for i := range handled - 1 {
			if pi, ok := k.partIdx[msgs[i].Partition]; ok && msgs[i].Offset >= 0 && msgs[i].Offset <= txnid.SeqMask {
				key := txnid.MakeKey(pi, uint64(msgs[i].Offset))
				e := g.m.get(key)
				e.abandoned = inc(e.abandoned)
				g.m.put(key, e)
			}
		}
	}
	if unacked > 1 {
		g.bisected++
	}
	p := &msgs[handled-1]
	if pi, ok := k.partIdx[p.Partition]; ok {
		g.poisoned(pi, p.Offset, now)
	}
}

// poisoned opens (or extends) partition pi's stall on the poison message at
// offset off, which failed at now (under mu).
func (g *group) poisoned(pi int, off int64, now time.Time) {
	if s := g.stalls[pi]; s != nil {
		s.poison = max(s.poison, off)
		return
	}
	g.stalls[pi] = &stall{since: now, poison: off}
}

// deliver books a pop reply: every message as delivered, the first handled
// as handled, with their checks (the group, the transactionId, the order,
// the retry count). charge: the last handled message is poison and this
// delivery counts a failed delivery of it at the broker. It appends each
// message's key to keys. A delivery that starts past its partition's
// stalled poison messages ends the stall.
func (g *group) deliver(keys []uint64, msgs []queen.Message, handled int, now time.Time, k *consumer, charge bool) []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range msgs {
		if i > 0 && msgs[i].Partition == msgs[i-1].Partition {
			continue // not the start of a partition's span
		}
		if pi, ok := k.partIdx[msgs[i].Partition]; ok {
			if s := g.stalls[pi]; s != nil && msgs[i].Offset > s.poison {
				g.stallDur = append(g.stallDur, now.Sub(s.since))
				delete(g.stalls, pi)
			}
		}
	}
	var redelivered, first int64
	for i := range msgs {
		m := &msgs[i]
		key := noKey
		pi, ok := k.partIdx[m.Partition]
		switch {
		case m.Queue != "" && m.Queue != k.cfg.Queue:
			g.issues.Add(report.IssueWrongDelivery, "group %s popped from queue %s got a message of queue %q (partition %q offset %d)", g.name, k.cfg.Queue, m.Queue, m.Partition, m.Offset)
		case !ok:
			g.issues.Add(report.IssueWrongDelivery, "group %s got a message of partition %q (offset %d, transactionId %q), which this run never pushed to", g.name, m.Partition, m.Offset, m.TransactionID)
		case m.Offset < 0 || m.Offset > txnid.SeqMask:
			g.issues.Add(report.IssueWrongDelivery, "group %s got partition %s offset %d (transactionId %q)", g.name, m.Partition, m.Offset, m.TransactionID)
		default:
			key = txnid.MakeKey(pi, uint64(m.Offset))
		}
		if m.ConsumerGroup != "" && m.ConsumerGroup != g.name {
			g.issues.Add(report.IssueWrongDelivery, "group %s got %s/%d labelled consumerGroup %q", g.name, m.Partition, m.Offset, m.ConsumerGroup)
		}
		if i > 0 && m.Partition == msgs[i-1].Partition && m.Offset != msgs[i-1].Offset+1 {
			g.issues.Add(report.IssueOutOfOrder, "group %s: one pop reply has %s offset %d right after offset %d", g.name, m.Partition, m.Offset, msgs[i-1].Offset)
		}
		keys = append(keys, key)
		if key == noKey {
			continue
		}
		e := g.m.get(key)
		fp := txnid.Fingerprint(m.TransactionID)
		switch {
		case e.popped == 0 && e.seen && e.txn != fp:
			g.issues.Add(report.IssueWrongDelivery, "group %s: %s offset %d was delivered with transactionId %q, but the message stored there has another one", g.name, m.Partition, m.Offset, m.TransactionID)
		case e.popped == 0:
			e.txn = fp
		default:
			redelivered++
			if e.txn != fp {
				g.issues.Add(report.IssueWrongDelivery, "group %s got %s offset %d with transactionId %q, another transactionId than at an earlier delivery", g.name, m.Partition, m.Offset, m.TransactionID)
			}
		}
		e.popped = inc(e.popped)
		if i < handled {
			poison := txnid.IsPoison(m.TransactionID, k.cfg.FailRatio)
			// The retry count is the failures of this message before this
			// delivery: every earlier handling of a poison message failed,
			// and nothing else ever fails. The audit judges a mismatch once
			// it knows whether an ack of the message went unanswered (its
			// failure may not have counted).
			want := 0
			if poison {
				want = int(e.charged)
			}
			if m.RetryCount != want {
				if _, ok := g.retryMismatch[key]; !ok {
					g.retryMismatch[key] = retryMismatch{over: m.RetryCount > want, desc: fmt.Sprintf("group %s: %s offset %d (%s, handled %d times before) came with retryCount %d, want %d",
						g.name, m.Partition, m.Offset, poisonWord(poison), e.handled, m.RetryCount, want)}
				}
			}
			if e.handled == 0 {
				first++
				k.c.Latency.Record(now.Sub(m.CreatedAt))
			}
			e.handled = inc(e.handled)
			if poison && i == handled-1 {
				if charge {
					e.charged = inc(e.charged)
				}
				if pi, ok := k.partIdx[m.Partition]; ok && !txnid.Crashes(k.cfg.FailMode) {
					g.poisoned(pi, m.Offset, now)
				}
			}
		}
		g.m.put(key, e)
	}
	n := int64(len(msgs))
	g.delivered.Add(n)
	g.handled.Add(int64(handled))
	g.redelivered.Add(redelivered)
	k.c.Delivered.Add(n)
	k.c.Handled.Add(int64(handled))
	k.c.Redelivered.Add(redelivered)
	k.c.FirstDeliveries.Add(first)
	return keys
}

func poisonWord(p bool) string {
	if p {
		return "poison"
	}
	return "not poison"
}

// record books the answer to an ack call: results (in request order) for
// acks, or err when the call got no answer (each ack's outcome unknown).
// late says the answer came at least the lease time after the pop was sent:
// a lease_invalid answer is then a lease that ran out (counted in
// ackAfterLease, not a finding). It reports whether any ack was answered so.
func (g *group) record(keys []uint64, msgs []queen.Message, acks []client.Ack, results []queen.AckResult, err error, c *Counters, late bool) (expired bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err == nil && len(results) != len(acks) {
		g.issues.Add(report.IssueAckUnexpected, "group %s: an ack call of %d acks was answered with %d results", g.name, len(acks), len(results))
		err = fmt.Errorf("%d results for %d acks", len(results), len(acks))
	}
	var acked, dead int64
	for i, key := range keys {
		var e consEntry
		if key != noKey {
			e = g.m.get(key)
		}
		m := &msgs[i]
		if err != nil {
			e.unknown = inc(e.unknown)
			if key != noKey {
				g.m.put(key, e)
			}
			continue
		}
		r := &results[i]
		g.results[r.Result]++
		if r.Index != i {
			g.issues.Add(report.IssueAckUnexpected, "group %s: ack result %d of a call carries index %d", g.name, i, r.Index)
		}
		failed := acks[i].Status == string(queen.AckFailed)
		switch {
		case r.Result == queen.LeaseInvalid && late:
			// Not applied: the span is delivered again.
			e.refused = inc(e.refused)
			g.ackAfterLease++
			expired = true
		case r.Result == queen.Unresolvable || r.Result == queen.LeaseInvalid:
			e.refused = inc(e.refused)
			g.issues.Add(report.IssueAckRefused, "group %s: the %s ack of %s offset %d (transactionId %q, lease %s) was answered %s: %s",
				g.name, acks[i].Status, m.Partition, m.Offset, m.TransactionID, acks[i].LeaseID, r.Result, r.Error)
		case !failed && r.Result == queen.Acked && r.Success:
			e.acked = inc(e.acked)
			acked++
		case !failed && r.Result == queen.Stale:
			e.stale = inc(e.stale)
		case failed && r.Result == queen.RetryScheduled:
			e.failed = inc(e.failed)
		case failed && r.Result == queen.DeadLettered:
			e.dead = inc(e.dead)
			dead++
		default:
			e.refused = inc(e.refused)
			g.issues.Add(report.IssueAckUnexpected, "group %s: the %s ack of %s offset %d (transactionId %q) was answered {success %t, result %q, error %q}",
				g.name, acks[i].Status, m.Partition, m.Offset, m.TransactionID, r.Success, r.Result, r.Error)
		}
		if key != noKey {
			g.m.put(key, e)
		}
	}
	g.acked.Add(acked)
	g.dead.Add(dead)
	c.Acked.Add(acked)
	c.DeadLettered.Add(dead)
	return expired
}

// inc is n+1, saturating at 255 (consEntry's counts).
func inc(n uint8) uint8 {
	if n == 255 {
		return n
	}
	return n + 1
}

package consumers

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/target"
	"github.com/queen-mq/queen-go/persistence"
)

// Phase is a run's consumers: Groups groups of Consumers consumers each,
// started with the producers (Run) and stopped once every group's cursor
// reached every partition's last offset (Drain, or the drain timeout
// passed); then the wake probe (Probe), the audit (NewAuditor) and the
// report (Report).
type Phase struct {
	cfg       *Config
	parts     []string
	groups    []*group
	consumers []*consumer
	clients   []target.ConsumeClient
	// admin configures the queue and runs the wake probe.
	admin target.ConsumeClient
	c     Counters
	// touched marks the partitions in which a producer got a queued or
	// duplicate answer: each holds at least one message.
	touched []atomic.Bool

	wg     sync.WaitGroup
	live   atomic.Int64
	cancel context.CancelFunc

	// epoch numbers the audit loop's cursor readings (from 1): a consumer
	// notes it when it starts a pop (consumer.inCall), so a reading is
	// applied only once every pop and ack sent before it is booked.
	epoch atomic.Uint64
	// audit is the run's consume audit (NewAuditor); auditStop and
	// auditDone stop its loop.
	audit                *Auditor
	auditStop, auditDone chan struct{}

	start, producersDone, end time.Time
	drained                   bool
	// drainProblem says why the drain ended without every cursor at the
	// end ("" when drained or interrupted).
	drainProblem string
	wake         *report.WakeReport
	// brokersAtStart and brokersAtEnd are the brokers' lease figures from
	// /metrics (Config.MetricsURLs, summed over those that answered; nil
	// when none did).
	brokersAtStart, brokersAtEnd *target.BrokerMetrics
}

// scrapeLeases sums the lease figures of the brokers' /metrics
// (Config.MetricsURLs); nil when none answered.
func (cp *Phase) scrapeLeases(ctx context.Context) *target.BrokerMetrics {
	if len(cp.cfg.MetricsURLs) == 0 {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hc := target.NewHTTPClient(1, cp.cfg.TLS)
	var sum *target.BrokerMetrics
	for _, u := range cp.cfg.MetricsURLs {
		m, err := target.ScrapeMetrics(qctx, hc, u)
		if err != nil {
			continue
		}
		if sum == nil {
			sum = &target.BrokerMetrics{}
		}
		sum.LeaseExpiries += m.LeaseExpiries
		sum.Bisections += m.Bisections
		sum.ExpiryDead += m.ExpiryDead
		sum.StallSeconds += m.StallSeconds
	}
	return sum
}

// groupName is the name of consumer group i of queue.
func groupName(queue string, i int) string { return fmt.Sprintf("%s-g%d", queue, i) }

// Store is what the consume phase reads of the database: the
// cursors (the drain) and the dead letters (the audit). *persistence.Audit
// is one.
type Store interface {
	Cursors(ctx context.Context, queues []string) ([]persistence.Cursor, error)
	DeadLetters(ctx context.Context, queues []string) ([]persistence.StoredDeadLetter, error)
}

// Dialer connects one client, named name.
type Dialer func(name string) (target.ConsumeClient, error)

// TargetDialer connects clients to cfg.Target: one NATS connection each,
// like independent clients, or one shared HTTP client.
func TargetDialer(cfg *Config) Dialer {
	hc := target.NewHTTPClient(cfg.Groups*cfg.Consumers+2, cfg.TLS)
	if len(cfg.Targets) > 1 && !strings.HasPrefix(cfg.Target, "nats://") {
		// Spread over the brokers round robin (the admin client first).
		n := 0
		return func(string) (target.ConsumeClient, error) {
			n++
			return target.NewFailoverConsumer(hc, cfg.Targets, n-1, cfg.AdminToken), nil
		}
	}
	n := 0
	return func(name string) (target.ConsumeClient, error) {
		n++
		cl, err := target.NewConsumeClient(cfg.Target, n-1, name, cfg.AdminToken, hc, cfg.NATSOptions...)
		if nc, ok := cl.(*target.NATSConsumer); ok && cfg.Chaos {
			// A pop that went to a killed or frozen broker is never
			// answered (or late): give up on it as on a push.
			nc.Slack = min(10*time.Second, cfg.RequestTimeout)
		}
		return cl, err
	}
}

// New makes the consume phase of cfg over parts (the run's partition
// names), connecting the admin client and each consumer's client through
// dial.
func New(cfg *Config, parts []string, dial Dialer) (*Phase, error) {
	cp := &Phase{cfg: cfg, parts: parts, touched: make([]atomic.Bool, len(parts))}
	cp.epoch.Store(1)
	partIdx := make(map[string]int, len(parts))
	for i, p := range parts {
		partIdx[p] = i
	}
	var err error
	if cp.admin, err = dial("queen-loadtest-admin"); err != nil {
		return nil, err
	}
	cp.clients = append(cp.clients, cp.admin)
	for g := range cfg.Groups {
		grp := newGroup(groupName(cfg.Queue, g))
		grp.m.mapped = &cp.c.RecordBytes
		cp.groups = append(cp.groups, grp)
		for i := range cfg.Consumers {
			cl, err := dial(fmt.Sprintf("queen-loadtest-%s-c%d", grp.name, i))
			if err != nil {
				cp.Close()
				return nil, err
			}
			cp.clients = append(cp.clients, cl)
			cp.consumers = append(cp.consumers, &consumer{idx: i, g: grp, cfg: cfg, cl: cl, partIdx: partIdx, c: &cp.c, epoch: &cp.epoch})
		}
	}
	return cp, nil
}

// Counters are the phase's live totals (the progress line reads them; a
// cluster run sets their Obs before Run).
func (cp *Phase) Counters() *Counters { return &cp.c }

// Touched marks the partitions holding a message (one per partition of
// the run): the producers set them (produce.Counters.Touched), the drain
// reads them.
func (cp *Phase) Touched() []atomic.Bool { return cp.touched }

// Admin is the phase's first client, which configures the run's queue and
// runs the wake probe.
func (cp *Phase) Admin() target.ConsumeClient { return cp.admin }

// QueueOptions are the queue options the consumers need configured before
// the load (SPEC.md §6): leaseTime (seconds) and retryLimit.
func (cfg *Config) QueueOptions() map[string]int {
	return map[string]int{"leaseTime": cfg.LeaseSeconds, "retryLimit": cfg.RetryLimit}
}

// Close closes the phase's clients.
func (cp *Phase) Close() {
	for _, cl := range cp.clients {
		cl.Close()
	}
}

// Run starts the consumers on a context of their own (derived from ctx,
// so an interrupt stops them too).
func (cp *Phase) Run(ctx context.Context, start time.Time) {
	cp.start = start
	cp.brokersAtStart = cp.scrapeLeases(ctx)
	cctx, cancel := context.WithCancel(ctx)
	cp.cancel = cancel
	for _, k := range cp.consumers {
		cp.wg.Add(1)
		cp.live.Add(1)
		go func() {
			defer cp.wg.Done()
			defer cp.live.Add(-1)
			k.run(cctx)
		}()
	}
}

// sleep waits d or until ctx ends; it reports whether d passed (ctx did
// not end).
func sleep(ctx context.Context, d time.Duration) bool {
	wait, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	<-wait.Done()
	return ctx.Err() == nil
}

// drainPoll is how often the drain reads the cursors, at most: near the
// end it reads them sooner (nextDrainPoll), down to minDrainPoll, so the
// drain's time is not rounded up by a whole interval.
const (
	drainPoll    = 250 * time.Millisecond
	minDrainPoll = 20 * time.Millisecond
)

// nextDrainPoll returns the wait before the next look at the cursors: the
// time the (group, partition) pairs still behind need at the rate the last
// interval cleared them (pairs cleared over elapsed), within [minDrainPoll,
// drainPoll]; drainPoll when none cleared.
func nextDrainPoll(behind, cleared int64, elapsed time.Duration) time.Duration {
	if cleared <= 0 || elapsed <= 0 {
		return drainPoll
	}
	est := time.Duration(float64(elapsed) * float64(behind) / float64(cleared))
	return min(max(est, minDrainPoll), drainPoll)
}

// Drain waits, after the producers stopped, until every group's cursor is
// at every partition's last offset, every consumer stopped, ctx ended, or
// no cursor moved for ConsumeDrainTimeout; then it stops the consumers.
// The timeout is one of no progress: a slow drain that keeps moving is
// waited for (it ends, the cursors only move forward towards the last
// offsets), a stuck one fails.
func (cp *Phase) Drain(ctx context.Context, a Store) {
	cp.producersDone = time.Now()
	lastMove, lastSum := cp.producersDone, int64(-1)
	lastLook, lastPairs := time.Time{}, int64(-1)
	for ctx.Err() == nil {
		st, err := cp.behind(ctx, a)
		if err == nil && st.behind == "" {
			cp.drained = true
			break
		}
		now := time.Now()
		wait := drainPoll
		if err == nil && lastPairs >= 0 {
			wait = nextDrainPoll(st.pairs, lastPairs-st.pairs, now.Sub(lastLook))
		}
		if err == nil {
			lastLook, lastPairs = now, st.pairs
		}
		if err != nil {
			st.behind = "reading the cursors: " + err.Error()
		} else if st.sum > lastSum {
			lastMove, lastSum = now, st.sum
		}
		if cp.live.Load() == 0 {
			cp.drainProblem = "every consumer stopped (" + cp.fatals() + "); " + st.behind
			break
		}
		if now.Sub(lastMove) >= cp.cfg.ConsumeDrainTimeout {
			cp.drainProblem = fmt.Sprintf("no cursor moved for %s (%s after the producers stopped): %s",
				cp.cfg.ConsumeDrainTimeout, now.Sub(cp.producersDone).Truncate(time.Second), st.behind)
			break
		}
		sleep(ctx, wait)
	}
	cp.end = time.Now()
	cp.cancel()
	cp.wg.Wait()
	cp.brokersAtEnd = cp.scrapeLeases(context.WithoutCancel(ctx))
}

// drainState is one look at the cursors: behind describes the (group,
// partition) pairs short of the last offset ("" when none is), pairs
// counts them; sum is the sum of the groups' cursors, which grows as long
// as anything is consumed.
type drainState struct {
	behind string
	pairs  int64
	sum    int64
}

// drainer is the cheap drain check a real store offers
// (persistence.Audit.Drain): one aggregate statement instead of every
// consumer row, which at thousands of partitions costs PostgreSQL more than
// the poll interval leaves.
type drainer interface {
	Drain(ctx context.Context, queue string, groups, parts []string) (persistence.DrainState, error)
}

func (cp *Phase) behind(ctx context.Context, a Store) (drainState, error) {
	if d, ok := a.(drainer); ok {
		names := make([]string, len(cp.groups))
		for i, g := range cp.groups {
			names[i] = g.name
		}
		ds, err := d.Drain(ctx, cp.cfg.Queue, names, cp.parts)
		if err != nil {
			return drainState{}, err
		}
		st := drainState{sum: ds.Sum, pairs: ds.Behind}
		if ds.Behind > 0 {
			example := fmt.Sprintf("group %s has not consumed partition %s yet", ds.Group, ds.Partition)
			if ds.Cursor != nil {
				example = fmt.Sprintf("group %s's cursor in partition %s is %d, the last offset %d", ds.Group, ds.Partition, *ds.Cursor, ds.LastOffset)
			}
			st.behind = fmt.Sprintf("%d (group, partition) pairs not consumed to the end, e.g. %s", ds.Behind, example)
		}
		return st, nil
	}
	rows, err := a.Cursors(ctx, []string{cp.cfg.Queue})
	if err != nil {
		return drainState{}, err
	}
	return cursorsBehind(cp.groups, cp.parts, cp.touched, rows), nil
}

// cursorsBehind is behind's check over cursor rows: a partition must be
// consumed by every group when it has a message (a cursor row of any group
// with a last offset >= 0, or touched).
func cursorsBehind(groups []*group, parts []string, touched []atomic.Bool, rows []persistence.Cursor) drainState {
	var st drainState
	partIdx := make(map[string]int, len(parts))
	for i, p := range parts {
		partIdx[p] = i
	}
	last := make([]int64, len(parts))
	for i := range last {
		last[i] = -2 // unknown
	}
	cur := make([][]int64, len(groups))
	gi := map[string]int{}
	for i, g := range groups {
		gi[g.name] = i
		cur[i] = make([]int64, len(parts))
		for p := range cur[i] {
			cur[i][p] = -2 // no row
		}
	}
	for _, r := range rows {
		p, ok := partIdx[r.Partition]
		if !ok {
			continue
		}
		last[p] = max(last[p], r.LastOffset)
		if g, ok := gi[r.ConsumerGroup]; ok {
			cur[g][p] = r.Cursor
			st.sum += r.Cursor + 1
		}
	}
	var n int
	var example string
	for g := range groups {
		for p := range parts {
			has := last[p] >= 0 || (touched != nil && touched[p].Load())
			if !has || (cur[g][p] >= 0 && cur[g][p] == last[p]) {
				continue
			}
			n++
			if example == "" {
				switch {
				case cur[g][p] == -2:
					example = fmt.Sprintf("group %s has not consumed partition %s yet", groups[g].name, parts[p])
				default:
					example = fmt.Sprintf("group %s's cursor in partition %s is %d, the last offset %d", groups[g].name, parts[p], cur[g][p], last[p])
				}
			}
		}
	}
	if n > 0 {
		st.pairs = int64(n)
		st.behind = fmt.Sprintf("%d (group, partition) pairs not consumed to the end, e.g. %s", n, example)
	}
	return st
}

// fatals lists the consumers' refusals, or their last errors.
func (cp *Phase) fatals() string {
	var out []string
	seen := map[string]bool{}
	for _, k := range cp.consumers {
		s := k.lastError
		if k.fatal != nil {
			s = k.fatal.Error()
		}
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return "no error"
	}
	if len(out) > 3 {
		out = append(out[:3], fmt.Sprintf("and %d more", len(out)-3))
	}
	return strings.Join(out, "; ")
}

// Probe runs the wake-latency probe on a fresh queue next to the run's.
func (cp *Phase) Probe(ctx context.Context) {
	if cp.cfg.WakeProbes <= 0 || ctx.Err() != nil {
		return
	}
	var snd target.Sender
	if strings.HasPrefix(cp.cfg.Target, "nats://") {
		s, err := target.NewNATSSender(cp.cfg.Target, 0, cp.cfg.AdminToken, cp.cfg.NATSOptions...)
		if err != nil {
			cp.wake = &report.WakeReport{Queue: cp.cfg.Queue + "-probe", Rounds: cp.cfg.WakeProbes, LastError: err.Error()}
			return
		}
		defer s.Close()
		snd = s
	} else {
		snd = target.NewHTTPSender(target.NewHTTPClient(2, cp.cfg.TLS), cp.cfg.AdminToken, cp.cfg.Target)
	}
	cp.wake = wakeProbe(ctx, cp.admin, snd, cp.cfg.Queue+"-probe", cp.cfg.WakeProbes)
}

// poisonReport builds the consume report's poison section (nil without
// poison messages).
func (cp *Phase) poisonReport() *report.PoisonReport {
	if cp.cfg.FailRatio <= 0 {
		return nil
	}
	p := &report.PoisonReport{}
	var durs []time.Duration
	for _, g := range cp.groups {
		g.mu.Lock()
		p.AbandonedLeases += g.crashes
		p.AbandonedSpans += g.bisected
		p.OpenStalls += int64(len(g.stalls))
		durs = append(durs, g.stallDur...)
		g.mu.Unlock()
	}
	p.Stalls = int64(len(durs))
	var sum time.Duration
	for _, d := range durs {
		sum += d
	}
	p.StallSeconds = math.Round(sum.Seconds()*1000) / 1000
	p.IsolateMS = report.LatencyOf(durs)
	if a, b := cp.brokersAtStart, cp.brokersAtEnd; a != nil && b != nil {
		p.Brokers = &report.BrokerPoison{LeaseExpiries: b.LeaseExpiries - a.LeaseExpiries, Bisections: b.Bisections - a.Bisections,
			DeadLettered: b.ExpiryDead - a.ExpiryDead, StallSeconds: math.Round((b.StallSeconds-a.StallSeconds)*1000) / 1000}
	}
	return p
}

// Report builds the consume report; audit is the finished audit
// (FinishAudit; nil: none).
func (cp *Phase) Report(audit *report.ConsumeAudit) *report.ConsumeReport {
	ca := cp.audit
	secs := cp.end.Sub(cp.start).Seconds()
	r := &report.ConsumeReport{ConsumersPerGroup: cp.cfg.Consumers, FailRatio: cp.cfg.FailRatio, FailMode: cp.cfg.FailMode,
		RetryLimit: cp.cfg.RetryLimit, LeaseSeconds: cp.cfg.LeaseSeconds, Batch: cp.cfg.ConsumeBatch, ConsumePartitions: cp.cfg.ConsumePartitions,
		Seconds: math.Round(secs*1000) / 1000, DrainSeconds: math.Round(cp.end.Sub(cp.producersDone).Seconds()*1000) / 1000,
		Drained: cp.drained, DrainProblem: cp.drainProblem,
		Pops: cp.c.Pops.Load(), EmptyPops: cp.c.EmptyPops.Load(), PopErrors: cp.c.PopErrors.Load(),
		Deliveries: cp.c.Delivered.Load(), Handled: cp.c.Handled.Load(), Redeliveries: cp.c.Redelivered.Load(),
		Acked: cp.c.Acked.Load(), DeadLettered: cp.c.DeadLettered.Load(),
		AckCalls: cp.c.AckCalls.Load(), AckErrors: cp.c.AckErrors.Load(), AckResults: map[string]int64{},
		E2ESamples: cp.c.FirstDeliveries.Load(), Wake: cp.wake, Audit: audit, Poison: cp.poisonReport()}
	r.AckedPerSecond = report.PerSecond(r.Acked, secs)
	if full := r.Pops - r.EmptyPops; full > 0 {
		r.PartitionsPerPop = math.Round(float64(cp.c.Spans.Load())/float64(full)*100) / 100
	}
	for i, g := range cp.groups {
		r.Groups = append(r.Groups, g.name)
		gr := report.GroupReport{Group: g.name, Acked: g.acked.Load(), Deliveries: g.delivered.Load(), Handled: g.handled.Load(),
			Redeliveries: g.redelivered.Load(), DeadLettered: g.dead.Load()}
		gr.AckedPerSecond = report.PerSecond(gr.Acked, secs)
		if ca != nil && audit != nil {
			gr.Messages, gr.Poison, gr.ExpiredBeforeAcked = ca.perGroup[i].messages, ca.perGroup[i].poison, ca.perGroup[i].expired
		}
		r.PerGroup = append(r.PerGroup, gr)
		for res, n := range g.results {
			r.AckResults[string(res)] += n
		}
	}
	for _, k := range cp.consumers {
		if k.fatal != nil {
			r.LastError = k.fatal.Error()
		} else if k.lastError != "" && r.LastError == "" {
			r.LastError = k.lastError
		}
	}
	r.Latency = cp.c.Latency.Latency()
	r.PopLatency, r.AckLatency = cp.c.PopLatency.Latency(), cp.c.AckLatency.Latency()
	return r
}

// NewAuditor makes the run's end-to-end consume audit, before the
// consumers run: feed it every stored message as the storage audit reads
// it (Auditor.Stored), start its loop (StartAudit), and finish it after the
// drain (FinishAudit). retention is the queue's retentionSeconds (0: keep).
func (cp *Phase) NewAuditor(retention time.Duration) *Auditor {
	ca := newAuditor(cp.groups, cp.parts, cp.cfg.FailRatio, cp.cfg.RetryLimit)
	ca.failMode, ca.retention = cp.cfg.FailMode, retention
	cp.audit = ca
	return ca
}

// Backlog is each group's backlog (report.GroupBacklog), in group order,
// from one reading of the queue's cursors (Store.Cursors: a row per group
// and partition it has popped) and stored, the messages the storage audit
// has read so far. In a partition some group has a row in, a group's
// backlog is the partition's last offset less its cursor (the whole
// partition, last offset + 1, when it has no row there yet); stored beyond
// the messages of those partitions is in partitions no group has popped yet,
// and in every group's backlog. Rows of other queues or groups are ignored.
func (cp *Phase) Backlog(cursors []persistence.Cursor, stored int64) []report.GroupBacklog {
	last := map[string]int64{} // partition → its last offset
	at := make([]map[string]int64, len(cp.groups))
	gi := make(map[string]int, len(cp.groups))
	for i, g := range cp.groups {
		gi[g.name] = i
		at[i] = map[string]int64{}
	}
	for _, c := range cursors {
		if c.Queue != cp.cfg.Queue {
			continue
		}
		if lo, ok := last[c.Partition]; !ok || c.LastOffset > lo {
			last[c.Partition] = c.LastOffset
		}
		if i, ok := gi[c.ConsumerGroup]; ok {
			at[i][c.Partition] = c.Cursor
		}
	}
	var inRows int64
	for _, lo := range last {
		inRows += lo + 1
	}
	out := make([]report.GroupBacklog, len(cp.groups))
	for i, g := range cp.groups {
		n := max(0, stored-inRows)
		for p, lo := range last {
			if c, ok := at[i][p]; ok {
				n += max(0, lo-c)
			} else {
				n += lo + 1
			}
		}
		out[i] = report.GroupBacklog{Group: g.name, Messages: n}
	}
	return out
}

// cursorReading is one look at the cursors for the audit loop: read at
// `at`, applicable once every consumer's call started before epoch is
// booked.
type cursorReading struct {
	rows  []persistence.Cursor
	at    time.Time
	epoch uint64
}

// settled reports whether no consumer is in a pop (with its handling and
// ack) that started before epoch.
func (cp *Phase) settled(epoch uint64) bool {
	for _, k := range cp.consumers {
		if e := k.inCall.Load(); e != 0 && e < epoch {
			return false
		}
	}
	return true
}

// StartAudit runs the consume audit's loop on a goroutine of its own until
// FinishAudit or ctx ends: every `every` it applies the last cursor reading
// once settled (Auditor.Forget: the records every group has passed are
// checked and released) and reads the cursors again (Store.Cursors). A
// reading is applied only after every pop and ack sent before it was
// booked, so no answer still on its way concerns a released record. Call
// it at most once, after NewAuditor.
func (cp *Phase) StartAudit(ctx context.Context, a Store, every time.Duration) {
	ca := cp.audit
	cp.auditStop, cp.auditDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(cp.auditDone)
		t := time.NewTicker(every)
		defer t.Stop()
		var pending *cursorReading
		for {
			select {
			case <-cp.auditStop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if pending != nil && cp.settled(pending.epoch) {
				ca.Forget(pending.rows, pending.at)
				pending = nil
			}
			if pending == nil {
				rows, err := a.Cursors(ctx, []string{cp.cfg.Queue})
				if err == nil {
					// The epoch after the reading: a call noted with an
					// earlier one may have been sent before it.
					pending = &cursorReading{rows: rows, at: time.Now(), epoch: cp.epoch.Add(1)}
				}
			}
		}
	}()
}

// FinishAudit stops the audit's loop and runs the end of the audit after
// the drain (the consumers have stopped): it reads the dead letters and the
// cursors (final now) and checks what the loop has not; complete: the run
// was not interrupted (every group was to reach the end).
func (cp *Phase) FinishAudit(ctx context.Context, a Store, complete bool) (*report.ConsumeAudit, error) {
	if cp.auditStop != nil {
		close(cp.auditStop)
		<-cp.auditDone
		cp.auditStop = nil
	}
	dead, err := a.DeadLetters(ctx, []string{cp.cfg.Queue})
	if err != nil {
		return nil, fmt.Errorf("read the dead letters: %w", err)
	}
	cursors, err := a.Cursors(ctx, []string{cp.cfg.Queue})
	if err != nil {
		return nil, fmt.Errorf("read the cursors: %w", err)
	}
	ca := cp.audit
	if cp.drainProblem != "" && complete {
		ca.found.Add(report.IssueNotDrained, "%s", cp.drainProblem)
	}
	return ca.finish(complete, dead, cursors, time.Now()), nil
}

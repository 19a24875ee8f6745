package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queen-mq/queen-go/loadtest/chaos"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/target"
	"github.com/queen-mq/queen-go/persistence"
)

// consumePhase is a run's consumers: Groups groups of Consumers consumers
// each, started with the producers and stopped once every group's cursor
// reached every partition's last offset (or the drain timeout passed).
type consumePhase struct {
	cfg       *Config
	parts     []string
	groups    []*group
	consumers []*consumer
	clients   []target.ConsumeClient
	// admin configures the queue and runs the wake probe.
	admin target.ConsumeClient
	c     consumeCounters
	// touched marks the partitions in which a producer got a queued or
	// duplicate answer: each holds at least one message.
	touched []atomic.Bool

	wg     sync.WaitGroup
	live   atomic.Int64
	cancel context.CancelFunc

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
func (cp *consumePhase) scrapeLeases(ctx context.Context) *target.BrokerMetrics {
	if len(cp.cfg.MetricsURLs) == 0 {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hc := target.NewHTTPClient(1)
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

// consumeStore is what the consume phase reads of the database: the
// cursors (the drain) and the dead letters (the audit). *persistence.Audit
// is one.
type consumeStore interface {
	Cursors(ctx context.Context, queues []string) ([]persistence.Cursor, error)
	DeadLetters(ctx context.Context, queues []string) ([]persistence.StoredDeadLetter, error)
}

// dialer connects one client, named name.
type dialer func(name string) (target.ConsumeClient, error)

// targetDialer connects clients to cfg.Target: one NATS connection each,
// like independent clients, or one shared HTTP client.
func targetDialer(cfg *Config) dialer {
	hc := target.NewHTTPClient(cfg.Groups*cfg.Consumers + 2)
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
		cl, err := target.NewConsumeClient(cfg.Target, n-1, name, cfg.AdminToken, hc)
		if nc, ok := cl.(*target.NATSConsumer); ok && chaos.On(cfg.Chaos) {
			// A pop that went to a killed or frozen broker is never
			// answered (or late): give up on it as on a push.
			nc.Slack = min(10*time.Second, cfg.RequestTimeout)
		}
		return cl, err
	}
}

// newConsumePhase connects the consumers' clients through dial.
func newConsumePhase(cfg *Config, parts []string, dial dialer) (*consumePhase, error) {
	cp := &consumePhase{cfg: cfg, parts: parts, touched: make([]atomic.Bool, len(parts))}
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
		cp.groups = append(cp.groups, grp)
		for i := range cfg.Consumers {
			cl, err := dial(fmt.Sprintf("queen-loadtest-%s-c%d", grp.name, i))
			if err != nil {
				cp.close()
				return nil, err
			}
			cp.clients = append(cp.clients, cl)
			cp.consumers = append(cp.consumers, &consumer{idx: i, g: grp, cfg: cfg, cl: cl, partIdx: partIdx, c: &cp.c})
		}
	}
	return cp, nil
}

func (cp *consumePhase) close() {
	for _, cl := range cp.clients {
		cl.Close()
	}
}

// configureQueue configures the run's queue through cl before the load:
// leaseTime and retryLimit when consuming, dedupWindowSeconds and
// retentionSeconds when set. Configure is a full replace (SPEC.md §6):
// every other option goes back to its default, which is what the run's
// queue had before (the harness never configured it otherwise). The reply
// must echo what the audit counts with.
func configureQueue(ctx context.Context, cfg *Config, cl target.ConsumeClient) error {
	want := map[string]int{}
	if cfg.Consumers > 0 {
		want["leaseTime"], want["retryLimit"] = cfg.LeaseSeconds, cfg.RetryLimit
	}
	if cfg.DedupWindow > 0 {
		want["dedupWindowSeconds"] = int(cfg.DedupWindow / time.Second)
	}
	if cfg.Retention > 0 {
		want["retentionSeconds"] = int(cfg.Retention / time.Second)
	}
	body, _ := json.Marshal(map[string]any{"queue": cfg.Queue, "options": want})
	ctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	data, err := cl.Configure(ctx, body)
	if err != nil {
		return fmt.Errorf("configure queue %s: %w", cfg.Queue, err)
	}
	var reply struct {
		Options map[string]any `json:"options"`
	}
	if err := json.Unmarshal(data, &reply); err != nil {
		return fmt.Errorf("configure queue %s: the reply does not decode: %v: %s", cfg.Queue, err, target.Clip(data))
	}
	for k, v := range want {
		if got, ok := reply.Options[k].(float64); !ok || got != float64(v) {
			return fmt.Errorf("configure queue %s with %s %d: the reply says %s", cfg.Queue, k, v, target.Clip(data))
		}
	}
	return nil
}

// run starts the consumers on a context of their own (derived from ctx,
// so an interrupt stops them too).
func (cp *consumePhase) run(ctx context.Context, start time.Time) {
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

// drainPoll is how often the drain reads the cursors.
const drainPoll = 250 * time.Millisecond

// drain waits, after the producers stopped, until every group's cursor is
// at every partition's last offset, every consumer stopped, ctx ended, or
// no cursor moved for ConsumeDrainTimeout; then it stops the consumers.
// The timeout is one of no progress: a slow drain that keeps moving is
// waited for (it ends, the cursors only move forward towards the last
// offsets), a stuck one fails.
func (cp *consumePhase) drain(ctx context.Context, a consumeStore) {
	cp.producersDone = time.Now()
	lastMove, lastSum := cp.producersDone, int64(-1)
	for ctx.Err() == nil {
		st, err := cp.behind(ctx, a)
		if err == nil && st.behind == "" {
			cp.drained = true
			break
		}
		now := time.Now()
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
		sleep(ctx, drainPoll)
	}
	cp.end = time.Now()
	cp.cancel()
	cp.wg.Wait()
	cp.brokersAtEnd = cp.scrapeLeases(context.WithoutCancel(ctx))
}

// drainState is one look at the cursors: behind describes the (group,
// partition) pairs short of the last offset ("" when none is); sum is the
// sum of the groups' cursors, which grows as long as anything is consumed.
type drainState struct {
	behind string
	sum    int64
}

// drainer is the cheap drain check a real store offers
// (persistence.Audit.Drain): one aggregate statement instead of every
// consumer row, which at thousands of partitions costs PostgreSQL more than
// the poll interval leaves.
type drainer interface {
	Drain(ctx context.Context, queue string, groups, parts []string) (persistence.DrainState, error)
}

func (cp *consumePhase) behind(ctx context.Context, a consumeStore) (drainState, error) {
	if d, ok := a.(drainer); ok {
		names := make([]string, len(cp.groups))
		for i, g := range cp.groups {
			names[i] = g.name
		}
		ds, err := d.Drain(ctx, cp.cfg.Queue, names, cp.parts)
		if err != nil {
			return drainState{}, err
		}
		st := drainState{sum: ds.Sum}
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
		st.behind = fmt.Sprintf("%d (group, partition) pairs not consumed to the end, e.g. %s", n, example)
	}
	return st
}

// fatals lists the consumers' refusals, or their last errors.
func (cp *consumePhase) fatals() string {
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

// probe runs the wake-latency probe on a fresh queue next to the run's.
func (cp *consumePhase) probe(ctx context.Context) {
	if cp.cfg.WakeProbes <= 0 || ctx.Err() != nil {
		return
	}
	var snd target.Sender
	if strings.HasPrefix(cp.cfg.Target, "nats://") {
		s, err := target.NewNATSSender(cp.cfg.Target, 0)
		if err != nil {
			cp.wake = &report.WakeReport{Queue: cp.cfg.Queue + "-probe", Rounds: cp.cfg.WakeProbes, LastError: err.Error()}
			return
		}
		defer s.Close()
		snd = s
	} else {
		snd = target.NewHTTPSender(target.NewHTTPClient(2), cp.cfg.Target)
	}
	cp.wake = wakeProbe(ctx, cp.admin, snd, cp.cfg.Queue+"-probe", cp.cfg.WakeProbes)
}

// poisonReport builds the consume report's poison section (nil without
// poison messages).
func (cp *consumePhase) poisonReport() *report.PoisonReport {
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

// report builds the consume report; ca is the finished audit's auditor.
func (cp *consumePhase) report(ca *consumeAuditor, audit *report.ConsumeAudit) *report.ConsumeReport {
	secs := cp.end.Sub(cp.start).Seconds()
	r := &report.ConsumeReport{ConsumersPerGroup: cp.cfg.Consumers, FailRatio: cp.cfg.FailRatio, FailMode: cp.cfg.FailMode,
		RetryLimit: cp.cfg.RetryLimit, LeaseSeconds: cp.cfg.LeaseSeconds, Batch: cp.cfg.ConsumeBatch, ConsumePartitions: cp.cfg.ConsumePartitions,
		Seconds: math.Round(secs*1000) / 1000, DrainSeconds: math.Round(cp.end.Sub(cp.producersDone).Seconds()*1000) / 1000,
		Drained: cp.drained, DrainProblem: cp.drainProblem,
		Pops: cp.c.pops.Load(), EmptyPops: cp.c.emptyPops.Load(), PopErrors: cp.c.popErrors.Load(),
		Deliveries: cp.c.delivered.Load(), Handled: cp.c.handled.Load(), Redeliveries: cp.c.redelivered.Load(),
		Acked: cp.c.acked.Load(), DeadLettered: cp.c.deadLettered.Load(),
		AckCalls: cp.c.ackCalls.Load(), AckErrors: cp.c.ackErrors.Load(), AckResults: map[string]int64{},
		E2ESamples: cp.c.firstDeliveries.Load(), Wake: cp.wake, Audit: audit, Poison: cp.poisonReport()}
	r.AckedPerSecond = report.PerSecond(r.Acked, secs)
	if full := r.Pops - r.EmptyPops; full > 0 {
		r.PartitionsPerPop = math.Round(float64(cp.c.spans.Load())/float64(full)*100) / 100
	}
	for i, g := range cp.groups {
		r.Groups = append(r.Groups, g.name)
		gr := report.GroupReport{Group: g.name, Acked: g.acked.Load(), Deliveries: g.delivered.Load(), Handled: g.handled.Load(),
			Redeliveries: g.redelivered.Load(), DeadLettered: g.dead.Load()}
		gr.AckedPerSecond = report.PerSecond(gr.Acked, secs)
		if ca != nil {
			gr.Messages, gr.Poison = ca.perGroup[i].messages, ca.perGroup[i].poison
		}
		r.PerGroup = append(r.PerGroup, gr)
		for res, n := range g.results {
			r.AckResults[string(res)] += n
		}
	}
	var lat, popLat, ackLat []time.Duration
	for _, k := range cp.consumers {
		lat = append(lat, k.lat...)
		popLat = append(popLat, k.popLat...)
		ackLat = append(ackLat, k.ackLat...)
		if k.fatal != nil {
			r.LastError = k.fatal.Error()
		} else if k.lastError != "" && r.LastError == "" {
			r.LastError = k.lastError
		}
	}
	r.Latency = report.LatencyOf(lat)
	r.PopLatency, r.AckLatency = report.LatencyOf(popLat), report.LatencyOf(ackLat)
	return r
}

// newAuditor prepares the end-to-end audit: it reads the dead letters
// (the consumers have stopped, so they are final).
func (cp *consumePhase) newAuditor(ctx context.Context, a consumeStore, complete bool) (*consumeAuditor, error) {
	dead, err := a.DeadLetters(ctx, []string{cp.cfg.Queue})
	if err != nil {
		return nil, fmt.Errorf("read the dead letters: %w", err)
	}
	ca := newConsumeAuditor(cp.groups, cp.parts, cp.cfg.FailRatio, cp.cfg.RetryLimit, complete, dead)
	ca.failMode = cp.cfg.FailMode
	if cp.drainProblem != "" && complete {
		ca.found.Add(report.IssueNotDrained, "%s", cp.drainProblem)
	}
	return ca, nil
}

// errConsumeAudit wraps ErrAuditFailed for a failed consume audit.
func errConsumeAudit(a *report.ConsumeAudit, queue string) error {
	var n int64
	for _, c := range a.Issues {
		n += c
	}
	return fmt.Errorf("%w: %d violations of the end-to-end consume audit in queue %s", ErrAuditFailed, n, queue)
}

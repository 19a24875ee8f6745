package chaos

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/queen-mq/queen-go/loadtest/clientstats"
	"github.com/queen-mq/queen-go/loadtest/report"
)

// Chaos modes (Config.Mode). A fault is injected half an interval into the
// load and then every Config.Interval, never after the load's Config.Duration; a
// fault runs to its end (the broker back, the database accepting
// connections) before the next one can start, at least half an interval
// after that.
const (
	// None injects no fault (as does "").
	None = "none"
	// Kill kills a random live broker with SIGKILL and restarts it
	// (same port) after Config.Pause (default 1s). Needs Config.Cluster.
	Kill = "kill"
	// Stop freezes a random live broker with SIGSTOP for Config.Pause
	// (default 5s), then resumes it with SIGCONT: its requests in flight and
	// its shard leases hang meanwhile. Needs Config.Cluster.
	Stop = "stop"
	// PGRestart restarts the managed PostgreSQL with a fast shutdown
	// (pg_ctl stop -m fast) and starts it again on the same folder and port
	// (localpg.Cluster.Restart): every session ends, the transactions in
	// flight roll back and their items are answered failed. Needs Config.Cluster or
	// Config.RestartPostgres (--embedded).
	PGRestart = "pg-restart"
	// PGFailover kills the managed PostgreSQL primary with SIGKILL and
	// promotes its synchronous standby (SPEC.md §9): the brokers find the
	// new primary through their multi-host DATABASE_URL. Once per run (the
	// run goes on with one server). Needs Config.Cluster with PGStandby.
	PGFailover = "pg-failover"
	// NATSKill kills a node of the cluster's NATS cluster with SIGKILL
	// (the nodes in turn, 0, 1, 2, ..., skipping those that hold no broker
	// connection) and restarts it on the same ports
	// after Config.Pause (default 5 s), where it rejoins the cluster. The
	// brokers' and clients' connections on it move to the other nodes
	// (SPEC.md §9); its requests in flight are answered or time out and are
	// retried with the same transactionIds. Needs Config.Cluster with NATSNodes at
	// least 2.
	NATSKill = "nats-kill"
	// Mixed injects kill, stop and pg-restart (and nats-kill with
	// NATSNodes 2 or more, and pg-failover once, with a standby) in rounds
	// of one of each, in an order drawn from Config.Seed. Needs Config.Cluster.
	Mixed = "mixed"
)

// DefaultInterval is the time between faults when Config.Interval
// is 0: 20 s for kill, 10 s for stop, pg-restart and mixed (at least twice
// the brokers' shard lease with --brokers; 5 s with chaos).
func DefaultInterval(mode string) time.Duration {
	if mode == Kill {
		return 20 * time.Second
	}
	return 10 * time.Second
}

// On reports whether mode injects faults.
func On(mode string) bool { return mode != "" && mode != None }

// pauseFor is how long a fault of kind lasts before its recovery starts:
// Config.Pause when set, else 1 s for a kill (down before the restart), 5 s
// for a stop (frozen before SIGCONT) and a nats-kill (the node down before
// its restart), 0 for a PostgreSQL restart (the start follows the stop at
// once).
func (c *Config) pauseFor(kind string) time.Duration {
	if kind == report.FaultPGRestart || kind == report.FaultPGFailover {
		return 0
	}
	if c.Pause > 0 {
		return c.Pause
	}
	if kind == report.FaultStop || kind == report.FaultNATSKill {
		return 5 * time.Second
	}
	return time.Second
}

// faultKinds are the kinds of fault mode injects.
func faultKinds(mode string) []string {
	switch mode {
	case Kill:
		return []string{report.FaultKill}
	case Stop:
		return []string{report.FaultStop}
	case PGRestart:
		return []string{report.FaultPGRestart}
	case PGFailover:
		return []string{report.FaultPGFailover}
	case NATSKill:
		return []string{report.FaultNATSKill}
	case Mixed:
		return []string{report.FaultKill, report.FaultStop, report.FaultPGRestart}
	}
	return nil
}

// Run watches the cluster during a run (with Config.Cluster) and injects the
// faults of Config.Mode.
type Run struct {
	c    *Cluster // nil: a broker of the caller's (--embedded)
	cfg  *Config
	mode string
	// restartPG restarts the database (Cluster's, or RestartPostgres).
	restartPG func(context.Context) error
	// reqTimeout is the clients' request timeout: a request the fault left
	// unanswered fails that long after it.
	reqTimeout time.Duration
	stats      *clientstats.Stats
	start      time.Time
	seed       uint64
	rng        *rand.Rand
	round      []string // mixed: the kinds still to come in this round
	natsNext   int      // the NATS node the next nats-kill kills (mod the nodes)

	mu      sync.Mutex
	dead    map[string]bool // broker ids killed or frozen
	faults  []*faultEvent
	samples []ownSample
	shards  int
	polls   int
	pollErr int

	stopChaos, stopWatch chan struct{}
	chaosDone, watchDone chan struct{}
}

type faultEvent struct {
	kind   string
	broker int // -1: PostgreSQL
	id     string
	at     time.Duration
	pause  time.Duration
	// recovered is when the target was back (-1 until then, or for good
	// with err).
	recovered time.Duration
	err       string
	// A nats-kill's node and what it held; serving is when every broker's
	// NATS connections were back (-1: not measured).
	node                   string
	nodeConns, brokerConns int
	serving                time.Duration
}

type ownSample struct {
	at        time.Duration
	ownerless int
}

// Start starts the watcher (with Config.Cluster) and the fault injection
// (with a chaos mode) of a run whose clients record into stats (whose
// start is the run's). cfg is validated (Config.Validate) with Interval
// filled in. End stops the faults, Finish the watcher.
func Start(ctx context.Context, cfg Config, stats *clientstats.Stats) *Run {
	seed := cfg.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	r := &Run{c: cfg.Cluster, cfg: &cfg, mode: cfg.Mode, reqTimeout: cfg.RequestTimeout, stats: stats,
		start: stats.Start(), seed: seed, rng: rand.New(rand.NewPCG(seed, 7)), dead: map[string]bool{}, restartPG: cfg.RestartPostgres,
		stopChaos: make(chan struct{}), stopWatch: make(chan struct{}), chaosDone: make(chan struct{}), watchDone: make(chan struct{})}
	if r.restartPG == nil && r.c != nil {
		r.restartPG = r.c.restartPostgres
	}
	if r.c != nil {
		go r.watch()
	} else {
		close(r.watchDone)
	}
	if On(r.mode) {
		go r.chaos(ctx)
	} else {
		close(r.chaosDone)
	}
	return r
}

// status writes one line to the cluster's status writer, else the
// progress writer.
func (r *Run) status(format string, args ...any) {
	if r.c != nil {
		r.c.status(format, args...)
	} else if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, format+"\n", args...)
	}
}

// watch polls the cluster view of a live broker about every 200 ms.
func (r *Run) watch() {
	defer close(r.watchDone)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	next := 0
	for {
		select {
		case <-r.stopWatch:
			return
		case <-t.C:
		}
		// A live broker, round robin.
		var url string
		for i := range r.c.brokers {
			b := r.c.brokers[(next+i)%len(r.c.brokers)]
			b.mu.Lock()
			up := b.up
			b.mu.Unlock()
			if up {
				url, next = b.url, (next+i+1)%len(r.c.brokers)
				break
			}
		}
		if url == "" {
			continue
		}
		v, err := r.c.view(url)
		r.mu.Lock()
		r.polls++
		if err != nil {
			r.pollErr++
		} else {
			r.shards = len(v.Shards)
			r.samples = append(r.samples, ownSample{at: time.Since(r.start), ownerless: ownerless(&v, r.dead)})
		}
		r.mu.Unlock()
	}
}

// chaos injects a fault half an interval into the load and then every
// interval (at least half an interval after the last recovery), until
// stopped or the load's Duration is over.
func (r *Run) chaos(ctx context.Context) {
	defer close(r.chaosDone)
	interval := r.cfg.Interval
	next := interval / 2
	for {
		if next >= r.cfg.Duration {
			return
		}
		t := time.NewTimer(time.Until(r.start.Add(next)))
		select {
		case <-r.stopChaos:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if kind := r.nextKind(); kind != "" {
			r.inject(ctx, kind)
		}
		// At least half an interval between a recovery and the next fault.
		next = max(next+interval, time.Since(r.start)+interval/2)
	}
}

// nextKind is the kind of the next fault: the mode's, or (mixed) the next
// of a round of one of each in a seeded random order.
func (r *Run) nextKind() string {
	kinds := faultKinds(r.mode)
	if r.mode == Mixed && r.c != nil && len(r.c.nodes) > 1 {
		kinds = append(kinds, report.FaultNATSKill)
	}
	failover := r.c != nil && r.c.canFailover()
	if r.mode == Mixed && failover {
		kinds = append(kinds, report.FaultPGFailover)
	}
	if !failover { // once per run: after it, one server is left
		kinds = slices.DeleteFunc(kinds, func(k string) bool { return k == report.FaultPGFailover })
		r.round = slices.DeleteFunc(r.round, func(k string) bool { return k == report.FaultPGFailover })
	}
	if len(kinds) == 0 {
		return ""
	}
	if len(kinds) == 1 {
		return kinds[0]
	}
	if len(r.round) == 0 {
		for _, i := range r.rng.Perm(len(kinds)) {
			r.round = append(r.round, kinds[i])
		}
	}
	k := r.round[0]
	r.round = r.round[1:]
	return k
}

// inject runs one fault of kind to its end: the target is back (or failed
// to come back). The recovery happens even when the run is being stopped:
// the drain and the audits want every broker and the database back.
func (r *Run) inject(ctx context.Context, kind string) {
	bg := context.WithoutCancel(ctx)
	ev := &faultEvent{kind: kind, broker: -1, recovered: -1, pause: r.cfg.pauseFor(kind), serving: -1}
	var b *brokerProc
	if kind == report.FaultKill || kind == report.FaultStop {
		var live []*brokerProc
		for _, p := range r.c.brokers {
			p.mu.Lock()
			if p.up {
				live = append(live, p)
			}
			p.mu.Unlock()
		}
		if len(live) == 0 {
			return
		}
		b = live[r.rng.IntN(len(live))]
		b.mu.Lock()
		ev.broker, ev.id = b.idx, b.id
		b.mu.Unlock()
	}
	r.mu.Lock()
	if ev.id != "" {
		r.dead[ev.id] = true
	}
	ev.at = time.Since(r.start)
	r.faults = append(r.faults, ev)
	r.mu.Unlock()

	var err error
	switch kind {
	case report.FaultKill:
		r.c.kill(b)
		r.status("loadtest: chaos: killed broker %d (%s) at %.1fs", b.idx, ev.id, ev.at.Seconds())
		sleep(bg, ev.pause)
		if err = r.c.spawn(b); err == nil {
			rctx, cancel := context.WithTimeout(bg, 2*time.Minute)
			err = r.c.waitReady(rctx, b)
			cancel()
		}
	case report.FaultStop:
		r.c.freeze(b)
		r.status("loadtest: chaos: stopped broker %d (%s) with SIGSTOP at %.1fs for %s", b.idx, ev.id, ev.at.Seconds(), ev.pause)
		sleep(bg, ev.pause)
		r.c.thaw(b)
		rctx, cancel := context.WithTimeout(bg, 2*time.Minute)
		err = r.c.waitReady(rctx, b)
		cancel()
	case report.FaultPGRestart:
		r.status("loadtest: chaos: restarting PostgreSQL (fast) at %.1fs", ev.at.Seconds())
		rctx, cancel := context.WithTimeout(bg, 3*time.Minute)
		err = r.restartPG(rctx)
		cancel()
	case report.FaultPGFailover:
		r.status("loadtest: chaos: killing the PostgreSQL primary (SIGKILL) and promoting its standby at %.1fs", ev.at.Seconds())
		rctx, cancel := context.WithTimeout(bg, 3*time.Minute)
		if _, err = r.c.failover(rctx); err == nil {
			r.status("loadtest: chaos: standby promoted at %.1fs", time.Since(r.start).Seconds())
			// Recovered once every broker answers healthy again: its pool
			// reaches the new primary.
			for _, b := range r.c.brokers {
				if err = r.c.waitReady(rctx, b); err != nil {
					break
				}
			}
		}
		cancel()
	case report.FaultNATSKill:
		err = r.natsKill(bg, ev)
	}
	r.mu.Lock()
	if err != nil {
		ev.err = err.Error()
	} else {
		ev.recovered = time.Since(r.start)
	}
	if kind == report.FaultStop {
		// The same broker (same id) serves again.
		delete(r.dead, ev.id)
	}
	r.mu.Unlock()
	switch {
	case err != nil:
		r.status("loadtest: chaos: %s FAILED to recover: %v", r.what(ev), err)
	default:
		r.status("loadtest: chaos: %s recovered at %.1fs (after %.1fs)", r.what(ev), ev.recovered.Seconds(), (ev.recovered - ev.at).Seconds())
	}
}

func (r *Run) what(ev *faultEvent) string {
	switch ev.kind {
	case report.FaultPGRestart:
		return "PostgreSQL restart"
	case report.FaultPGFailover:
		return "PostgreSQL failover"
	case report.FaultNATSKill:
		return "kill of NATS node " + ev.node
	}
	return fmt.Sprintf("%s of broker %d", ev.kind, ev.broker)
}

// End stops injecting faults (one under way recovers first).
func (r *Run) End() {
	select {
	case <-r.stopChaos:
	default:
		close(r.stopChaos)
	}
	<-r.chaosDone
}

// Finish stops the watcher and builds the reports: the cluster's (nil
// without Config.Cluster) and the chaos's (nil without a chaos mode).
func (r *Run) Finish() (*report.ClusterReport, *report.ChaosReport) {
	r.End()
	select {
	case <-r.stopWatch:
	default:
		close(r.stopWatch)
	}
	<-r.watchDone
	end := time.Since(r.start)
	r.mu.Lock()
	defer r.mu.Unlock()
	var cl *report.ClusterReport
	if r.c != nil {
		cl = &report.ClusterReport{Brokers: len(r.c.brokers), BrokerURLs: r.c.HTTPURLs(), Shards: r.shards,
			ShardLeaseSeconds: r.c.cfg.Lease.Seconds(), ClusterPolls: r.polls, ClusterPollErrors: r.pollErr,
			Client: r.stats.Window(0, end+time.Second), NATSNodes: len(r.c.nodes)}
		if cl.NATSNodes > 0 {
			cl.NATSURL = r.c.NATSURL()
		}
		total, most := shardSeconds(r.samples, 0, end)
		cl.OwnerlessShardSeconds, cl.MaxOwnerlessShards = round3(total), most
	}
	if !On(r.mode) {
		return cl, nil
	}
	ch := &report.ChaosReport{Mode: r.mode, IntervalSeconds: r.cfg.Interval.Seconds(), Seed: r.seed,
		During: report.ClientErrors{ByKind: map[string]int64{}}, After: report.ClientErrors{ByKind: map[string]int64{}}}
	for _, k := range faultKinds(r.mode) {
		switch k {
		case report.FaultKill:
			ch.KillPauseSeconds = r.cfg.pauseFor(k).Seconds()
		case report.FaultStop:
			ch.StopPauseSeconds = r.cfg.pauseFor(k).Seconds()
		}
	}
	if r.mode == NATSKill || (r.mode == Mixed && r.c != nil && len(r.c.nodes) > 1) {
		ch.NATSKillPauseSeconds = r.cfg.pauseFor(report.FaultNATSKill).Seconds()
	}
	for k, ev := range r.faults {
		next := end + time.Second
		if k+1 < len(r.faults) {
			next = r.faults[k+1].at
		}
		fr := r.faultReport(ev, next, cl, ch)
		addErrors(&ch.During, fr.During)
		addErrors(&ch.After, fr.After)
		ch.Events = append(ch.Events, fr)
	}
	all := r.stats.Window(0, end+time.Second)
	ch.Steady = report.ClientErrors{Seconds: round3(all.Seconds - ch.During.Seconds - ch.After.Seconds),
		Requests: all.Requests - ch.During.Requests - ch.After.Requests, Errors: all.Errors - ch.During.Errors - ch.After.Errors,
		FailedItems: all.FailedItems - ch.During.FailedItems - ch.After.FailedItems, ByKind: map[string]int64{}}
	for k, n := range all.ByKind {
		if d := n - ch.During.ByKind[k] - ch.After.ByKind[k]; d > 0 {
			ch.Steady.ByKind[k] = d
		}
	}
	ch.During.ErrorRate, ch.After.ErrorRate, ch.Steady.ErrorRate = clientstats.ErrorRate(ch.During), clientstats.ErrorRate(ch.After), clientstats.ErrorRate(ch.Steady)
	sort.Slice(ch.Events, func(i, j int) bool { return ch.Events[i].AtSeconds < ch.Events[j].AtSeconds })
	return cl, ch
}

// faultReport is fault ev's part of the reports, up to next (the next
// fault, or past the run's end): its counts go to ch, its ownerless
// maxima to cl (nil without a cluster). r.mu held.
func (r *Run) faultReport(ev *faultEvent, next time.Duration, cl *report.ClusterReport, ch *report.ChaosReport) report.FaultReport {
	s := r.samples
	fr := report.FaultReport{Kind: ev.kind, Broker: ev.broker, BrokerID: ev.id, AtSeconds: round3(ev.at.Seconds()),
		PauseSeconds: round3(ev.pause.Seconds()), Error: ev.err}
	ch.Faults++
	switch ev.kind {
	case report.FaultKill:
		ch.Kills++
	case report.FaultStop:
		ch.Stops++
	case report.FaultPGRestart:
		ch.PGRestarts++
	case report.FaultPGFailover:
		ch.PGFailovers++
	case report.FaultNATSKill:
		ch.NATSKills++
		fr.NATSNode, fr.NodeConnections, fr.BrokerConnections = ev.node, ev.nodeConns, ev.brokerConns
		if ev.serving >= 0 {
			fr.ServingAfterSeconds = round3((ev.serving - ev.at).Seconds())
		}
	}
	recovered := next
	if ev.recovered >= 0 {
		ch.Recovered++
		fr.RecoveredAfterSeconds = round3((ev.recovered - ev.at).Seconds())
		if ev.kind == report.FaultNATSKill {
			fr.RejoinedAfterSeconds = fr.RecoveredAfterSeconds
		}
		recovered = min(ev.recovered, next)
	}
	// The last poll in [at, next) that found an ownerless shard: the
	// shards are owned again at the poll after it.
	owned := ev.at
	if r.c != nil {
		for i := range s {
			if s[i].at >= ev.at && s[i].at < next && s[i].ownerless > 0 {
				owned = next
				if i+1 < len(s) && s[i+1].at < next {
					owned = s[i+1].at
				}
			}
		}
		fr.OwnerlessSeconds = round3((owned - ev.at).Seconds())
		ss, m := shardSeconds(s, ev.at, next)
		fr.OwnerlessShardSeconds, fr.MaxOwnerlessShards = round3(ss), m
		cl.MaxOwnerlessShardSeconds = max(cl.MaxOwnerlessShardSeconds, fr.OwnerlessShardSeconds)
		cl.MaxOwnerlessSeconds = max(cl.MaxOwnerlessSeconds, fr.OwnerlessSeconds)
	}
	settled := min(max(recovered, owned, ev.at+r.reqTimeout)+time.Second, next)
	fr.During = r.stats.Window(ev.at, recovered)
	fr.After = r.stats.Window(recovered, settled)
	if last := r.stats.LastError(ev.at, next); last >= 0 {
		fr.ErrorsUntilSeconds = round3(max(0, last-ev.at).Seconds())
	}
	return fr
}

// shardSeconds integrates the ownerless shard count of samples s over
// [from, to) (shard-seconds) and returns it with the largest count seen.
func shardSeconds(s []ownSample, from, to time.Duration) (float64, int) {
	var sum float64
	most := 0
	for i := range s {
		if s[i].at < from || s[i].at >= to {
			continue
		}
		next := to
		if i+1 < len(s) && s[i+1].at < to {
			next = s[i+1].at
		}
		sum += float64(s[i].ownerless) * (next - s[i].at).Seconds()
		most = max(most, s[i].ownerless)
	}
	return sum, most
}

func addErrors(into *report.ClientErrors, w report.ClientErrors) {
	into.Seconds = round3(into.Seconds + w.Seconds)
	into.Requests += w.Requests
	into.Errors += w.Errors
	into.FailedItems += w.FailedItems
	for k, n := range w.ByKind {
		into.ByKind[k] += n
	}
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

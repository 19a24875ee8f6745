package loadtest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Chaos modes (Config.Chaos). A fault is injected half an interval into the
// load and then every ChaosInterval, never after the load's Duration; a
// fault runs to its end (the broker back, the database accepting
// connections) before the next one can start, at least half an interval
// after that.
const (
	ChaosNone = "none"
	// ChaosKill kills a random live broker with SIGKILL and restarts it
	// (same port) after ChaosPause (default 1s). Needs Cluster.
	ChaosKill = "kill"
	// ChaosStop freezes a random live broker with SIGSTOP for ChaosPause
	// (default 5s), then resumes it with SIGCONT: its requests in flight and
	// its shard leases hang meanwhile. Needs Cluster.
	ChaosStop = "stop"
	// ChaosPGRestart restarts the managed PostgreSQL with a fast shutdown
	// (pg_ctl stop -m fast) and starts it again on the same folder and port
	// (localpg.Cluster.Restart): every session ends, the transactions in
	// flight roll back and their items are answered failed. Needs Cluster or
	// Config.RestartPostgres (--embedded).
	ChaosPGRestart = "pg-restart"
	// ChaosPGFailover kills the managed PostgreSQL primary with SIGKILL and
	// promotes its synchronous standby (SPEC.md §9): the brokers find the
	// new primary through their multi-host DATABASE_URL. Once per run (the
	// run goes on with one server). Needs Cluster with PGStandby.
	ChaosPGFailover = "pg-failover"
	// ChaosNATSKill kills a node of the cluster's NATS cluster with SIGKILL
	// (the nodes in turn, 0, 1, 2, ..., skipping those that hold no broker
	// connection) and restarts it on the same ports
	// after ChaosPause (default 5 s), where it rejoins the cluster. The
	// brokers' and clients' connections on it move to the other nodes
	// (SPEC.md §9); its requests in flight are answered or time out and are
	// retried with the same transactionIds. Needs Cluster with NATSNodes at
	// least 2.
	ChaosNATSKill = "nats-kill"
	// ChaosMixed injects kill, stop and pg-restart (and nats-kill with
	// NATSNodes 2 or more, and pg-failover once, with a standby) in rounds
	// of one of each, in an order drawn from ChaosSeed. Needs Cluster.
	ChaosMixed = "mixed"
)

// The kinds of fault (FaultReport.Kind).
const (
	FaultKill       = "kill"
	FaultStop       = "stop"
	FaultPGRestart  = "pg-restart"
	FaultPGFailover = "pg-failover"
	FaultNATSKill   = "nats-kill"
)

// DefaultChaosInterval is the time between faults when Config.ChaosInterval
// is 0: 20 s for kill, 10 s for stop, pg-restart and mixed (at least twice
// the brokers' shard lease with --brokers; 5 s with chaos).
func DefaultChaosInterval(mode string) time.Duration {
	if mode == ChaosKill {
		return 20 * time.Second
	}
	return 10 * time.Second
}

// chaosOn reports whether mode injects faults.
func chaosOn(mode string) bool { return mode != "" && mode != ChaosNone }

// pauseFor is how long a fault of kind lasts before its recovery starts:
// ChaosPause when set, else 1 s for a kill (down before the restart), 5 s
// for a stop (frozen before SIGCONT) and a nats-kill (the node down before
// its restart), 0 for a PostgreSQL restart (the start follows the stop at
// once).
func (c *Config) pauseFor(kind string) time.Duration {
	if kind == FaultPGRestart || kind == FaultPGFailover {
		return 0
	}
	if c.ChaosPause > 0 {
		return c.ChaosPause
	}
	if kind == FaultStop || kind == FaultNATSKill {
		return 5 * time.Second
	}
	return time.Second
}

// chaosKinds are the kinds of fault mode injects.
func chaosKinds(mode string) []string {
	switch mode {
	case ChaosKill:
		return []string{FaultKill}
	case ChaosStop:
		return []string{FaultStop}
	case ChaosPGRestart:
		return []string{FaultPGRestart}
	case ChaosPGFailover:
		return []string{FaultPGFailover}
	case ChaosNATSKill:
		return []string{FaultNATSKill}
	case ChaosMixed:
		return []string{FaultKill, FaultStop, FaultPGRestart}
	}
	return nil
}

// statBucket is the resolution of the client statistics.
const statBucket = 100 * time.Millisecond

// clientStats counts the clients' requests, errors and failed items over
// time, so what the clients saw around each fault can be told from the
// rest. A nil *clientStats records nothing.
type clientStats struct {
	start  time.Time
	mu     sync.Mutex
	reqs   []int64 // requests per bucket
	failed []int64 // items answered failed per bucket
	errs   []errEvent
}

type errEvent struct {
	bucket int
	kind   string
}

func newClientStats(start time.Time) *clientStats { return &clientStats{start: start} }

// record books one request of op ("push", "pop", "ack") ending now; kind
// is "" when it got its answers, else what went wrong ("push:timeout",
// "push:failed:unavailable", ...).
func (s *clientStats) record(kind string) { s.recordFailed(kind, 0) }

// recordFailed is record for a push whose reply answered items failed.
func (s *clientStats) recordFailed(kind string, items int64) {
	if s == nil {
		return
	}
	s.add(max(0, int(time.Since(s.start)/statBucket)), kind, items)
}

// add books one request in bucket b.
func (s *clientStats) add(b int, kind string, items int64) {
	s.mu.Lock()
	for len(s.reqs) <= b {
		s.reqs = append(s.reqs, 0)
		s.failed = append(s.failed, 0)
	}
	s.reqs[b]++
	s.failed[b] += items
	if kind != "" {
		s.errs = append(s.errs, errEvent{b, kind})
	}
	s.mu.Unlock()
}

// window sums the requests, errors (by kind) and failed items of [from, to)
// since start (to <= from: an empty window).
func (s *clientStats) window(from, to time.Duration) ClientErrors {
	s.mu.Lock()
	defer s.mu.Unlock()
	ce := ClientErrors{ByKind: map[string]int64{}}
	if to <= from {
		return ce
	}
	ce.Seconds = round3((to - from).Seconds())
	lo, hi := bucketSpan(from, to)
	for b := lo; b < hi && b < len(s.reqs); b++ {
		ce.Requests += s.reqs[b]
		ce.FailedItems += s.failed[b]
	}
	for _, e := range s.errs {
		if e.bucket >= lo && e.bucket < hi {
			ce.Errors++
			ce.ByKind[e.kind]++
		}
	}
	ce.ErrorRate = rate(ce)
	return ce
}

// bucketSpan is the buckets [lo, hi) of the stretch [from, to): each end
// rounded to the nearest bucket boundary, so that stretches which meet
// share no bucket and a bucket is counted once.
func bucketSpan(from, to time.Duration) (lo, hi int) {
	return max(0, int((from+statBucket/2)/statBucket)), int((to + statBucket/2) / statBucket)
}

// lastError is the end of the last bucket of [from, to) with a client
// error, as time since start (-1: none).
func (s *clientStats) lastError(from, to time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	lo, hi := bucketSpan(from, to)
	last := -1
	for _, e := range s.errs {
		if e.bucket >= lo && e.bucket < hi {
			last = max(last, e.bucket)
		}
	}
	if last < 0 {
		return -1
	}
	return time.Duration(last+1) * statBucket
}

// ClientErrors is what the clients (producers and consumers) saw in a
// stretch of the run: requests, those that failed (a transport error, a
// timeout, an error reply, or a push with any item answered failed), the
// failures by kind, and the pushed items answered failed (each retried with
// its transactionId).
type ClientErrors struct {
	Seconds     float64          `json:"seconds"`
	Requests    int64            `json:"requests"`
	Errors      int64            `json:"errors"`
	ErrorRate   float64          `json:"error_rate"`
	FailedItems int64            `json:"failed_items"`
	ByKind      map[string]int64 `json:"by_kind"`
}

// ClusterReport is the cluster part of a `--brokers N` run: the brokers,
// how long shards had no live owner, and the errors clients saw (the
// faults themselves are in Report.Chaos).
type ClusterReport struct {
	Brokers    int      `json:"brokers"`
	BrokerURLs []string `json:"broker_urls"`
	// NATSNodes is the node processes of the NATS cluster (--nats-nodes;
	// 0: one NATS server in the load-test process), NATSURL their list.
	NATSNodes         int     `json:"nats_nodes,omitempty"`
	NATSURL           string  `json:"nats_url,omitempty"`
	ShardLeaseSeconds float64 `json:"shard_lease_seconds"`
	Shards            int     `json:"shards"`
	// Ownership, from GET /api/v1/cluster polled about every 200 ms: a
	// shard is ownerless while it has no live lease or its lease is held
	// by a killed or stopped broker. OwnerlessShardSeconds is the integral
	// over the run; the Max* figures are the worst fault's.
	OwnerlessShardSeconds    float64 `json:"ownerless_shard_seconds"`
	MaxOwnerlessShardSeconds float64 `json:"max_ownerless_shard_seconds_per_fault"`
	MaxOwnerlessSeconds      float64 `json:"max_ownerless_seconds_per_fault"`
	MaxOwnerlessShards       int     `json:"max_ownerless_shards"`
	ClusterPolls             int     `json:"cluster_polls"`
	ClusterPollErrors        int     `json:"cluster_poll_errors"`
	// Client is the whole run.
	Client ClientErrors `json:"client"`
}

// ChaosReport is the chaos of a run (--chaos): the faults injected, by
// kind, and what the clients saw during each, after it and outside them.
type ChaosReport struct {
	Mode            string  `json:"mode"`
	IntervalSeconds float64 `json:"interval_seconds"`
	// KillPauseSeconds is how long a killed broker stays down before its
	// restart; StopPauseSeconds how long a stopped one stays frozen (for
	// the modes that inject them).
	KillPauseSeconds float64 `json:"kill_pause_seconds,omitempty"`
	StopPauseSeconds float64 `json:"stop_pause_seconds,omitempty"`
	// NATSKillPauseSeconds is how long a killed NATS node stays down
	// before its restart (nats-kill, or mixed with NATS nodes).
	NATSKillPauseSeconds float64 `json:"nats_kill_pause_seconds,omitempty"`
	// Seed drew the brokers and (mixed) the order of the faults: pass it
	// as --chaos-seed to draw the same again.
	Seed uint64 `json:"seed"`
	// Faults counts every fault; Kills, Stops, PGRestarts, PGFailovers and
	// NATSKills by kind (a failover recovers once every broker answers
	// healthy on the promoted standby; a NATS node kill once every broker's
	// NATS connections are back and the node is restarted and routed to
	// every other node again);
	// Recovered those whose target came back (a killed broker restarted
	// and healthy, a stopped one resumed and healthy, PostgreSQL accepting
	// connections again).
	Faults      int `json:"faults"`
	Kills       int `json:"kills"`
	Stops       int `json:"stops"`
	PGRestarts  int `json:"pg_restarts"`
	PGFailovers int `json:"pg_failovers"`
	NATSKills   int `json:"nats_kills"`
	Recovered   int `json:"recovered"`
	// During is the faults' [start, recovery) stretches together; After the
	// stretches after each recovery until things settled (the latest of
	// the recovery, every shard owned again and the clients' request
	// timeout after the fault, plus a second, so the requests the fault left
	// unanswered count); Steady the rest of the run.
	During ClientErrors  `json:"during"`
	After  ClientErrors  `json:"after"`
	Steady ClientErrors  `json:"steady"`
	Events []FaultReport `json:"events"`
}

// FaultReport is one fault: its kind, its target, when (seconds since the
// load started), how long until its target recovered, and what it cost.
type FaultReport struct {
	Kind string `json:"kind"`
	// Broker is the broker index (kill, stop; -1 for pg-restart,
	// pg-failover and nats-kill), BrokerID
	// the id it had.
	Broker   int    `json:"broker"`
	BrokerID string `json:"broker_id,omitempty"`
	// A nats-kill: NATSNode is the node killed (queen-nats-<i>);
	// NodeConnections the client connections it held when killed, of them
	// BrokerConnections the brokers' (each broker has two). ServingAfterSeconds
	// is this fault's recovery time: from the SIGKILL until the nodes up
	// hold every broker's NATS connections again with at least the
	// subscriptions they had before (every broker serving its NATS API and
	// shard subjects; polled every 50 ms on the nodes' /connz, and bounded
	// by the 15 s ping budget: later is a recovery error). RejoinedAfterSeconds
	// is when the restarted node had its routes to every other node back
	// (= RecoveredAfterSeconds).
	NATSNode             string  `json:"nats_node,omitempty"`
	NodeConnections      int     `json:"node_connections,omitempty"`
	BrokerConnections    int     `json:"broker_connections,omitempty"`
	ServingAfterSeconds  float64 `json:"serving_after_seconds,omitempty"`
	RejoinedAfterSeconds float64 `json:"rejoined_after_seconds,omitempty"`
	// AtSeconds is when the fault started; PauseSeconds how long the broker
	// stayed down or frozen on purpose; RecoveredAfterSeconds the time from
	// the fault to its target's recovery (0 with Error).
	AtSeconds             float64 `json:"at_seconds"`
	PauseSeconds          float64 `json:"pause_seconds"`
	RecoveredAfterSeconds float64 `json:"recovered_after_seconds"`
	Error                 string  `json:"error,omitempty"`
	// ErrorsUntilSeconds is when, after the fault's start, the clients saw
	// their last error before the next fault (0: none at all).
	ErrorsUntilSeconds float64 `json:"errors_until_seconds"`
	// Ownership around the fault (--brokers N): OwnerlessSeconds runs from
	// the fault to the first poll at which every shard had a live owner
	// again (after the last poll that found one without).
	OwnerlessSeconds      float64 `json:"ownerless_seconds,omitempty"`
	MaxOwnerlessShards    int     `json:"max_ownerless_shards,omitempty"`
	OwnerlessShardSeconds float64 `json:"ownerless_shard_seconds,omitempty"`
	// During is [start, recovery); After is from the recovery until things
	// settled (see ChaosReport.After).
	During ClientErrors `json:"during"`
	After  ClientErrors `json:"after"`
}

// chaosRun watches the cluster during a run (with Cluster) and injects the
// faults of Config.Chaos.
type chaosRun struct {
	c    *Cluster // nil: a broker of the caller's (--embedded)
	cfg  *Config
	mode string
	// restartPG restarts the database (Cluster's, or RestartPostgres).
	restartPG func(context.Context) error
	// reqTimeout is the clients' request timeout: a request the fault left
	// unanswered fails that long after it.
	reqTimeout time.Duration
	stats      *clientStats
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

// startChaos starts the watcher (with Cluster) and the fault injection
// (with a chaos mode).
func startChaos(ctx context.Context, cfg *Config, stats *clientStats) *chaosRun {
	seed := cfg.ChaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	r := &chaosRun{c: cfg.Cluster, cfg: cfg, mode: cfg.Chaos, reqTimeout: cfg.RequestTimeout, stats: stats,
		start: stats.start, seed: seed, rng: rand.New(rand.NewPCG(seed, 7)), dead: map[string]bool{}, restartPG: cfg.RestartPostgres,
		stopChaos: make(chan struct{}), stopWatch: make(chan struct{}), chaosDone: make(chan struct{}), watchDone: make(chan struct{})}
	if r.restartPG == nil && r.c != nil {
		r.restartPG = r.c.restartPostgres
	}
	if r.c != nil {
		go r.watch()
	} else {
		close(r.watchDone)
	}
	if chaosOn(r.mode) {
		go r.chaos(ctx)
	} else {
		close(r.chaosDone)
	}
	return r
}

// status writes one line to the cluster's status writer, else the
// progress writer.
func (r *chaosRun) status(format string, args ...any) {
	if r.c != nil {
		r.c.status(format, args...)
	} else if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, format+"\n", args...)
	}
}

// watch polls the cluster view of a live broker about every 200 ms.
func (r *chaosRun) watch() {
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
func (r *chaosRun) chaos(ctx context.Context) {
	defer close(r.chaosDone)
	interval := r.cfg.ChaosInterval
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
func (r *chaosRun) nextKind() string {
	kinds := chaosKinds(r.mode)
	if r.mode == ChaosMixed && r.c != nil && len(r.c.nodes) > 1 {
		kinds = append(kinds, FaultNATSKill)
	}
	failover := r.c != nil && r.c.canFailover()
	if r.mode == ChaosMixed && failover {
		kinds = append(kinds, FaultPGFailover)
	}
	if !failover { // once per run: after it, one server is left
		kinds = slices.DeleteFunc(kinds, func(k string) bool { return k == FaultPGFailover })
		r.round = slices.DeleteFunc(r.round, func(k string) bool { return k == FaultPGFailover })
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
func (r *chaosRun) inject(ctx context.Context, kind string) {
	bg := context.WithoutCancel(ctx)
	ev := &faultEvent{kind: kind, broker: -1, recovered: -1, pause: r.cfg.pauseFor(kind), serving: -1}
	var b *brokerProc
	if kind == FaultKill || kind == FaultStop {
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
	case FaultKill:
		r.c.kill(b)
		r.status("loadtest: chaos: killed broker %d (%s) at %.1fs", b.idx, ev.id, ev.at.Seconds())
		sleep(bg, ev.pause)
		if err = r.c.spawn(b); err == nil {
			rctx, cancel := context.WithTimeout(bg, 2*time.Minute)
			err = r.c.waitReady(rctx, b)
			cancel()
		}
	case FaultStop:
		r.c.freeze(b)
		r.status("loadtest: chaos: stopped broker %d (%s) with SIGSTOP at %.1fs for %s", b.idx, ev.id, ev.at.Seconds(), ev.pause)
		sleep(bg, ev.pause)
		r.c.thaw(b)
		rctx, cancel := context.WithTimeout(bg, 2*time.Minute)
		err = r.c.waitReady(rctx, b)
		cancel()
	case FaultPGRestart:
		r.status("loadtest: chaos: restarting PostgreSQL (fast) at %.1fs", ev.at.Seconds())
		rctx, cancel := context.WithTimeout(bg, 3*time.Minute)
		err = r.restartPG(rctx)
		cancel()
	case FaultPGFailover:
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
	case FaultNATSKill:
		err = r.natsKill(bg, ev)
	}
	r.mu.Lock()
	if err != nil {
		ev.err = err.Error()
	} else {
		ev.recovered = time.Since(r.start)
	}
	if kind == FaultStop {
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

func (r *chaosRun) what(ev *faultEvent) string {
	switch ev.kind {
	case FaultPGRestart:
		return "PostgreSQL restart"
	case FaultPGFailover:
		return "PostgreSQL failover"
	case FaultNATSKill:
		return "kill of NATS node " + ev.node
	}
	return fmt.Sprintf("%s of broker %d", ev.kind, ev.broker)
}

// endChaos stops injecting faults (one under way recovers first).
func (r *chaosRun) endChaos() {
	select {
	case <-r.stopChaos:
	default:
		close(r.stopChaos)
	}
	<-r.chaosDone
}

// finish stops the watcher and builds the reports: the cluster's (nil
// without Cluster) and the chaos's (nil without a chaos mode).
func (r *chaosRun) finish() (*ClusterReport, *ChaosReport) {
	r.endChaos()
	select {
	case <-r.stopWatch:
	default:
		close(r.stopWatch)
	}
	<-r.watchDone
	end := time.Since(r.start)
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.samples
	// shardSeconds integrates the ownerless count over [from, to).
	shardSeconds := func(from, to time.Duration) (float64, int) {
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
	var cl *ClusterReport
	if r.c != nil {
		cl = &ClusterReport{Brokers: len(r.c.brokers), BrokerURLs: r.c.HTTPURLs(), Shards: r.shards,
			ShardLeaseSeconds: r.c.cfg.Lease.Seconds(), ClusterPolls: r.polls, ClusterPollErrors: r.pollErr,
			Client: r.stats.window(0, end+time.Second), NATSNodes: len(r.c.nodes)}
		if cl.NATSNodes > 0 {
			cl.NATSURL = r.c.NATSURL()
		}
		total, most := shardSeconds(0, end)
		cl.OwnerlessShardSeconds, cl.MaxOwnerlessShards = round3(total), most
	}
	if !chaosOn(r.mode) {
		return cl, nil
	}
	ch := &ChaosReport{Mode: r.mode, IntervalSeconds: r.cfg.ChaosInterval.Seconds(), Seed: r.seed,
		During: ClientErrors{ByKind: map[string]int64{}}, After: ClientErrors{ByKind: map[string]int64{}}}
	for _, k := range chaosKinds(r.mode) {
		switch k {
		case FaultKill:
			ch.KillPauseSeconds = r.cfg.pauseFor(k).Seconds()
		case FaultStop:
			ch.StopPauseSeconds = r.cfg.pauseFor(k).Seconds()
		}
	}
	if r.mode == ChaosNATSKill || (r.mode == ChaosMixed && r.c != nil && len(r.c.nodes) > 1) {
		ch.NATSKillPauseSeconds = r.cfg.pauseFor(FaultNATSKill).Seconds()
	}
	for k, ev := range r.faults {
		next := end + time.Second
		if k+1 < len(r.faults) {
			next = r.faults[k+1].at
		}
		fr := FaultReport{Kind: ev.kind, Broker: ev.broker, BrokerID: ev.id, AtSeconds: round3(ev.at.Seconds()),
			PauseSeconds: round3(ev.pause.Seconds()), Error: ev.err}
		ch.Faults++
		switch ev.kind {
		case FaultKill:
			ch.Kills++
		case FaultStop:
			ch.Stops++
		case FaultPGRestart:
			ch.PGRestarts++
		case FaultPGFailover:
			ch.PGFailovers++
		case FaultNATSKill:
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
			if ev.kind == FaultNATSKill {
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
			ss, m := shardSeconds(ev.at, next)
			fr.OwnerlessShardSeconds, fr.MaxOwnerlessShards = round3(ss), m
			cl.MaxOwnerlessShardSeconds = max(cl.MaxOwnerlessShardSeconds, fr.OwnerlessShardSeconds)
			cl.MaxOwnerlessSeconds = max(cl.MaxOwnerlessSeconds, fr.OwnerlessSeconds)
		}
		settled := min(max(recovered, owned, ev.at+r.reqTimeout)+time.Second, next)
		fr.During = r.stats.window(ev.at, recovered)
		fr.After = r.stats.window(recovered, settled)
		if last := r.stats.lastError(ev.at, next); last >= 0 {
			fr.ErrorsUntilSeconds = round3(max(0, last-ev.at).Seconds())
		}
		addErrors(&ch.During, fr.During)
		addErrors(&ch.After, fr.After)
		ch.Events = append(ch.Events, fr)
	}
	all := r.stats.window(0, end+time.Second)
	ch.Steady = ClientErrors{Seconds: round3(all.Seconds - ch.During.Seconds - ch.After.Seconds),
		Requests: all.Requests - ch.During.Requests - ch.After.Requests, Errors: all.Errors - ch.During.Errors - ch.After.Errors,
		FailedItems: all.FailedItems - ch.During.FailedItems - ch.After.FailedItems, ByKind: map[string]int64{}}
	for k, n := range all.ByKind {
		if d := n - ch.During.ByKind[k] - ch.After.ByKind[k]; d > 0 {
			ch.Steady.ByKind[k] = d
		}
	}
	ch.During.ErrorRate, ch.After.ErrorRate, ch.Steady.ErrorRate = rate(ch.During), rate(ch.After), rate(ch.Steady)
	sort.Slice(ch.Events, func(i, j int) bool { return ch.Events[i].AtSeconds < ch.Events[j].AtSeconds })
	return cl, ch
}

func addErrors(into *ClientErrors, w ClientErrors) {
	into.Seconds = round3(into.Seconds + w.Seconds)
	into.Requests += w.Requests
	into.Errors += w.Errors
	into.FailedItems += w.FailedItems
	for k, n := range w.ByKind {
		into.ByKind[k] += n
	}
}

func rate(c ClientErrors) float64 {
	if c.Requests == 0 {
		return 0
	}
	return math.Round(float64(c.Errors)/float64(c.Requests)*1e5) / 1e5
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func (c *ClusterReport) writeText(b *strings.Builder) {
	fmt.Fprintf(b, "  cluster   %d brokers · shard lease %.1f s · %d shards · clients %d errors of %d requests (%.2f%%)\n",
		c.Brokers, c.ShardLeaseSeconds, c.Shards, c.Client.Errors, c.Client.Requests, 100*c.Client.ErrorRate)
	if c.NATSNodes > 0 {
		fmt.Fprintf(b, "  nats      a cluster of %d node processes: %s\n", c.NATSNodes, c.NATSURL)
	}
	fmt.Fprintf(b, "  ownership %.1f ownerless shard-seconds in all · worst fault: %.1f shard-seconds, %.1f s until every shard was owned, %d shards at once (%d polls, %d failed)\n",
		c.OwnerlessShardSeconds, c.MaxOwnerlessShardSeconds, c.MaxOwnerlessSeconds, c.MaxOwnerlessShards, c.ClusterPolls, c.ClusterPollErrors)
}

func (c *ChaosReport) writeText(b *strings.Builder) {
	fmt.Fprintf(b, "  chaos     %s every %.0f s (seed %d): %s — %s, %s, %s, %s, %s; %d recovered\n",
		c.Mode, c.IntervalSeconds, c.Seed, plural(c.Faults, "fault"), plural(c.Kills, "kill"), plural(c.Stops, "stop"), plural(c.PGRestarts, "pg restart"),
		plural(c.PGFailovers, "pg failover"), plural(c.NATSKills, "nats kill"), c.Recovered)
	for _, e := range c.Events {
		var what string
		switch e.Kind {
		case FaultKill:
			what = fmt.Sprintf("kill broker %d, down %.1f s", e.Broker, e.PauseSeconds)
		case FaultStop:
			what = fmt.Sprintf("stop broker %d, frozen %.1f s", e.Broker, e.PauseSeconds)
		case FaultPGFailover:
			what = "pg-failover (primary SIGKILLed, standby promoted)"
		case FaultNATSKill:
			what = fmt.Sprintf("nats-kill %s (%d connections, %d of the brokers'), down %.1f s; brokers serving again after %.1f s",
				e.NATSNode, e.NodeConnections, e.BrokerConnections, e.PauseSeconds, e.ServingAfterSeconds)
		default:
			what = "pg-restart"
		}
		rec := fmt.Sprintf("recovered after %.1f s", e.RecoveredAfterSeconds)
		if e.Error != "" {
			rec = "recovery FAILED: " + e.Error
		}
		fmt.Fprintf(b, "            %s at %.1f s: %s", what, e.AtSeconds, rec)
		if e.MaxOwnerlessShards > 0 || e.OwnerlessSeconds > 0 {
			fmt.Fprintf(b, " · ownerless %.1f s, %d shards max, %.1f shard-seconds", e.OwnerlessSeconds, e.MaxOwnerlessShards, e.OwnerlessShardSeconds)
		}
		fmt.Fprintf(b, " · during: %s · after %.1f s: %s", clientLine(e.During), e.After.Seconds, clientLine(e.After))
		if e.ErrorsUntilSeconds > 0 {
			fmt.Fprintf(b, " · last error +%.1f s", e.ErrorsUntilSeconds)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(b, "  clients   during faults %.1f s: %s · after them %.1f s: %s · steady %.1f s: %s\n",
		c.During.Seconds, clientLine(c.During), c.After.Seconds, clientLine(c.After), c.Steady.Seconds, clientLine(c.Steady))
}

// plural is "1 kill", "2 kills".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// clientLine is "E errors of R requests (x%), F failed items [kinds]".
func clientLine(c ClientErrors) string {
	return fmt.Sprintf("%d errors of %d requests (%.2f%%), %d failed items%s", c.Errors, c.Requests, 100*c.ErrorRate, c.FailedItems, kinds(c.ByKind))
}

func kinds(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	out := make([]string, 0, len(m))
	for k, n := range m {
		out = append(out, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(out)
	return " [" + strings.Join(out, ", ") + "]"
}

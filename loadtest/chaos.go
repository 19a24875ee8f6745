package loadtest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"
)

// Chaos modes (Config.Chaos).
const (
	ChaosNone = "none"
	// ChaosKill kills a random broker with SIGKILL every ChaosInterval and
	// restarts it (same port) after ChaosPause.
	ChaosKill = "kill"
)

// statBucket is the resolution of the client statistics.
const statBucket = 100 * time.Millisecond

// clientStats counts the clients' requests and errors over time, so the
// error rate inside failover windows can be told from the rest. A nil
// *clientStats records nothing.
type clientStats struct {
	start time.Time
	mu    sync.Mutex
	reqs  []int64 // requests per bucket
	errs  []errEvent
}

type errEvent struct {
	bucket int
	kind   string
}

func newClientStats(start time.Time) *clientStats { return &clientStats{start: start} }

// record books one request of op ("push", "pop", "ack") ending now; kind
// is "" when it got its answers, else what went wrong ("push:timeout",
// "push:failed:unavailable", ...).
func (s *clientStats) record(kind string) {
	if s == nil {
		return
	}
	b := max(0, int(time.Since(s.start)/statBucket))
	s.mu.Lock()
	for len(s.reqs) <= b {
		s.reqs = append(s.reqs, 0)
	}
	s.reqs[b]++
	if kind != "" {
		s.errs = append(s.errs, errEvent{b, kind})
	}
	s.mu.Unlock()
}

// window sums the requests and errors (by kind) of [from, to) since start.
func (s *clientStats) window(from, to time.Duration) ClientErrors {
	s.mu.Lock()
	defer s.mu.Unlock()
	lo, hi := max(0, int(from/statBucket)), int((to+statBucket-1)/statBucket)
	ce := ClientErrors{Seconds: round3((to - from).Seconds()), ByKind: map[string]int64{}}
	for b := lo; b < hi && b < len(s.reqs); b++ {
		ce.Requests += s.reqs[b]
	}
	for _, e := range s.errs {
		if e.bucket >= lo && e.bucket < hi {
			ce.Errors++
			ce.ByKind[e.kind]++
		}
	}
	if ce.Requests > 0 {
		ce.ErrorRate = math.Round(float64(ce.Errors)/float64(ce.Requests)*1e5) / 1e5
	}
	return ce
}

// ClientErrors is what the clients (producers and consumers) saw in a
// stretch of the run: requests, those that failed (a transport error, a
// timeout, an error reply, or a push with any item answered failed), and
// the failures by kind.
type ClientErrors struct {
	Seconds   float64          `json:"seconds"`
	Requests  int64            `json:"requests"`
	Errors    int64            `json:"errors"`
	ErrorRate float64          `json:"error_rate"`
	ByKind    map[string]int64 `json:"by_kind"`
}

// ClusterReport is the cluster part of a `--brokers N` run: the brokers,
// the kills and restarts of the chaos, how long shards had no live owner,
// and the errors clients saw.
type ClusterReport struct {
	Brokers              int      `json:"brokers"`
	BrokerURLs           []string `json:"broker_urls"`
	Chaos                string   `json:"chaos"`
	ChaosIntervalSeconds float64  `json:"chaos_interval_seconds,omitempty"`
	ShardLeaseSeconds    float64  `json:"shard_lease_seconds"`
	Shards               int      `json:"shards"`
	Kills                int      `json:"kills"`
	Restarts             int      `json:"restarts"`
	// Ownership, from GET /api/v1/cluster polled about every 200 ms: a
	// shard is ownerless while it has no live lease or its lease is held
	// by a killed broker. OwnerlessShardSeconds is the integral over the
	// run; the Max* figures are the worst kill's.
	OwnerlessShardSeconds    float64 `json:"ownerless_shard_seconds"`
	MaxOwnerlessShardSeconds float64 `json:"max_ownerless_shard_seconds_per_kill"`
	MaxOwnerlessSeconds      float64 `json:"max_ownerless_seconds_per_kill"`
	MaxOwnerlessShards       int     `json:"max_ownerless_shards"`
	ClusterPolls             int     `json:"cluster_polls"`
	ClusterPollErrors        int     `json:"cluster_poll_errors"`
	// Client is the whole run; Failover the failover windows together
	// (each from a kill to the latest of the broker's restart, every shard
	// owned again and the clients' request timeout, plus a second, so the
	// requests the killed broker never answered count); Steady the rest.
	Client   ClientErrors `json:"client"`
	Failover ClientErrors `json:"failover"`
	Steady   ClientErrors `json:"steady"`
	Events   []KillReport `json:"kill_events"`
}

// KillReport is one kill: which broker, when (seconds since the load
// started), how long until it answered /health again, and the failover it
// caused.
type KillReport struct {
	Broker       int     `json:"broker"`
	BrokerID     string  `json:"broker_id"`
	AtSeconds    float64 `json:"at_seconds"`
	RestartAfter float64 `json:"restarted_after_seconds"`
	RestartError string  `json:"restart_error,omitempty"`
	// OwnerlessSeconds runs from the kill to the first poll at which every
	// shard had a live owner again (after the last poll that found one
	// without).
	OwnerlessSeconds      float64      `json:"ownerless_seconds"`
	MaxOwnerlessShards    int          `json:"max_ownerless_shards"`
	OwnerlessShardSeconds float64      `json:"ownerless_shard_seconds"`
	Clients               ClientErrors `json:"clients"`
}

// chaosRun watches the cluster during a run and, with ChaosKill, kills
// and restarts brokers.
type chaosRun struct {
	c               *Cluster
	mode            string
	interval, pause time.Duration
	// reqTimeout is the clients' request timeout: a request the killed
	// broker had in flight fails that long after the kill.
	reqTimeout time.Duration
	stats      *clientStats
	start      time.Time
	rng        *rand.Rand

	mu      sync.Mutex
	dead    map[string]bool
	kills   []*killEvent
	samples []ownSample
	shards  int
	polls   int
	pollErr int

	stopChaos, stopWatch chan struct{}
	chaosDone, watchDone chan struct{}
}

type killEvent struct {
	broker      int
	id          string
	at, restart time.Duration // restart: -1 until it is ready again
	restartErr  string
}

type ownSample struct {
	at        time.Duration
	ownerless int
}

// startChaos starts the watcher and (with ChaosKill) the killer.
func startChaos(ctx context.Context, cfg *Config, stats *clientStats) *chaosRun {
	r := &chaosRun{c: cfg.Cluster, mode: cfg.Chaos, interval: cfg.ChaosInterval, pause: cfg.ChaosPause, reqTimeout: cfg.RequestTimeout, stats: stats,
		start: stats.start, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)), dead: map[string]bool{},
		stopChaos: make(chan struct{}), stopWatch: make(chan struct{}), chaosDone: make(chan struct{}), watchDone: make(chan struct{})}
	go r.watch()
	if r.mode == ChaosKill {
		go r.chaos(ctx)
	} else {
		close(r.chaosDone)
	}
	return r
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

// chaos kills a random live broker every interval and restarts it after
// the pause, until stopped.
func (r *chaosRun) chaos(ctx context.Context) {
	defer close(r.chaosDone)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-r.stopChaos:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var live []*brokerProc
		for _, b := range r.c.brokers {
			b.mu.Lock()
			if b.up {
				live = append(live, b)
			}
			b.mu.Unlock()
		}
		if len(live) == 0 {
			continue
		}
		b := live[r.rng.IntN(len(live))]
		b.mu.Lock()
		id := b.id
		b.mu.Unlock()
		ev := &killEvent{broker: b.idx, id: id, restart: -1}
		r.mu.Lock()
		r.dead[id] = true
		ev.at = time.Since(r.start)
		r.kills = append(r.kills, ev)
		r.mu.Unlock()
		r.c.kill(b)
		r.c.status("loadtest: chaos: killed broker %d (%s) at %.1fs", b.idx, id, ev.at.Seconds())
		// The restart happens even when the run is being stopped: the
		// drain and the audit want every broker back.
		sleep(context.WithoutCancel(ctx), r.pause)
		err := r.c.spawn(b)
		if err == nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			err = r.c.waitReady(rctx, b)
			cancel()
		}
		r.mu.Lock()
		if err != nil {
			ev.restartErr = err.Error()
		} else {
			ev.restart = time.Since(r.start)
		}
		r.mu.Unlock()
		if err != nil {
			r.c.status("loadtest: chaos: restarting broker %d failed: %v", b.idx, err)
		} else {
			r.c.status("loadtest: chaos: broker %d back at %.1fs", b.idx, ev.restart.Seconds())
		}
	}
}

// endChaos stops killing (a restart under way finishes first).
func (r *chaosRun) endChaos() {
	select {
	case <-r.stopChaos:
	default:
		close(r.stopChaos)
	}
	<-r.chaosDone
}

// finish stops the watcher and builds the report.
func (r *chaosRun) finish() *ClusterReport {
	r.endChaos()
	close(r.stopWatch)
	<-r.watchDone
	end := time.Since(r.start)
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := &ClusterReport{Brokers: len(r.c.brokers), BrokerURLs: r.c.HTTPURLs(), Chaos: r.mode, Shards: r.shards,
		ShardLeaseSeconds: r.c.cfg.Lease.Seconds(), ClusterPolls: r.polls, ClusterPollErrors: r.pollErr}
	if r.mode == ChaosKill {
		rep.ChaosIntervalSeconds = r.interval.Seconds()
	}
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
	total, most := shardSeconds(0, end)
	rep.OwnerlessShardSeconds, rep.MaxOwnerlessShards = round3(total), most
	type span struct{ from, to time.Duration }
	var windows []span
	for k, ev := range r.kills {
		rep.Kills++
		next := end
		if k+1 < len(r.kills) {
			next = r.kills[k+1].at
		}
		kr := KillReport{Broker: ev.broker, BrokerID: ev.id, AtSeconds: round3(ev.at.Seconds()), RestartError: ev.restartErr}
		settled := ev.at
		if ev.restart >= 0 {
			rep.Restarts++
			kr.RestartAfter = round3((ev.restart - ev.at).Seconds())
			settled = ev.restart
		}
		// The last poll in [at, next) that found an ownerless shard: the
		// failover ends at the poll after it.
		owned := ev.at
		for i := range s {
			if s[i].at >= ev.at && s[i].at < next && s[i].ownerless > 0 {
				owned = next
				if i+1 < len(s) && s[i+1].at < next {
					owned = s[i+1].at
				}
			}
		}
		kr.OwnerlessSeconds = round3((owned - ev.at).Seconds())
		ss, m := shardSeconds(ev.at, next)
		kr.OwnerlessShardSeconds, kr.MaxOwnerlessShards = round3(ss), m
		rep.MaxOwnerlessShardSeconds = max(rep.MaxOwnerlessShardSeconds, kr.OwnerlessShardSeconds)
		rep.MaxOwnerlessSeconds = max(rep.MaxOwnerlessSeconds, kr.OwnerlessSeconds)
		w := span{ev.at, min(max(settled, owned, ev.at+r.reqTimeout)+time.Second, next)}
		windows = append(windows, w)
		kr.Clients = r.stats.window(w.from, w.to)
		rep.Events = append(rep.Events, kr)
	}
	rep.Client = r.stats.window(0, end+time.Second)
	// Failover: the windows together; steady: the rest.
	rep.Failover = ClientErrors{ByKind: map[string]int64{}}
	for _, w := range windows {
		addErrors(&rep.Failover, r.stats.window(w.from, w.to))
	}
	rep.Steady = ClientErrors{Seconds: rep.Client.Seconds - rep.Failover.Seconds, Requests: rep.Client.Requests - rep.Failover.Requests,
		Errors: rep.Client.Errors - rep.Failover.Errors, ByKind: map[string]int64{}}
	for k, n := range rep.Client.ByKind {
		if d := n - rep.Failover.ByKind[k]; d > 0 {
			rep.Steady.ByKind[k] = d
		}
	}
	rep.Failover.ErrorRate, rep.Steady.ErrorRate = rate(rep.Failover), rate(rep.Steady)
	sort.Slice(rep.Events, func(i, j int) bool { return rep.Events[i].AtSeconds < rep.Events[j].AtSeconds })
	return rep
}

func addErrors(into *ClientErrors, w ClientErrors) {
	into.Seconds = round3(into.Seconds + w.Seconds)
	into.Requests += w.Requests
	into.Errors += w.Errors
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
	fmt.Fprintf(b, "  cluster   %d brokers · shard lease %.1f s · %d shards · chaos %s", c.Brokers, c.ShardLeaseSeconds, c.Shards, c.Chaos)
	if c.Chaos == ChaosKill {
		fmt.Fprintf(b, " every %.0f s: %d kills, %d restarts", c.ChaosIntervalSeconds, c.Kills, c.Restarts)
	}
	b.WriteByte('\n')
	fmt.Fprintf(b, "  ownership %.1f ownerless shard-seconds in all · worst kill: %.1f shard-seconds, %.1f s until every shard was owned, %d shards at once (%d polls, %d failed)\n",
		c.OwnerlessShardSeconds, c.MaxOwnerlessShardSeconds, c.MaxOwnerlessSeconds, c.MaxOwnerlessShards, c.ClusterPolls, c.ClusterPollErrors)
	for _, e := range c.Events {
		fmt.Fprintf(b, "            kill broker %d at %.1f s: back after %.1f s%s · ownerless %.1f s, %d shards max, %.1f shard-seconds · clients %d errors of %d requests (%.2f%%)%s\n",
			e.Broker, e.AtSeconds, e.RestartAfter, restartErr(e.RestartError), e.OwnerlessSeconds, e.MaxOwnerlessShards, e.OwnerlessShardSeconds,
			e.Clients.Errors, e.Clients.Requests, 100*e.Clients.ErrorRate, kinds(e.Clients.ByKind))
	}
	fmt.Fprintf(b, "  clients   failover %.1f s: %d errors of %d requests (%.2f%%)%s · steady: %d errors of %d requests (%.2f%%)%s\n",
		c.Failover.Seconds, c.Failover.Errors, c.Failover.Requests, 100*c.Failover.ErrorRate, kinds(c.Failover.ByKind),
		c.Steady.Errors, c.Steady.Requests, 100*c.Steady.ErrorRate, kinds(c.Steady.ByKind))
}

func restartErr(s string) string {
	if s == "" {
		return ""
	}
	return " (restart FAILED: " + s + ")"
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

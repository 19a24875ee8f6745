package loadtest

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/bits"
	"net/http"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/transport/client"
)

// histogram counts durations in logarithmic buckets (microseconds, about
// 3% wide), lock-free, so quantiles of a whole run or of one interval need
// no per-request memory.
type histogram struct {
	counts [histBuckets]atomic.Int64
	maxUS  atomic.Int64
}

const histBuckets = 64 + 40*32

func histIndex(us int64) int {
	if us < 64 {
		return int(max(us, 0))
	}
	e := bits.Len64(uint64(us)) - 6 // >= 1
	m := us >> e                    // 32..63
	return min(64+(e-1)*32+int(m-32), histBuckets-1)
}

// histValue is the middle of bucket i, in microseconds.
func histValue(i int) float64 {
	if i < 64 {
		return float64(i)
	}
	e := (i-64)/32 + 1
	m := int64((i-64)%32 + 32)
	return float64(m<<e) + float64(int64(1)<<e)/2
}

func (h *histogram) record(d time.Duration) {
	us := d.Microseconds()
	h.counts[histIndex(us)].Add(1)
	for {
		m := h.maxUS.Load()
		if us <= m || h.maxUS.CompareAndSwap(m, us) {
			return
		}
	}
}

// snapshot copies the counts.
func (h *histogram) snapshot() []int64 {
	out := make([]int64, histBuckets)
	for i := range out {
		out[i] = h.counts[i].Load()
	}
	return out
}

// quantileMS is the q-quantile (0..1) of counts in milliseconds (0 when
// empty), to the bucket's precision.
func quantileMS(counts []int64, q float64) float64 {
	var n int64
	for _, c := range counts {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	rank = max(rank, 1)
	var seen int64
	for i, c := range counts {
		seen += c
		if seen >= rank {
			return math.Round(histValue(i)) / 1e3
		}
	}
	return 0
}

// latency is the run's request latency: p50 and p99 to the buckets'
// precision, the exact maximum.
func (h *histogram) latency() Latency {
	c := h.snapshot()
	return Latency{P50: quantileMS(c, 0.5), P99: quantileMS(c, 0.99), Max: float64(h.maxUS.Load()) / 1e3}
}

// TimelinePoint is one sample of a run (every Config.SampleEvery): rates and
// latency over the interval since the previous point, sizes at the moment.
type TimelinePoint struct {
	// T is the seconds since the run started.
	T float64 `json:"t_s"`
	// StoredPerSecond is the frames the incremental audit found stored
	// in the interval, per second; ItemsPerSecond the items sent.
	StoredPerSecond float64 `json:"stored_per_second"`
	ItemsPerSecond  float64 `json:"items_per_second"`
	// P50 and P99 are the push requests' latency in the interval (ms).
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	// BrokerRSS is process_resident_memory_bytes from the brokers'
	// /metrics (summed over the brokers that answered; with --embedded the
	// broker is this process, harness included); 0 when none answered.
	BrokerRSS int64 `json:"broker_rss_bytes"`
	// BrokerMetrics: at least one broker's /metrics answered at this
	// sample. When false (a NATS target has no /metrics URL, or none
	// answered) the cache figures and, unless the broker runs in this
	// process, BrokerRSS are unavailable: 0 here, "n/a" in the text.
	BrokerMetrics bool `json:"broker_metrics"`
	// DBBytes is pg_database_size; SidecarBytes the hash sidecar's
	// relations (log_txns, log_txn_hashes, hash_blocks, every partition, indexes and
	// TOAST); WALBytes the WAL written since the run started (the
	// cluster's WAL: every database of the PostgreSQL). All three are 0
	// when the database could not be read at this sample, WALBytes also
	// when it could not be read at the run's start.
	DBBytes      int64 `json:"db_bytes"`
	SidecarBytes int64 `json:"sidecar_bytes"`
	WALBytes     int64 `json:"wal_bytes"`
	// StoredMessages is the frames the incremental audit had read by this
	// sample since the run started (its passes run every 2 s at most, so
	// the count may trail the sizes by one pass).
	StoredMessages int64 `json:"stored_messages"`
	// WALBytesPerMessage, DBBytesPerMessage and SidecarBytesPerMessage are
	// the WAL written and the database's and the sidecar's growth in the
	// interval, per frame stored in it (storagePerMessage); nil (omitted)
	// when nothing was stored in it or a size is unknown at either end.
	WALBytesPerMessage     *float64 `json:"wal_bytes_per_message,omitempty"`
	DBBytesPerMessage      *float64 `json:"db_bytes_per_message,omitempty"`
	SidecarBytesPerMessage *float64 `json:"sidecar_bytes_per_message,omitempty"`
	// The dedup cache (queen_dedup_cache_bytes, the evictions and
	// hydrations counters), summed over the brokers that answered.
	CacheBytes      int64 `json:"cache_bytes"`
	CacheEvictions  int64 `json:"cache_evictions"`
	CacheHydrations int64 `json:"cache_hydrations"`
	// LedgerBytes is the memory of the harness's audit ledgers (4 bits per
	// id sent plus the ids awaiting their stored frame or answer);
	// HarnessHeap is this process's live Go heap as the last GC marked it
	// (runtime/metrics /gc/heap/live:bytes; with --embedded the broker's
	// heap too).
	LedgerBytes int64 `json:"ledger_bytes"`
	HarnessHeap int64 `json:"harness_heap_bytes"`
}

// brokerMetrics are the figures the timeline reads from a broker's /metrics.
type brokerMetrics struct {
	rss, cacheBytes, evictions, hydrations int64
	// The lease expiries, bisections and expiry dead letters the broker
	// settled, and its poison stall seconds (SPEC.md §4).
	leaseExpiries, bisections, expiryDead int64
	stallSeconds                          float64
}

// scrapeMetrics reads the figures of base's /metrics with the Go client.
func scrapeMetrics(ctx context.Context, hc *http.Client, base string) (brokerMetrics, error) {
	var m brokerMetrics
	ints := map[string]*int64{
		"queen_lease_expiries_total":            &m.leaseExpiries,
		"queen_lease_bisections_total":          &m.bisections,
		"queen_lease_expiry_dead_letters_total": &m.expiryDead,
		"process_resident_memory_bytes":         &m.rss,
		"queen_dedup_cache_bytes":               &m.cacheBytes,
		"queen_dedup_cache_evictions_total":     &m.evictions,
		"queen_dedup_cache_hydrations_total":    &m.hydrations,
	}
	names := []string{"queen_poison_stall_seconds_total"}
	for n := range ints {
		names = append(names, n)
	}
	got, err := client.NewHTTP(client.HTTPConfig{URLs: []string{base}, Client: hc}).Metrics(ctx, names...)
	if err != nil {
		return m, fmt.Errorf("%s/metrics: %w", strings.TrimRight(base, "/"), err)
	}
	for n, dst := range ints {
		if v, ok := got[n]; ok {
			*dst = int64(v)
		}
	}
	m.stallSeconds = got["queen_poison_stall_seconds_total"]
	return m, nil
}

// sampler records the timeline: every SampleEvery it runs an incremental
// audit pass and reads the database's and the brokers' figures.
type sampler struct {
	cfg     *Config
	c       *counters
	au      *auditor
	a       *persistence.Audit
	ledgers []*ledger
	hc      *http.Client
	urls    []string
	start   time.Time
	walAt   string
	out     io.Writer
	prog    *progress

	points  []TimelinePoint
	lastErr string
	stop    chan struct{}
	done    chan struct{}

	lastAt     time.Time
	lastSent   int64
	lastStored int64
	lastAcked  int64
	lastHist   []int64
	// last is the previous point (at first the run's start), for the
	// interval's bytes per message.
	last TimelinePoint
}

// startSampler starts the timeline; rs is the database's figures before the
// run's first push.
func startSampler(ctx context.Context, cfg *Config, c *counters, au *auditor, a *persistence.Audit, ledgers []*ledger, prog *progress, start time.Time, rs runStart) *sampler {
	s := &sampler{cfg: cfg, c: c, au: au, a: a, ledgers: ledgers, hc: &http.Client{Timeout: 5 * time.Second},
		urls: cfg.MetricsURLs, start: start, prog: prog, stop: make(chan struct{}), done: make(chan struct{}),
		lastAt: start, lastHist: make([]int64, histBuckets), walAt: rs.walAt, lastErr: rs.err, last: rs.sizes}
	if len(s.urls) == 0 {
		for _, t := range append([]string{cfg.Target}, cfg.Targets...) {
			if strings.HasPrefix(t, "http") && !slices.Contains(s.urls, t) {
				s.urls = append(s.urls, t)
			}
		}
	}
	if cfg.Progress != nil {
		s.out = cfg.Progress
	}
	go s.loop(ctx)
	return s
}

func (s *sampler) loop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.cfg.SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.sample(ctx, now)
		}
	}
}

// finish stops the sampler and returns the timeline.
func (s *sampler) finish() []TimelinePoint {
	if s == nil {
		return nil
	}
	close(s.stop)
	<-s.done
	return s.points
}

func (s *sampler) sample(ctx context.Context, now time.Time) {
	sent := s.c.sent.Load()
	hist := s.c.lat.snapshot()
	if e := s.au.err(); e != "" {
		s.lastErr = "incremental audit: " + e
	}
	stored := s.au.storedTotal()
	// Rates are over the interval between the reads of the counters.
	secs := now.Sub(s.lastAt).Seconds()
	diff := make([]int64, histBuckets)
	for i := range diff {
		diff[i] = hist[i] - s.lastHist[i]
	}
	p := TimelinePoint{
		T:               math.Round(now.Sub(s.start).Seconds()*10) / 10,
		StoredPerSecond: perSecond(stored-s.lastStored, secs),
		ItemsPerSecond:  perSecond(sent-s.lastSent, secs),
		P50:             quantileMS(diff, 0.5),
		P99:             quantileMS(diff, 0.99),
		StoredMessages:  stored,
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if st, err := s.a.Stats(qctx, s.walAt); err == nil {
		p.DBBytes, p.SidecarBytes, p.WALBytes = st.DatabaseBytes, st.SidecarBytes, st.WALBytes
	} else {
		s.lastErr = "database stats: " + err.Error()
	}
	pm := storagePerMessage(s.last, p)
	p.WALBytesPerMessage, p.DBBytesPerMessage, p.SidecarBytesPerMessage = pm.WAL, pm.DB, pm.Sidecar
	for _, u := range s.urls {
		m, err := scrapeMetrics(qctx, s.hc, u)
		if err != nil {
			continue // a killed broker, or metrics not reachable
		}
		p.BrokerMetrics = true
		p.BrokerRSS += m.rss
		p.CacheBytes += m.cacheBytes
		p.CacheEvictions += m.evictions
		p.CacheHydrations += m.hydrations
	}
	if p.BrokerRSS == 0 && s.cfg.SelfRSS {
		p.BrokerRSS = selfRSS()
	}
	for _, l := range s.ledgers {
		p.LedgerBytes += l.bytes()
	}
	p.HarnessHeap = liveHeap()
	s.points = append(s.points, p)
	s.last = p
	s.lastAt, s.lastSent, s.lastStored, s.lastHist = now, sent, stored, hist
	if s.out != nil {
		s.writeLine(now, p)
	}
}

// writeLine prints the point as one progress line (on a terminal, above the
// live line).
func (s *sampler) writeLine(now time.Time, p TimelinePoint) {
	cache := "n/a"
	if p.BrokerMetrics {
		cache = fmt.Sprintf("%s (evictions %d, hydrations %d)", mib(p.CacheBytes), p.CacheEvictions, p.CacheHydrations)
	}
	line := fmt.Sprintf("loadtest: sample t=%.0fs stored/s %s · items/s %s · p50 %.1f ms · p99 %.1f ms · broker rss %s · db %s · sidecar %s · wal %s · per stored message wal %s, db %s, sidecar %s · cache %s · ledger %s",
		p.T, commas(int64(p.StoredPerSecond)), commas(int64(p.ItemsPerSecond)), p.P50, p.P99, p.rssText(mib), mib(p.DBBytes),
		mib(p.SidecarBytes), mib(p.WALBytes), perMessageText(p.WALBytesPerMessage, " B"), perMessageText(p.DBBytesPerMessage, " B"),
		perMessageText(p.SidecarBytesPerMessage, " B"), cache, mib(p.LedgerBytes))
	switch {
	case s.prog != nil && s.prog.live:
		fmt.Fprint(s.out, "\r\x1b[K"+line+"\n")
	case s.prog != nil:
		// The sample line is the progress line of a log.
		rate := 0.0
		var acked int64
		if s.prog.cc != nil {
			acked = s.prog.cc.acked.Load()
			rate = float64(acked-s.lastAcked) / s.cfg.SampleEvery.Seconds()
			s.lastAcked = acked
		}
		fmt.Fprintln(s.out, s.prog.line(now, p.ItemsPerSecond, rate))
		fmt.Fprintln(s.out, line)
	default:
		fmt.Fprintln(s.out, line)
	}
}

// rssText is the broker's RSS through format, or "n/a" when no broker's
// /metrics answered and the broker is not this process.
func (p TimelinePoint) rssText(format func(int64) string) string {
	if !p.BrokerMetrics && p.BrokerRSS == 0 {
		return "n/a"
	}
	return format(p.BrokerRSS)
}

// liveHeap is the heap the last GC found live (bytes).
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// mib formats bytes as MiB with one decimal.
func mib(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB" }

// selfRSS is this process's resident set size (Linux /proc), else 0.
func selfRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// warmup is how much of a run the sustained ratio skips.
const warmup = time.Minute

// SustainedMinRun is the shortest run whose sustained ratio means
// something: the warm-up plus four minutes, so each quarter compared spans a
// minute (six points at the default --sample-every of 10 s). Shorter runs
// report the ratio in the JSON with sustained_ratio_meaningful false, and
// the text report leaves its line out.
const SustainedMinRun = warmup + 4*time.Minute

// SustainedRatio is the median stored/s of the last quarter of the run over
// the median of its first quarter, both after the first minute of warm-up
// (a point covers the interval since the previous one: points whose
// interval started before t_s 60 are skipped when later points exist;
// quarters are by time, t_s ascending). meaningful
// is false for runs shorter than SustainedMinRun: the ratio is then
// computed over the points there are. 0 with fewer than two points, or when the
// first quarter's median is 0.
func SustainedRatio(points []TimelinePoint) (ratio float64, meaningful bool) {
	if len(points) == 0 {
		return 0, false
	}
	last := points[len(points)-1].T
	meaningful = last >= SustainedMinRun.Seconds()
	// A point covers the interval since the one before: skip those whose
	// interval started inside the warm-up.
	use := points
	for i := 1; i < len(points); i++ {
		if points[i-1].T >= warmup.Seconds() {
			use = points[i:]
			break
		}
	}
	if len(use) < 2 {
		return 0, meaningful
	}
	// Quarters by time, each at least one point.
	t0, t1 := use[0].T, use[len(use)-1].T
	q := (t1 - t0) / 4
	var first, lastQ []float64
	for _, p := range use {
		if p.T <= t0+q {
			first = append(first, p.StoredPerSecond)
		}
		if p.T >= t1-q {
			lastQ = append(lastQ, p.StoredPerSecond)
		}
	}
	m0 := median(first)
	if m0 == 0 {
		return 0, meaningful
	}
	return math.Round(median(lastQ)/m0*1000) / 1000, meaningful
}

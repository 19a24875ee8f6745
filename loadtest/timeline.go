package loadtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/queen-mq/queen-go/loadtest/audit"
	"github.com/queen-mq/queen-go/loadtest/produce"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/target"
	"github.com/queen-mq/queen-go/persistence"
)

// sampler records the timeline: every SampleEvery it runs an incremental
// audit pass and reads the database's and the brokers' figures.
type sampler struct {
	cfg     *Config
	c       *produce.Counters
	au      *audit.Auditor
	a       *persistence.Audit
	ledgers []*audit.Ledger
	hc      *http.Client
	urls    []string
	start   time.Time
	walAt   string
	out     io.Writer
	prog    *progress
	// backlog is the consumer groups' backlog from a reading of the
	// cursors and the stored count (consumers.Phase.Backlog; nil without
	// consumers).
	backlog func(cursors []persistence.Cursor, stored int64) []report.GroupBacklog

	points  []report.TimelinePoint
	lastErr string
	stop    chan struct{}
	done    chan struct{}

	lastAt     time.Time
	lastSent   int64
	lastStored int64
	lastAcked  int64
	lastHist   []int64
	lastE2E    []int64 // the consumers' push commit → handler histogram
	// last is the previous point (at first the run's start), for the
	// interval's bytes per message.
	last report.TimelinePoint
}

// startSampler starts the timeline; rs is the database's figures before the
// run's first push, backlog the consumer groups' backlog (sampler.backlog;
// nil without consumers).
func startSampler(ctx context.Context, cfg *Config, c *produce.Counters, au *audit.Auditor, a *persistence.Audit, ledgers []*audit.Ledger, prog *progress, start time.Time, rs runStart,
	backlog func([]persistence.Cursor, int64) []report.GroupBacklog) *sampler {
	s := &sampler{cfg: cfg, c: c, au: au, a: a, ledgers: ledgers, hc: sampleClient(cfg.TLS), backlog: backlog,
		urls: cfg.MetricsURLs, start: start, prog: prog, stop: make(chan struct{}), done: make(chan struct{}),
		lastAt: start, lastHist: make([]int64, report.HistBuckets), lastE2E: make([]int64, report.HistBuckets), walAt: rs.walAt, lastErr: rs.err, last: rs.sizes}
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
func (s *sampler) finish() []report.TimelinePoint {
	if s == nil {
		return nil
	}
	close(s.stop)
	<-s.done
	return s.points
}

func (s *sampler) sample(ctx context.Context, now time.Time) {
	sent := s.c.Sent.Load()
	hist := s.c.Lat.Snapshot()
	if e := s.au.Err(); e != "" {
		s.lastErr = "incremental audit: " + e
	}
	stored := s.au.StoredTotal()
	// Rates are over the interval between the reads of the counters.
	secs := now.Sub(s.lastAt).Seconds()
	diff := make([]int64, report.HistBuckets)
	for i := range diff {
		diff[i] = hist[i] - s.lastHist[i]
	}
	p := report.TimelinePoint{
		T:               math.Round(now.Sub(s.start).Seconds()*10) / 10,
		StoredPerSecond: report.PerSecond(stored-s.lastStored, secs),
		ItemsPerSecond:  report.PerSecond(sent-s.lastSent, secs),
		P50:             report.QuantileMS(diff, 0.5),
		P99:             report.QuantileMS(diff, 0.99),
		StoredMessages:  stored,
	}
	if s.prog != nil && s.prog.cc != nil {
		cc := s.prog.cc
		acked, e2e := cc.Acked.Load(), cc.Latency.Snapshot()
		rate := report.PerSecond(acked-s.lastAcked, secs)
		p.AckedPerSecond = &rate
		d := make([]int64, report.HistBuckets)
		var n int64
		for i := range d {
			d[i] = e2e[i] - s.lastE2E[i]
			n += d[i]
		}
		if n > 0 {
			p50, p99 := report.QuantileMS(d, 0.5), report.QuantileMS(d, 0.99)
			p.E2EP50, p.E2EP99 = &p50, &p99
		}
		s.lastAcked, s.lastE2E = acked, e2e
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if st, err := s.a.Stats(qctx, s.walAt); err == nil {
		p.DBBytes, p.SidecarBytes, p.WALBytes = st.DatabaseBytes, st.SidecarBytes, st.WALBytes
	} else {
		s.lastErr = "database stats: " + err.Error()
	}
	if s.backlog != nil {
		if cur, err := s.a.Cursors(qctx, []string{s.cfg.Queue}); err == nil {
			p.Backlog = s.backlog(cur, stored)
		} else {
			s.lastErr = "cursors: " + err.Error()
		}
	}
	pm := storagePerMessage(s.last, p)
	p.WALBytesPerMessage, p.DBBytesPerMessage, p.SidecarBytesPerMessage = pm.WAL, pm.DB, pm.Sidecar
	for _, u := range s.urls {
		m, err := target.ScrapeMetrics(qctx, s.hc, u)
		if err != nil {
			continue // a killed broker, or metrics not reachable
		}
		p.BrokerMetrics = true
		p.BrokerRSS += m.RSS
		p.CacheBytes += m.CacheBytes
		p.CacheEvictions += m.Evictions
		p.CacheHydrations += m.Hydrations
		p.CacheNarrowedProbes += m.NarrowedProbes
		p.CacheFullProbes += m.FullProbes
	}
	if p.BrokerRSS == 0 && s.cfg.SelfRSS {
		p.BrokerRSS = selfRSS()
	}
	for _, l := range s.ledgers {
		p.LedgerBytes += l.Bytes()
	}
	if s.prog != nil && s.prog.cc != nil {
		p.LedgerBytes += s.prog.cc.RecordBytes.Load()
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
func (s *sampler) writeLine(now time.Time, p report.TimelinePoint) {
	cache := "n/a"
	if p.BrokerMetrics {
		cache = fmt.Sprintf("%s (evictions %d, hydrations %d, narrowed probes %s of %s)", mib(p.CacheBytes), p.CacheEvictions, p.CacheHydrations,
			report.Commas(p.CacheNarrowedProbes), report.Commas(p.CacheNarrowedProbes+p.CacheFullProbes))
	}
	line := fmt.Sprintf("loadtest: sample t=%.0fs stored/s %s · items/s %s · p50 %.1f ms · p99 %.1f ms · broker rss %s · db %s · sidecar %s · wal %s · per stored message wal %s, db %s, sidecar %s · cache %s · ledger %s",
		p.T, report.Commas(int64(p.StoredPerSecond)), report.Commas(int64(p.ItemsPerSecond)), p.P50, p.P99, p.RSSText(mib), mib(p.DBBytes),
		mib(p.SidecarBytes), mib(p.WALBytes), report.PerMessageText(p.WALBytesPerMessage, " B"), report.PerMessageText(p.DBBytesPerMessage, " B"),
		report.PerMessageText(p.SidecarBytesPerMessage, " B"), cache, mib(p.LedgerBytes))
	if len(p.Backlog) > 0 {
		parts := make([]string, len(p.Backlog))
		for i, b := range p.Backlog {
			parts[i] = b.Group + " " + report.Commas(b.Messages)
		}
		line += " · backlog " + strings.Join(parts, ", ")
	}
	switch {
	case s.prog != nil && s.prog.live:
		fmt.Fprint(s.out, "\r\x1b[K"+line+"\n")
	case s.prog != nil:
		// The sample line is the progress line of a log.
		rate := 0.0
		if p.AckedPerSecond != nil {
			rate = *p.AckedPerSecond
		}
		fmt.Fprintln(s.out, s.prog.line(now, p.ItemsPerSecond, rate))
		fmt.Fprintln(s.out, line)
	default:
		fmt.Fprintln(s.out, line)
	}
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

// sampleClient is the timeline's client of the brokers' /metrics: 5 s per
// request, tc (Config.TLS) for https:// brokers.
func sampleClient(tc *tls.Config) *http.Client {
	if tc == nil {
		return &http.Client{Timeout: 5 * time.Second}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc.Clone() // the transport adds its ALPN protocols to it
	return &http.Client{Timeout: 5 * time.Second, Transport: tr}
}

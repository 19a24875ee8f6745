package loadtest

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/queen-mq/queen-go/persistence"
)

// Report is the outcome of one run. Rates are per second of the run's
// elapsed time (from the first request to the last answer, retries of
// failed items included).
type Report struct {
	Mode Mode `json:"mode"`
	// Target is the broker URL (broker mode) or "postgres" (raw mode).
	Target string `json:"target"`
	Queue  string `json:"queue,omitempty"`
	Table  string `json:"table,omitempty"`

	Producers int `json:"producers"`
	// Connections is how many NATS connections the sync producers shared
	// (0: one each).
	Connections int `json:"connections,omitempty"`
	Partitions  int `json:"partitions"`
	Batch       int `json:"batch"`
	// ProducerMode is sync (requests of Batch items, one in flight per
	// producer) or async (single items through the Go client's async
	// producer, with InFlight outstanding items at most, MaxBatch items per
	// request and a linger of LingerMs).
	ProducerMode string  `json:"producer_mode"`
	InFlight     int     `json:"in_flight,omitempty"`
	MaxBatch     int     `json:"max_batch,omitempty"`
	LingerMs     float64 `json:"linger_ms,omitempty"`
	PayloadBytes int     `json:"payload_bytes"`
	DupRatio     float64 `json:"dup_ratio"`

	// Seconds is the elapsed time; Interrupted is set when the run was
	// stopped early (SIGINT).
	Seconds     float64 `json:"seconds"`
	Interrupted bool    `json:"interrupted"`

	// Requests answered (with verdicts or an error) and requests that got
	// no verdict at all (timeouts, refusals, transport errors).
	Requests      int64 `json:"requests"`
	RequestErrors int64 `json:"request_errors"`
	// LastError is the last request error's message.
	LastError string `json:"last_error,omitempty"`

	// ItemsSent counts every item of every request: new transactionIds,
	// repeats and retries.
	ItemsSent      int64   `json:"items_sent"`
	ItemsPerSecond float64 `json:"items_per_second"`
	NewItems       int64   `json:"new_items"`
	Repeats        int64   `json:"repeats"`
	Retries        int64   `json:"retries"`
	// GaveUp counts items left without a verdict: retried MaxAttempts times,
	// or still waiting for a retry when the run ended.
	GaveUp int64 `json:"gave_up"`
	// Rejected counts items of requests refused as invalid (never retried).
	Rejected int64 `json:"rejected"`
	// UnknownOutcome counts items of requests abandoned by an interrupt.
	UnknownOutcome int64 `json:"unknown_outcome"`

	Verdicts Verdicts `json:"verdicts"`
	// ErrorCodes counts failed items by code, and failed requests as
	// "request:<code>".
	ErrorCodes map[string]int64 `json:"error_codes,omitempty"`

	// StoredMessages is what the database holds afterwards: the queue's
	// frames (broker mode) or the raw table's rows.
	StoredMessages  int64   `json:"stored_messages"`
	StoredPerSecond float64 `json:"stored_per_second"`
	// WALBytesPerMessage is the WAL written (the PostgreSQL's, every
	// database included) from before the first push to after the
	// producers' last answer, over StoredMessages; DBBytesPerMessage and
	// SidecarBytesPerMessage the growth of pg_database_size and of the
	// hash sidecar's relations over the same span, over StoredMessages
	// (bytes, to 0.1). nil (omitted) when unknown: nothing stored, or the
	// database could not be read (StorageError says why). The timeline
	// has the same figures per interval.
	WALBytesPerMessage     *float64 `json:"wal_bytes_per_message,omitempty"`
	DBBytesPerMessage      *float64 `json:"db_bytes_per_message,omitempty"`
	SidecarBytesPerMessage *float64 `json:"sidecar_bytes_per_message,omitempty"`
	StorageError           string   `json:"storage_error,omitempty"`

	Latency Latency `json:"latency_ms"`

	// Postgres is the database's commit durability (measured runs keep
	// fsync and synchronous_commit on).
	Postgres persistence.Durability `json:"postgres"`

	// Audit is the post-run audit (broker mode).
	Audit *AuditReport `json:"audit,omitempty"`

	// Consume is the consume phase and its end-to-end audit (runs with
	// consumers).
	Consume *ConsumeReport `json:"consume,omitempty"`

	// Cluster is the brokers of a --brokers N run and their shard
	// ownership.
	Cluster *ClusterReport `json:"cluster,omitempty"`
	// Chaos is the faults of a --chaos run, by kind, and the client errors
	// during and after each.
	Chaos *ChaosReport `json:"chaos,omitempty"`

	// DedupWindowSeconds and RetentionSeconds are the run queue's window
	// and retention (0: keep); SampleEverySeconds the timeline's interval
	// (broker mode).
	DedupWindowSeconds int     `json:"dedup_window_seconds,omitempty"`
	RetentionSeconds   int     `json:"retention_seconds,omitempty"`
	SampleEverySeconds float64 `json:"sample_every_seconds,omitempty"`
	// Timeline is a point every SampleEvery (broker mode).
	Timeline []TimelinePoint `json:"timeline,omitempty"`
	// SustainedRatio is the median stored/s of the timeline's last quarter
	// over its first quarter's, after one minute of warm-up
	// (SustainedRatio()); SustainedRatioMeaningful is false for runs
	// shorter than SustainedMinRun (5 minutes), whose text report leaves the
	// ratio out.
	SustainedRatio           float64 `json:"sustained_ratio"`
	SustainedRatioMeaningful bool    `json:"sustained_ratio_meaningful"`
	// TimelineError is the last error of a sample (a pass or a read that
	// failed; the next one catches up).
	TimelineError string `json:"timeline_error,omitempty"`
}

// Verdicts counts the answers per item (in raw mode: queued = rows copied,
// failed = rows of failed COPYs).
type Verdicts struct {
	Queued    int64 `json:"queued"`
	Duplicate int64 `json:"duplicate"`
	Failed    int64 `json:"failed"`
}

// Latency is the request latency in milliseconds; with ProducerMode async,
// each item's from Publish to its verdict.
type Latency struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// AuditReport is the post-run audit of SPEC.md §12.
type AuditReport struct {
	Passed bool `json:"passed"`
	// TransactionIDs counts the distinct (partition, transactionId) pairs
	// sent; Answered those answered queued or duplicate at least once;
	// FailedOnly the rest (answered failed only, or never answered), of
	// which FailedOnlyStored were found stored (once).
	TransactionIDs   int64 `json:"transaction_ids"`
	Answered         int64 `json:"answered"`
	FailedOnly       int64 `json:"failed_only"`
	FailedOnlyStored int64 `json:"failed_only_stored"`
	StoredMessages   int64 `json:"stored_messages"`
	// IncrementalPasses counts the passes that read each partition's new
	// segments during the run (one per sample, and a last one after it);
	// Recounted is set when a final pass recounted every stored frame of
	// the queue (runs without retention); UnauditedOffsets counts offsets
	// deleted before a pass read them (each fails the audit).
	IncrementalPasses int   `json:"incremental_passes"`
	Recounted         bool  `json:"recounted"`
	UnauditedOffsets  int64 `json:"unaudited_offsets"`
	// Issues counts findings by kind (see the Issue* constants); Examples
	// shows a few of each as "kind: description".
	Issues   map[string]int64 `json:"issues"`
	Examples []string         `json:"examples,omitempty"`
}

func latencyOf(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
	at := func(q float64) time.Duration { return ds[int(math.Ceil(q*float64(len(ds))))-1] }
	return Latency{P50: ms(at(0.50)), P99: ms(at(0.99)), Max: ms(ds[len(ds)-1])}
}

func perSecond(n int64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return math.Round(float64(n)/secs*10) / 10
}

// WriteText writes the report for people.
func (r *Report) WriteText(w io.Writer) {
	var b strings.Builder
	if r.Mode == ModeRaw {
		fmt.Fprintf(&b, "queen loadtest: raw COPY into queen_raw.%s, %.1f s", r.Table, r.Seconds)
	} else {
		fmt.Fprintf(&b, "queen loadtest: broker at %s, queue %s, %.1f s", r.Target, r.Queue, r.Seconds)
	}
	if r.Interrupted {
		b.WriteString(" (interrupted)")
	}
	b.WriteByte('\n')
	if r.ProducerMode == ProducerAsync {
		fmt.Fprintf(&b, "  producers %d async (single items; %d in flight, up to %d per request, linger %g ms) · partitions %d · payload %d B · dup ratio %g\n",
			r.Producers, r.InFlight, r.MaxBatch, r.LingerMs, r.Partitions, r.PayloadBytes, r.DupRatio)
	} else {
		conns := ""
		if r.Connections > 0 {
			conns = fmt.Sprintf(" over %d NATS connections", r.Connections)
		}
		fmt.Fprintf(&b, "  producers %d%s · partitions %d · batch %d · payload %d B · dup ratio %g\n",
			r.Producers, conns, r.Partitions, r.Batch, r.PayloadBytes, r.DupRatio)
	}
	fmt.Fprintf(&b, "  sent      %s items (%s items/s): %s new, %s repeats, %s retries\n",
		commas(r.ItemsSent), commas(int64(r.ItemsPerSecond)), commas(r.NewItems), commas(r.Repeats), commas(r.Retries))
	if r.Mode == ModeRaw {
		fmt.Fprintf(&b, "  copied    %s rows · failed %s\n", commas(r.Verdicts.Queued), commas(r.Verdicts.Failed))
	} else {
		fmt.Fprintf(&b, "  verdicts  queued %s · duplicate %s · failed %s\n",
			commas(r.Verdicts.Queued), commas(r.Verdicts.Duplicate), commas(r.Verdicts.Failed))
	}
	if r.GaveUp+r.Rejected+r.UnknownOutcome > 0 {
		fmt.Fprintf(&b, "  unresolved  gave up %s · rejected %s · outcome unknown (interrupted) %s\n",
			commas(r.GaveUp), commas(r.Rejected), commas(r.UnknownOutcome))
	}
	if len(r.ErrorCodes) > 0 {
		codes := make([]string, 0, len(r.ErrorCodes))
		for c, n := range r.ErrorCodes {
			codes = append(codes, fmt.Sprintf("%s %s", c, commas(n)))
		}
		sort.Strings(codes)
		fmt.Fprintf(&b, "  errors    %s\n", strings.Join(codes, " · "))
		if r.LastError != "" {
			fmt.Fprintf(&b, "            last request error: %s\n", r.LastError)
		}
	}
	fmt.Fprintf(&b, "  stored    %s messages (%s messages/s)\n", commas(r.StoredMessages), commas(int64(r.StoredPerSecond)))
	r.writeStorage(&b)
	fmt.Fprintf(&b, "  latency   p50 %.1f ms · p99 %.1f ms · max %.1f ms (%s requests, %s without verdicts)\n",
		r.Latency.P50, r.Latency.P99, r.Latency.Max, commas(r.Requests), commas(r.RequestErrors))
	fmt.Fprintf(&b, "  postgres  fsync %s · synchronous_commit %s · full_page_writes %s%s\n", r.Postgres.Fsync,
		r.Postgres.SynchronousCommit, r.Postgres.FullPageWrites, notDurable(r.Postgres))
	if a := r.Audit; a != nil {
		if a.Passed {
			fmt.Fprintf(&b, "  audit     passed: %s transaction ids, %s answered queued or duplicate, each stored exactly once; %s failed-only (%s of them stored once); nothing else stored\n",
				commas(a.TransactionIDs), commas(a.Answered), commas(a.FailedOnly), commas(a.FailedOnlyStored))
		} else {
			kinds := make([]string, 0, len(a.Issues))
			for k, n := range a.Issues {
				kinds = append(kinds, fmt.Sprintf("%s %s", k, commas(n)))
			}
			sort.Strings(kinds)
			fmt.Fprintf(&b, "  audit     FAILED: %s\n", strings.Join(kinds, " · "))
			for _, e := range a.Examples {
				fmt.Fprintf(&b, "            %s\n", e)
			}
		}
	}
	if a := r.Audit; a != nil {
		scope := "every frame read once by offset during the run"
		if a.Recounted {
			scope += ", then every stored frame recounted after it"
		} else {
			scope += " (retention deletes them after: no final recount)"
		}
		fmt.Fprintf(&b, "            audited incrementally in %d passes: %s\n", a.IncrementalPasses, scope)
	}
	if len(r.Timeline) > 0 {
		r.writeTimeline(&b)
	}
	if r.Consume != nil {
		r.Consume.writeText(&b)
	}
	if r.Cluster != nil {
		r.Cluster.writeText(&b)
	}
	if r.Chaos != nil {
		r.Chaos.writeText(&b)
	}
	io.WriteString(w, b.String()) //nolint:errcheck
}

func (c *ConsumeReport) writeText(b *strings.Builder) {
	fmt.Fprintf(b, "  consume   %d groups × %d consumers · batch %d · up to %d partitions a pop (%.2f on average) · fail ratio %g · retryLimit %d · leaseTime %d s · %.1f s (drain %.1f s)\n",
		len(c.Groups), c.ConsumersPerGroup, c.Batch, max(c.ConsumePartitions, 1), c.PartitionsPerPop, c.FailRatio, c.RetryLimit, c.LeaseSeconds, c.Seconds, c.DrainSeconds)
	fmt.Fprintf(b, "  consumed  %s acked (%s acked/s) · %s dead-lettered · %s handled · %s delivered, %s of them redeliveries\n",
		commas(c.Acked), commas(int64(c.AckedPerSecond)), commas(c.DeadLettered), commas(c.Handled), commas(c.Deliveries), commas(c.Redeliveries))
	for _, g := range c.PerGroup {
		fmt.Fprintf(b, "            %s: %s acked (%s/s), %s dead-lettered, %s handled; %s messages, %s poison\n",
			g.Group, commas(g.Acked), commas(int64(g.AckedPerSecond)), commas(g.DeadLettered), commas(g.Handled), commas(g.Messages), commas(g.Poison))
	}
	fmt.Fprintf(b, "  requests  %s pops (%s empty, %s failed) · %s ack calls (%s without answer)",
		commas(c.Pops), commas(c.EmptyPops), commas(c.PopErrors), commas(c.AckCalls), commas(c.AckErrors))
	if len(c.AckResults) > 0 {
		res := make([]string, 0, len(c.AckResults))
		for k, n := range c.AckResults {
			res = append(res, fmt.Sprintf("%s %s", k, commas(n)))
		}
		sort.Strings(res)
		fmt.Fprintf(b, " · results %s", strings.Join(res, ", "))
	}
	b.WriteByte('\n')
	fmt.Fprintf(b, "            pop (with messages) p50 %.1f ms · p99 %.1f ms · max %.1f ms · ack p50 %.1f ms · p99 %.1f ms · max %.1f ms\n",
		c.PopLatency.P50, c.PopLatency.P99, c.PopLatency.Max, c.AckLatency.P50, c.AckLatency.P99, c.AckLatency.Max)
	if c.LastError != "" {
		fmt.Fprintf(b, "            last consumer error: %s\n", c.LastError)
	}
	fmt.Fprintf(b, "  e2e       push commit → handler p50 %.1f ms · p99 %.1f ms · max %.1f ms (%s first handlings)\n",
		c.Latency.P50, c.Latency.P99, c.Latency.Max, commas(c.E2ESamples))
	if p := c.Poison; p != nil {
		fmt.Fprintf(b, "  poison    %s leases abandoned (%s over several messages) · %s stalls, %.1f s in all, time to isolate p50 %.0f ms · p99 %.0f ms · max %.0f ms · %s still waiting\n",
			commas(p.AbandonedLeases), commas(p.AbandonedSpans), commas(p.Stalls), p.StallSeconds, p.IsolateMS.P50, p.IsolateMS.P99, p.IsolateMS.Max, commas(p.OpenStalls))
		if br := p.Brokers; br != nil {
			fmt.Fprintf(b, "            brokers: %s lease expiries, %s bisections, %s dead-lettered by expiry, %.1f s bisecting\n",
				commas(br.LeaseExpiries), commas(br.Bisections), commas(br.DeadLettered), br.StallSeconds)
		}
	}
	if w := c.Wake; w != nil {
		fmt.Fprintf(b, "  wake      parked long poll, push → reply p50 %.1f ms · p99 %.1f ms · max %.1f ms (%d of %d rounds, %d missed)\n",
			w.P50, w.P99, w.Max, w.Samples, w.Rounds, w.Misses)
		if w.LastError != "" {
			fmt.Fprintf(b, "            last probe error: %s\n", w.LastError)
		}
	}
	a := c.Audit
	if a == nil {
		return
	}
	scope := ""
	if !a.Complete {
		scope = " (interrupted: partial checks)"
	}
	if a.Passed {
		fmt.Fprintf(b, "  e2e audit passed%s: per group, %s stored messages: %s acked exactly once, %s poison each handled %d times and dead-lettered once; cursors at the last offsets",
			scope, commas(a.Messages), commas(a.Messages-a.Poison), commas(a.Poison), c.RetryLimit+1)
	} else {
		kinds := make([]string, 0, len(a.Issues))
		for k, n := range a.Issues {
			kinds = append(kinds, fmt.Sprintf("%s %s", k, commas(n)))
		}
		sort.Strings(kinds)
		fmt.Fprintf(b, "  e2e audit FAILED%s: %s", scope, strings.Join(kinds, " · "))
	}
	if a.AckOutcomeUnknown+a.RedeliveredAfterLostAck > 0 {
		fmt.Fprintf(b, "; %s acks without an answer (applied, the cursor moved), %s redeliveries after a lost ack", commas(a.AckOutcomeUnknown), commas(a.RedeliveredAfterLostAck))
	}
	if a.AckAfterLease > 0 {
		fmt.Fprintf(b, "; %s acks answered lease_invalid after their lease ran out (not applied, delivered again)", commas(a.AckAfterLease))
	}
	b.WriteByte('\n')
	for _, e := range a.Examples {
		fmt.Fprintf(b, "            %s\n", e)
	}
}

// Comparison is the outcome of Compare: broker and raw runs alternating,
// and the ratio of their stored messages per second.
type Comparison struct {
	Rounds []Round `json:"rounds"`
	// MedianRatio is the median over the rounds of broker/raw stored
	// messages per second: the headline figure.
	MedianRatio float64 `json:"median_ratio"`
	Interrupted bool    `json:"interrupted"`
}

// Round is one broker run and the raw run after it.
type Round struct {
	Round  int     `json:"round"`
	Broker *Report `json:"broker"`
	Raw    *Report `json:"raw,omitempty"`
	// Ratio is Broker.StoredPerSecond / Raw.StoredPerSecond.
	Ratio float64 `json:"ratio"`
}

// WriteText writes the comparison as a table.
func (c *Comparison) WriteText(w io.Writer) {
	var b strings.Builder
	b.WriteString("queen loadtest --compare: broker (dedup on) vs raw COPY, stored messages per second\n")
	if len(c.Rounds) > 0 {
		r := c.Rounds[0].Broker
		fmt.Fprintf(&b, "producers %d · partitions %d · batch %d · payload %d B · dup ratio %g · %.0f s per run\n",
			r.Producers, r.Partitions, r.Batch, r.PayloadBytes, r.DupRatio, r.Seconds)
		d := r.Postgres
		fmt.Fprintf(&b, "postgres: fsync %s · synchronous_commit %s · full_page_writes %s%s\n",
			d.Fsync, d.SynchronousCommit, d.FullPageWrites, notDurable(d))
	}
	fmt.Fprintf(&b, "%-5s  %-6s  %12s  %12s  %8s  %8s  %8s  %s\n", "round", "mode", "items/s", "stored/s", "p50 ms", "p99 ms", "max ms", "audit")
	row := func(n int, r *Report) {
		audit := "-"
		if r.Audit != nil {
			audit = "passed"
			if !r.Audit.Passed {
				audit = "FAILED"
			}
		}
		fmt.Fprintf(&b, "%-5d  %-6s  %12s  %12s  %8.1f  %8.1f  %8.1f  %s\n", n, r.Mode, commas(int64(r.ItemsPerSecond)),
			commas(int64(r.StoredPerSecond)), r.Latency.P50, r.Latency.P99, r.Latency.Max, audit)
	}
	var ratios []string
	for _, rd := range c.Rounds {
		row(rd.Round, rd.Broker)
		if rd.Raw != nil {
			row(rd.Round, rd.Raw)
			ratios = append(ratios, fmt.Sprintf("round %d %.3f", rd.Round, rd.Ratio))
		}
	}
	fmt.Fprintf(&b, "ratio broker/raw of stored messages/s: %s\n", strings.Join(ratios, ", "))
	fmt.Fprintf(&b, "median ratio: %.3f (%.1f%% of the raw COPY rate)", c.MedianRatio, 100*c.MedianRatio)
	if c.Interrupted {
		b.WriteString(" (interrupted)")
	}
	b.WriteByte('\n')
	io.WriteString(w, b.String()) //nolint:errcheck
}

func notDurable(d persistence.Durability) string {
	if d.Durable() {
		return ""
	}
	return " (NOT DURABLE: these figures are not comparable)"
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// writeStorage writes the bytes per stored message over the run.
func (r *Report) writeStorage(b *strings.Builder) {
	fmt.Fprintf(b, "  storage   %s WAL and %s database per stored message (sidecar %s), over %s stored messages\n",
		perMessageText(r.WALBytesPerMessage, " B"), perMessageText(r.DBBytesPerMessage, " B"),
		perMessageText(r.SidecarBytesPerMessage, " B"), commas(r.StoredMessages))
	if r.StorageError != "" {
		fmt.Fprintf(b, "            %s\n", r.StorageError)
	}
}

// writeTimeline writes the timeline as a table and the sustained ratio.
func (r *Report) writeTimeline(b *strings.Builder) {
	fmt.Fprintf(b, "  timeline  every %gs (window %d s, retention %d s; MiB; B/msg: bytes per message stored in the interval; cache evictions and hydrations are totals)\n", r.SampleEverySeconds, r.DedupWindowSeconds, r.RetentionSeconds)
	fmt.Fprintf(b, "  %7s %10s %10s %8s %8s %8s %8s %8s %8s %9s %9s %13s %8s %7s %7s %7s\n",
		"t s", "stored/s", "items/s", "p50 ms", "p99 ms", "rss", "db", "sidecar", "wal", "wal B/msg", "db B/msg", "sidecar B/msg", "cache", "evict", "hydr", "ledger")
	for _, p := range r.Timeline {
		cache, evict, hydr := "n/a", "n/a", "n/a"
		if p.BrokerMetrics {
			cache, evict, hydr = fmt.Sprintf("%.1f", mb(p.CacheBytes)), strconv.FormatInt(p.CacheEvictions, 10), strconv.FormatInt(p.CacheHydrations, 10)
		}
		fmt.Fprintf(b, "  %7.0f %10s %10s %8.1f %8.1f %8s %8.1f %8.1f %8.1f %9s %9s %13s %8s %7s %7s %7.1f\n",
			p.T, commas(int64(p.StoredPerSecond)), commas(int64(p.ItemsPerSecond)), p.P50, p.P99, p.rssText(func(n int64) string { return fmt.Sprintf("%.1f", mb(n)) }), mb(p.DBBytes),
			mb(p.SidecarBytes), mb(p.WALBytes), perMessageText(p.WALBytesPerMessage, ""), perMessageText(p.DBBytesPerMessage, ""),
			perMessageText(p.SidecarBytesPerMessage, ""), cache, evict, hydr, mb(p.LedgerBytes))
	}
	// Only a run of SustainedMinRun or more has quarters worth comparing.
	if r.SustainedRatioMeaningful {
		fmt.Fprintf(b, "  sustained ratio %.3f: median stored/s of the last quarter over the first quarter, after 1 min warm-up\n", r.SustainedRatio)
	}
	if r.TimelineError != "" {
		fmt.Fprintf(b, "            last sample error: %s\n", r.TimelineError)
	}
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }

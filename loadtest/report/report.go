package report

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Mode is what a run writes through.
type Mode string

const (
	// ModeBroker pushes to a broker over NATS or HTTP (loadtest.Config.Target) and
	// audits its database afterwards.
	ModeBroker Mode = "broker"
	// ModeRaw writes the same batches straight into a plain PostgreSQL table
	// with COPY, one row per item: no broker, no dedup. The baseline.
	ModeRaw Mode = "raw"
)

// Producer modes (Report.ProducerMode, loadtest.Config.ProducerMode).
const (
	// ProducerSync: each producer sends requests of Batch items, one at a
	// time, and retries failed items itself.
	ProducerSync = "sync"
	// ProducerAsync: each producer publishes single items through the Go
	// client's async producer (client.Producer), which batches them
	// (MaxBatch items, Linger) and retries them with the same
	// transactionIds; InFlight bounds its outstanding items.
	ProducerAsync = "async"
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
	Postgres Durability `json:"postgres"`

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
	// Timeline is a point every loadtest.Config.SampleEvery (broker mode).
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
	// Issues counts findings by kind (the Issue* constants of the audit); Examples
	// shows a few of each as "kind: description".
	Issues   map[string]int64 `json:"issues"`
	Examples []string         `json:"examples,omitempty"`
}

// LatencyOf is the p50, p99 and max of ds in milliseconds (rounded to the
// microsecond); it sorts ds in place. Zero for no samples.
func LatencyOf(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
	at := func(q float64) time.Duration { return ds[int(math.Ceil(q*float64(len(ds))))-1] }
	return Latency{P50: ms(at(0.50)), P99: ms(at(0.99)), Max: ms(ds[len(ds)-1])}
}

// PerSecond is n over secs, to 0.1; 0 when secs is not positive.
func PerSecond(n int64, secs float64) float64 {
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
		Commas(r.ItemsSent), Commas(int64(r.ItemsPerSecond)), Commas(r.NewItems), Commas(r.Repeats), Commas(r.Retries))
	if r.Mode == ModeRaw {
		fmt.Fprintf(&b, "  copied    %s rows · failed %s\n", Commas(r.Verdicts.Queued), Commas(r.Verdicts.Failed))
	} else {
		fmt.Fprintf(&b, "  verdicts  queued %s · duplicate %s · failed %s\n",
			Commas(r.Verdicts.Queued), Commas(r.Verdicts.Duplicate), Commas(r.Verdicts.Failed))
	}
	if r.GaveUp+r.Rejected+r.UnknownOutcome > 0 {
		fmt.Fprintf(&b, "  unresolved  gave up %s · rejected %s · outcome unknown (interrupted) %s\n",
			Commas(r.GaveUp), Commas(r.Rejected), Commas(r.UnknownOutcome))
	}
	if len(r.ErrorCodes) > 0 {
		codes := make([]string, 0, len(r.ErrorCodes))
		for c, n := range r.ErrorCodes {
			codes = append(codes, fmt.Sprintf("%s %s", c, Commas(n)))
		}
		sort.Strings(codes)
		fmt.Fprintf(&b, "  errors    %s\n", strings.Join(codes, " · "))
		if r.LastError != "" {
			fmt.Fprintf(&b, "            last request error: %s\n", r.LastError)
		}
	}
	fmt.Fprintf(&b, "  stored    %s messages (%s messages/s)\n", Commas(r.StoredMessages), Commas(int64(r.StoredPerSecond)))
	r.writeStorage(&b)
	fmt.Fprintf(&b, "  latency   p50 %.1f ms · p99 %.1f ms · max %.1f ms (%s requests, %s without verdicts)\n",
		r.Latency.P50, r.Latency.P99, r.Latency.Max, Commas(r.Requests), Commas(r.RequestErrors))
	fmt.Fprintf(&b, "  postgres  fsync %s · synchronous_commit %s · full_page_writes %s%s\n", r.Postgres.Fsync,
		r.Postgres.SynchronousCommit, r.Postgres.FullPageWrites, notDurable(r.Postgres))
	if a := r.Audit; a != nil {
		if a.Passed {
			fmt.Fprintf(&b, "  audit     passed: %s transaction ids, %s answered queued or duplicate, each stored exactly once; %s failed-only (%s of them stored once); nothing else stored\n",
				Commas(a.TransactionIDs), Commas(a.Answered), Commas(a.FailedOnly), Commas(a.FailedOnlyStored))
		} else {
			kinds := make([]string, 0, len(a.Issues))
			for k, n := range a.Issues {
				kinds = append(kinds, fmt.Sprintf("%s %s", k, Commas(n)))
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

// writeStorage writes the bytes per stored message over the run.
func (r *Report) writeStorage(b *strings.Builder) {
	fmt.Fprintf(b, "  storage   %s WAL and %s database per stored message (sidecar %s), over %s stored messages\n",
		PerMessageText(r.WALBytesPerMessage, " B"), PerMessageText(r.DBBytesPerMessage, " B"),
		PerMessageText(r.SidecarBytesPerMessage, " B"), Commas(r.StoredMessages))
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
			p.T, Commas(int64(p.StoredPerSecond)), Commas(int64(p.ItemsPerSecond)), p.P50, p.P99, p.RSSText(func(n int64) string { return fmt.Sprintf("%.1f", mb(n)) }), mb(p.DBBytes),
			mb(p.SidecarBytes), mb(p.WALBytes), PerMessageText(p.WALBytesPerMessage, ""), PerMessageText(p.DBBytesPerMessage, ""),
			PerMessageText(p.SidecarBytesPerMessage, ""), cache, evict, hydr, mb(p.LedgerBytes))
	}
	// Only a run of SustainedMinRun or more has quarters worth comparing.
	if r.SustainedRatioMeaningful {
		fmt.Fprintf(b, "  sustained ratio %.3f: median stored/s of the last quarter over the first quarter, after 1 min warm-up\n", r.SustainedRatio)
	}
	if r.TimelineError != "" {
		fmt.Fprintf(b, "            last sample error: %s\n", r.TimelineError)
	}
}

// Comparison is the outcome of loadtest.Compare: broker and raw runs alternating,
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
		fmt.Fprintf(&b, "%-5d  %-6s  %12s  %12s  %8.1f  %8.1f  %8.1f  %s\n", n, r.Mode, Commas(int64(r.ItemsPerSecond)),
			Commas(int64(r.StoredPerSecond)), r.Latency.P50, r.Latency.P99, r.Latency.Max, audit)
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

// Durability is the database's commit durability settings as the run read
// them (Report.Postgres): "on"/"off", SynchronousCommit also
// "remote_apply", "remote_write" or "local". The caller fills it from the
// audited database (persistence.Audit.Durability).
type Durability struct {
	Fsync             string `json:"fsync"`
	SynchronousCommit string `json:"synchronous_commit"`
	FullPageWrites    string `json:"full_page_writes"`
}

// Durable reports whether a commit is flushed to disk before it returns:
// fsync and full_page_writes on, synchronous_commit anything but off.
func (d Durability) Durable() bool {
	return d.Fsync == "on" && d.SynchronousCommit != "off" && d.FullPageWrites == "on"
}

// notDurable is the warning a report carries when PostgreSQL did not commit
// durably.
func notDurable(d Durability) string {
	if d.Durable() {
		return ""
	}
	return " (NOT DURABLE: these figures are not comparable)"
}

// Median is the median of xs (the mean of the middle two for an even
// count; 0 for none); xs is left as it is.
func Median(xs []float64) float64 {
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

func mb(n int64) float64 { return float64(n) / (1 << 20) }

// Commas formats n with thousands separators.
func Commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	out := make([]byte, 0, len(s)+len(s)/3+1)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// PerMessageText formats a bytes-per-message figure for the text report:
// whole bytes, or "n/a" when unknown.
func PerMessageText(v *float64, unit string) string {
	if v == nil {
		return "n/a"
	}
	return strconv.FormatFloat(*v, 'f', 0, 64) + unit
}

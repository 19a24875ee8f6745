package report

import (
	"math"
	"time"
)

// TimelinePoint is one sample of a run (every loadtest.Config.SampleEvery): rates and
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
	// AckedPerSecond is the messages the consumers' acks were answered
	// acked in the interval, per second, over every group; E2EP50 and
	// E2EP99 the push commit → handler latency (ms) of the first handlings
	// in it (ConsumeReport.Latency's, per interval). Omitted without
	// consumers, the latencies also for an interval with no first
	// handling. The timeline ends with the load, before the drain.
	AckedPerSecond *float64 `json:"acked_per_second,omitempty"`
	E2EP50         *float64 `json:"e2e_p50_ms,omitempty"`
	E2EP99         *float64 `json:"e2e_p99_ms,omitempty"`
	// Backlog is each consumer group's backlog at the sample, in the
	// groups' order: the messages stored it has not acked yet. Omitted
	// without consumers, and at a sample whose cursors could not be read.
	Backlog []GroupBacklog `json:"backlog,omitempty"`
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
	// relations (log_txn_hashes, hash_blocks, hash_prints, every partition, indexes and
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
	// CacheNarrowedProbes and CacheFullProbes are the partition probes the
	// cache narrowed with a watermark and those of the whole window, since
	// each broker started, summed over the brokers that answered.
	CacheNarrowedProbes int64 `json:"cache_narrowed_probes"`
	CacheFullProbes     int64 `json:"cache_full_probes"`
	// LedgerBytes is the memory of the harness's audit ledgers (4 bits per
	// id sent plus the ids awaiting their stored frame or answer) and of the
	// consumer groups' records (16 bytes per offset delivered, in chunks of
	// 256 offsets), both outside the Go heap;
	// HarnessHeap is this process's live Go heap as the last GC marked it
	// (runtime/metrics /gc/heap/live:bytes; with --embedded the broker's
	// heap too).
	LedgerBytes int64 `json:"ledger_bytes"`
	HarnessHeap int64 `json:"harness_heap_bytes"`
}

// GroupBacklog is one consumer group's backlog at a timeline point: the
// messages stored in the run's queue past its committed cursors, leased
// ones included (the lag the console's queue page shows, summed over the
// partitions), read from the database's cursors at the sample
// (consumers.Phase.Backlog).
type GroupBacklog struct {
	Group    string `json:"group"`
	Messages int64  `json:"messages"`
}

// RSSText is the broker's RSS through format, or "n/a" when no broker's
// /metrics answered and the broker is not this process.
func (p TimelinePoint) RSSText(format func(int64) string) string {
	if !p.BrokerMetrics && p.BrokerRSS == 0 {
		return "n/a"
	}
	return format(p.BrokerRSS)
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
	m0 := Median(first)
	if m0 == 0 {
		return 0, meaningful
	}
	return math.Round(Median(lastQ)/m0*1000) / 1000, meaningful
}

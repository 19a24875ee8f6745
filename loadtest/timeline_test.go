package loadtest

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/loadtest/txnid"
	"github.com/queen-mq/queen-go/transport/client"
)

// seqBroker answers like an exact broker without remembering ids: a
// producer sends its new sequence numbers in increasing order and repeats
// only older ones, so "seq below the highest seen" is "duplicate". Message
// ids are derived from (producer, seq). It remembers, boundedly, the
// frames "stored" since the last audit pass.
type seqBroker struct {
	hi      map[int]uint64
	stored  []storedFrame
	answers int64
}

type storedFrame struct {
	seq uint64
	id  uuid.UUID
}

func seqID(prod int, seq uint64) uuid.UUID {
	var id uuid.UUID
	s := uint64(prod)<<txnid.SeqBits ^ seq
	a, b := txnid.SplitMix64(&s), txnid.SplitMix64(&s)
	for i := range 8 {
		id[i], id[8+i] = byte(a>>(8*i)), byte(b>>(8*i))
	}
	return id
}

func (f *seqBroker) send(_ context.Context, items []client.PushItem, out []result) error {
	for i, it := range items {
		prod, seq, _ := txnid.ParseTxn(it.TransactionID)
		id := seqID(prod, seq)
		if hi, ok := f.hi[prod]; !ok || seq >= hi {
			f.hi[prod] = seq + 1
			f.stored = append(f.stored, storedFrame{seq, id})
			out[i] = result{status: queen.Queued, id: id}
		} else {
			out[i] = result{status: queen.Duplicate, id: id}
		}
		f.answers++
	}
	return nil
}

func (f *seqBroker) close() {}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestLedgerMemoryFlat: millions of ids through a producer, its ledger and
// "audit passes" every few requests: the heap grows by a few bits per id,
// far below the old per-id map (about 40 bytes per id). Not parallel: it
// measures the heap.
func TestLedgerMemoryFlat(t *testing.T) {
	ids := uint64(3_000_000)
	if testing.Short() {
		ids = 500_000
	}
	cfg := DefaultConfig()
	cfg.Queue, cfg.Partitions, cfg.Batch, cfg.PayloadBytes, cfg.DupRatio = "q", 64, 2000, 0, 0.1
	parts := txnid.PartitionNames(cfg.Partitions)
	fb := &seqBroker{hi: map[int]uint64{}}
	c := &counters{}
	led := newLedger(0, cfg.Queue, parts)
	p := newProducer(0, &cfg, parts, fb, led, c)
	found := newIssues()
	pass := func() {
		// An audit pass reads what was stored since the last one.
		for _, s := range fb.stored {
			led.store(s.seq, s.id, 0, false, found)
		}
		fb.stored = fb.stored[:0]
	}
	step := func() {
		p.fill(true)
		p.handle(fb.send(context.Background(), p.items, p.results[:len(p.slots)]))
		if len(fb.stored) >= 50_000 {
			pass()
		}
	}
	// Warm up: the ring, the buffers, the maps at their working size.
	for p.seq < 200_000 {
		step()
	}
	before, seq0 := heapAfterGC(), p.seq
	for p.seq < seq0+ids {
		step()
	}
	after := heapAfterGC()
	grown := int64(after) - int64(before)
	perID := float64(grown) / float64(p.seq-seq0)
	t.Logf("%d ids: heap %d -> %d bytes, %.2f bytes per id (ledger %d bytes, %d pending)", p.seq-seq0, before, after, perID, led.bytes(), led.pending())
	require.Less(t, perID, 4.0, "a few bits per id, not a map entry")
	// The bitmap lives outside the Go heap (newChunk), so the heap above
	// says little about it: its own accounting is 4 bits per id.
	require.Less(t, float64(led.bytes())/float64(p.seq), 1.0, "4 bits per id in the bitmap")
	require.Positive(t, c.duplicate.Load(), "repeats were answered duplicate")
	require.Zero(t, found.total(), "%v", found.exampleList())
	require.Zero(t, led.issues.total(), "%v", led.issues.exampleList())
	require.Less(t, led.pending(), 60_000, "only the ids since the last pass are awaited")
	pass()
	require.Zero(t, led.pending())
	tot := led.check(found)
	require.Zero(t, found.total(), "%v", found.exampleList())
	require.Equal(t, int64(p.seq), tot.ids)
}

func TestSustainedRatio(t *testing.T) {
	pts := func(period float64, rates ...float64) []TimelinePoint {
		out := make([]TimelinePoint, len(rates))
		for i, r := range rates {
			out[i] = TimelinePoint{T: period * float64(i+1), StoredPerSecond: r}
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		points     []TimelinePoint
		ratio      float64
		meaningful bool
	}{
		{"empty", nil, 0, false},
		{"one point", pts(10, 100), 0, false},
		// 30 s: no point after the warm-up, so all of them; quarters of
		// [10, 30] are t <= 15 and t >= 25.
		{"short run", pts(10, 100, 80, 50), 0.5, false},
		// 10 min, a point a minute: the warm-up point (t=60, 1000) is
		// skipped; [120, 600]: first quarter t <= 240 (100, 100, 100),
		// last quarter t >= 480 (50, 60, 70).
		{"steady decline", pts(60, 1000, 100, 100, 100, 90, 80, 70, 50, 60, 70), 0.6, true},
		{"flat", pts(60, 5, 100, 100, 100, 100, 100, 100, 100, 100, 100), 1, true},
		{"zero start", pts(60, 5, 0, 0, 0, 100, 100, 100, 100, 100, 100), 0, true},
		// A point every 30 s: the one at t=60 covers [30, 60], inside
		// the warm-up; [90, 180]: first quarter t <= 112.5 (50), last
		// quarter t >= 157.5 (100).
		{"interval straddles warm-up", pts(30, 1, 1, 50, 1, 1, 100), 2, false},
		// 2 min: after the warm-up only t=120; below SustainedMinRun.
		{"two minutes", pts(60, 100, 80), 0, false},
		// Exactly 5 min (SustainedMinRun): meaningful; [120, 300]: first
		// quarter t <= 165 (100), last t >= 255 (80).
		{"five minutes", pts(60, 1, 100, 90, 90, 80), 0.8, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, m := SustainedRatio(tc.points)
			require.Equal(t, tc.ratio, r)
			require.Equal(t, tc.meaningful, m)
		})
	}
}

func TestTimelineJSON(t *testing.T) {
	rep := &Report{Mode: ModeBroker, Timeline: []TimelinePoint{{T: 10, StoredPerSecond: 1, ItemsPerSecond: 2, P50: 3, P99: 4,
		BrokerRSS: 5, DBBytes: 6, SidecarBytes: 7, WALBytes: 8, CacheBytes: 9, CacheEvictions: 10, CacheHydrations: 11,
		StoredMessages: 12, WALBytesPerMessage: f64(13), DBBytesPerMessage: f64(14), SidecarBytesPerMessage: f64(15)}},
		SustainedRatio: 0.9}
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var got struct {
		Timeline       []map[string]any `json:"timeline"`
		SustainedRatio *float64         `json:"sustained_ratio"`
	}
	require.NoError(t, json.Unmarshal(b, &got))
	require.NotNil(t, got.SustainedRatio)
	require.Equal(t, 0.9, *got.SustainedRatio)
	require.Len(t, got.Timeline, 1)
	want := map[string]float64{"t_s": 10, "stored_per_second": 1, "items_per_second": 2, "p50_ms": 3, "p99_ms": 4,
		"broker_rss_bytes": 5, "db_bytes": 6, "sidecar_bytes": 7, "wal_bytes": 8, "cache_bytes": 9, "cache_evictions": 10, "cache_hydrations": 11,
		"stored_messages": 12, "wal_bytes_per_message": 13, "db_bytes_per_message": 14, "sidecar_bytes_per_message": 15}
	for k, v := range want {
		require.Contains(t, got.Timeline[0], k)
		require.Equal(t, v, got.Timeline[0][k], k)
	}
	// The text report prints it for a run long enough to mean it, and only
	// then; without a broker's /metrics, rss and the cache are n/a.
	var sb strings.Builder
	rep.WriteText(&sb)
	require.NotContains(t, sb.String(), "sustained ratio")
	require.Regexp(t, `\n\s+10 .* n/a +n/a +n/a +0\.0\n`, sb.String(), "no cache figures without /metrics")
	require.Regexp(t, `\n\s+10 +1 +2 +3\.0 +4\.0 +0\.0 `, sb.String(), "the harness's own RSS (--embedded) is known")
	rep.Timeline[0].BrokerRSS = 0
	sb.Reset()
	rep.WriteText(&sb)
	require.Regexp(t, `\n\s+10 +1 +2 +3\.0 +4\.0 +n/a `, sb.String(), "no RSS at all")
	rep.Timeline[0].BrokerRSS = 5
	rep.SustainedRatioMeaningful = true
	rep.Timeline[0].BrokerMetrics = true
	sb.Reset()
	rep.WriteText(&sb)
	require.Contains(t, sb.String(), "sustained ratio 0.900")
	require.Regexp(t, `\n\s+10 +1 +2 +3\.0 +4\.0 +0\.0 .* 0\.0 +10 +11 +0\.0\n`, sb.String(), "every figure known")
}

func TestHistogram(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Millisecond)
	}
	l := h.latency()
	require.InDelta(t, 500, l.P50, 500*0.04)
	require.InDelta(t, 990, l.P99, 990*0.04)
	require.Equal(t, 1000.0, l.Max)
	require.Zero(t, quantileMS(make([]int64, histBuckets), 0.5))
	for _, us := range []int64{0, 1, 63, 64, 65, 1000, 123456, 1 << 40} {
		i := histIndex(us)
		if us < 1<<39 {
			require.InEpsilon(t, float64(max(us, 1)), max(histValue(i), 1), 0.04, "%d", us)
		}
	}
}

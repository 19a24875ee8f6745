package loadtest

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/target"
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

func (f *seqBroker) Send(_ context.Context, items []client.PushItem, out []target.Result) error {
	for i, it := range items {
		prod, seq, _ := txnid.ParseTxn(it.TransactionID)
		id := seqID(prod, seq)
		if hi, ok := f.hi[prod]; !ok || seq >= hi {
			f.hi[prod] = seq + 1
			f.stored = append(f.stored, storedFrame{seq, id})
			out[i] = target.Result{Status: queen.Queued, ID: id}
		} else {
			out[i] = target.Result{Status: queen.Duplicate, ID: id}
		}
		f.answers++
	}
	return nil
}

func (f *seqBroker) Close() {}

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
	found := report.NewFindings()
	pass := func() {
		// An audit pass reads what was stored since the last one.
		for _, s := range fb.stored {
			led.store(s.seq, s.id, 0, false, found)
		}
		fb.stored = fb.stored[:0]
	}
	step := func() {
		p.fill(true)
		p.handle(fb.Send(context.Background(), p.items, p.results[:len(p.slots)]))
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
	require.Zero(t, found.Total(), "%v", found.Examples())
	require.Zero(t, led.issues.Total(), "%v", led.issues.Examples())
	require.Less(t, led.pending(), 60_000, "only the ids since the last pass are awaited")
	pass()
	require.Zero(t, led.pending())
	tot := led.check(found)
	require.Zero(t, found.Total(), "%v", found.Examples())
	require.Equal(t, int64(p.seq), tot.ids)
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

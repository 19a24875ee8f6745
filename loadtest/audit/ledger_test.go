package audit

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/txnid"
)

// seqID is the message id an exact broker gives producer prod's id seq
// (derived, so the test keeps no map of them).
func seqID(prod int, seq uint64) uuid.UUID {
	var id uuid.UUID
	s := uint64(prod)<<txnid.SeqBits ^ seq
	a, b := txnid.SplitMix64(&s), txnid.SplitMix64(&s)
	for i := range 8 {
		id[i], id[8+i] = byte(a>>(8*i)), byte(b>>(8*i))
	}
	return id
}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestLedgerMemoryFlat: millions of ids booked as a producer books them
// (requests of 2000, a tenth repeats of recent ids answered duplicate) and
// "audit passes" every 50,000 stored frames: the heap grows by a few bits
// per id, far below a per-id map (about 40 bytes per id). Not parallel: it
// measures the heap.
func TestLedgerMemoryFlat(t *testing.T) {
	ids := uint64(3_000_000)
	if testing.Short() {
		ids = 500_000
	}
	parts := txnid.PartitionNames(64)
	led := NewLedger(0, "q", parts, false)
	found := report.NewFindings()
	rng := rand.New(rand.NewPCG(1, 2))
	var seq uint64
	var stored []uint64
	recent := make([]uint64, 0, 1<<12)
	var duplicates int64
	pass := func() {
		// An audit pass reads what was stored since the last one.
		for _, s := range stored {
			led.store(s, seqID(0, s), 0, false, found)
		}
		stored = stored[:0]
	}
	step := func() {
		for range 2000 {
			if len(recent) > 0 && rng.Float64() < 0.1 {
				s := recent[rng.IntN(len(recent))]
				want := [16]byte(seqID(0, s))
				led.Sent(s)
				led.Duplicate(s, seqID(0, s), &want)
				duplicates++
				continue
			}
			led.Sent(seq)
			led.Queued(seq, seqID(0, seq))
			stored = append(stored, seq)
			if len(recent) < cap(recent) {
				recent = append(recent, seq)
			} else {
				recent[seq%uint64(cap(recent))] = seq
			}
			seq++
		}
		if len(stored) >= 50_000 {
			pass()
		}
	}
	// Warm up: the ring, the maps at their working size.
	for seq < 200_000 {
		step()
	}
	before, seq0 := heapAfterGC(), seq
	for seq < seq0+ids {
		step()
	}
	after := heapAfterGC()
	grown := int64(after) - int64(before)
	perID := float64(grown) / float64(seq-seq0)
	t.Logf("%d ids: heap %d -> %d bytes, %.2f bytes per id (ledger %d bytes, %d pending)", seq-seq0, before, after, perID, led.Bytes(), led.pending())
	require.Less(t, perID, 4.0, "a few bits per id, not a map entry")
	// The bitmap lives outside the Go heap (newChunk), so the heap above
	// says little about it: its own accounting is 4 bits per id.
	require.Less(t, float64(led.Bytes())/float64(seq), 1.0, "4 bits per id in the bitmap")
	require.Positive(t, duplicates, "repeats were answered duplicate")
	require.Zero(t, found.Total(), "%v", found.Examples())
	require.Zero(t, led.issues.Total(), "%v", led.issues.Examples())
	require.Less(t, led.pending(), 60_000, "only the ids since the last pass are awaited")
	pass()
	require.Zero(t, led.pending())
	tot := led.check(found)
	require.Zero(t, found.Total(), "%v", found.Examples())
	require.Equal(t, int64(seq), tot.ids)
}

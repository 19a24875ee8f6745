package actors

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/rules"
)

// simDB is a model of the partitions' sidecar on a virtual clock: what the
// SQL probe would see. It checks every watermark a cache sends.
type simDB struct {
	mu    sync.Mutex
	now   time.Time
	parts map[uuid.UUID]*simPartition
	reads int
	// printsOn: compacted ranges carry fingerprints (SidecarPrints), those
	// that ended printsLag ago or more.
	printsOn   bool
	printsLag  time.Duration
	printReads int
}

type simPartition struct {
	last   int64
	window int64
	segs   []queen.SidecarSegment
	// stored: every offset and time each hash was stored at, in order.
	stored map[queen.Hash][]simFrame
}

type simFrame struct {
	offset  int64
	created time.Time
}

func newSimDB() *simDB {
	return &simDB{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), parts: map[uuid.UUID]*simPartition{}}
}

func (d *simDB) part(pid uuid.UUID) *simPartition {
	p := d.parts[pid]
	if p == nil {
		p = &simPartition{last: -1, window: 60, stored: map[queen.Hash][]simFrame{}}
		d.parts[pid] = p
	}
	return p
}

func (d *simDB) advance(by time.Duration) {
	d.mu.Lock()
	d.now = d.now.Add(by)
	d.mu.Unlock()
}

// SidecarRange is the hydration query over the model, holes included as
// persistence reports them: a Gone marker before a segment whose
// predecessor is missing (retention removed it), or for a range ending at
// upTo whose last segment is gone.
func (d *simDB) SidecarRange(_ context.Context, pid uuid.UUID, after, upTo, window int64) ([]queen.SidecarSegment, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reads++
	segs := d.part(pid).segs
	last := func(s queen.SidecarSegment) int64 { return s.First + int64(len(s.Hashes)/16) - 1 }
	var out []queen.SidecarSegment
	below := int64(-1)
	for i, s := range segs {
		if s.First > after && s.First <= upTo && s.CreatedAt.After(d.now.Add(-time.Duration(window)*time.Second)) {
			if len(out) == 0 && i > 0 {
				below = last(segs[i-1])
			}
			if s.First != below+1 {
				out = append(out, queen.SidecarSegment{Gone: true, CreatedAt: s.CreatedAt})
			}
			out = append(out, queen.SidecarSegment{First: s.First, CreatedAt: s.CreatedAt, Hashes: append([]byte(nil), s.Hashes...)})
			below = last(s)
		}
	}
	if len(out) > 0 || upTo < 0 {
		return out, nil
	}
	end := int64(-1)
	for _, s := range segs {
		if s.First <= upTo {
			end = last(s)
		}
	}
	if end < upTo {
		return []queen.SidecarSegment{{Gone: true}}, nil
	}
	return nil, nil
}

// simRange is the model's sidecar range span: fingerprints are kept per
// range of simRange, as compaction writes them.
const simRange = 10 * time.Second

// SidecarPrints is the fingerprint read over the model: with prints on,
// the ranges that ended at least printsLag ago are compacted (complete),
// the others not; with prints off no range is complete (a release before
// migration 0021 compacted them).
func (d *simDB) SidecarPrints(_ context.Context, pid uuid.UUID, window int64) (queen.SidecarPrints, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.printReads++
	cut := d.now.Add(-time.Duration(window) * time.Second)
	if !d.printsOn {
		return queen.SidecarPrints{Uncovered: cut.Add(-simRange)}, nil
	}
	complete := d.now.Add(-d.printsLag).Truncate(simRange) // ranges before it are complete
	sets := map[time.Time]*queen.PrintSet{}
	for h, frames := range d.part(pid).stored {
		for _, f := range frames {
			if !f.created.After(cut) || !f.created.Before(complete) {
				continue
			}
			lo := f.created.Truncate(simRange)
			set := sets[lo]
			if set == nil {
				set = &queen.PrintSet{Since: lo, Until: lo.Add(simRange)}
				sets[lo] = set
			}
			set.Prints = append(set.Prints, h[0:4]...)
		}
	}
	out := queen.SidecarPrints{Uncovered: complete}
	for _, set := range sets {
		out.Sets = append(out.Sets, *set)
	}
	return out, nil
}

// retain removes partition pid's segments stored at or before now - keep,
// as retention does (their hashes stay in the sidecar: a repeat inside the
// window is still a duplicate).
func (d *simDB) retain(pid uuid.UUID, keep time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.part(pid)
	k := 0
	for k < len(p.segs) && !p.segs[k].CreatedAt.After(d.now.Add(-keep)) {
		k++
	}
	p.segs = p.segs[k:]
}

// inWindow returns the offset of h's original inside the window, or -1.
func (d *simDB) inWindow(p *simPartition, h queen.Hash) int64 {
	cut := d.now.Add(-time.Duration(p.window) * time.Second)
	for _, f := range p.stored[h] {
		if f.created.After(cut) {
			return f.offset
		}
	}
	return -1
}

// store appends a segment of hashes at the allocator, stamped now.
func (d *simDB) store(p *simPartition, hashes []byte) {
	p.segs = append(p.segs, queen.SidecarSegment{First: p.last + 1, CreatedAt: d.now, Hashes: hashes})
	for i := 0; i+16 <= len(hashes); i += 16 {
		p.last++
		h := queen.Hash(hashes[i : i+16])
		p.stored[h] = append(p.stored[h], simFrame{p.last, d.now})
	}
}

// commit is the push transaction over the model: it checks the cache's
// promise (no hash outside Suspects occurs in the window at or below the
// watermark, unless the window read under the lock is wider than the one
// assumed) and gives the verdicts of SPEC.md §3.
func (d *simDB) commit(t *testing.T, b *queen.PushBatch) queen.PushOutcome {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.part(b.PartitionID)
	out := queen.PushOutcome{Results: make([]queen.Result, len(b.Items)), Window: p.window, FirstOffset: p.last + 1, LastOffset: p.last}
	vouched := b.Watermark >= 0 && p.window <= b.AssumedWindow
	var hashes []byte
	for i, it := range b.Items {
		if b.LeaderOf != nil && int(b.LeaderOf[i]) != i {
			out.Results[i] = queen.Result{Verdict: queen.Duplicate, Offset: out.Results[b.LeaderOf[i]].Offset}
			continue
		}
		orig := d.inWindow(p, it.Hash)
		sp, sus := b.Suspects[it.Hash]
		if vouched && !sus && orig >= 0 && orig <= b.Watermark {
			t.Fatalf("the cache vouched for watermark %d but %x is in the window at offset %d", b.Watermark, it.Hash, orig)
		}
		if vouched && sus && orig >= 0 && orig <= b.Watermark {
			// The suspect's span (a zero end is unbounded) must cover
			// every in-window row at or below the watermark (the probe
			// looks only there).
			cut := d.now.Add(-time.Duration(p.window) * time.Second)
			for _, f := range p.stored[it.Hash] {
				if f.created.After(cut) && f.offset <= b.Watermark && ((!sp.Since.IsZero() && f.created.Before(sp.Since)) || (!sp.Until.IsZero() && f.created.After(sp.Until))) {
					t.Fatalf("suspect %x stored at %v (offset %d) lies outside its span [%v, %v]", it.Hash, f.created, f.offset, sp.Since, sp.Until)
				}
			}
		}
		if orig >= 0 && p.window > 0 {
			out.Results[i] = queen.Result{Verdict: queen.Duplicate, Offset: orig}
			continue
		}
		out.LastOffset++
		out.Results[i] = queen.Result{Verdict: queen.Queued, Offset: out.LastOffset}
		hashes = append(hashes, it.Hash[:]...)
	}
	if out.LastOffset >= out.FirstOffset {
		out.CreatedAt = d.now
		d.store(p, hashes)
	}
	return out
}

// otherWrite stores a segment the cache does not observe (another broker).
func (d *simDB) otherWrite(pid uuid.UUID, hs []queen.Hash) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.part(pid)
	var b []byte
	for _, h := range hs {
		if d.inWindow(p, h) < 0 {
			b = append(b, h[:]...)
		}
	}
	if len(b) == 0 {
		return
	}
	d.store(p, b)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func hashOf(s string) queen.Hash { return queen.HashTxn(s) }

func batchOf(pid uuid.UUID, txns []string) *queen.PushBatch {
	b := &queen.PushBatch{PartitionID: pid}
	for _, x := range txns {
		b.Items = append(b.Items, &queen.Item{TransactionID: x, Hash: hashOf(x)})
	}
	b.LeaderOf = rules.Leaders(b.Items)
	return b
}

// push runs one push through a partition cache and the model.
func push(t *testing.T, d *simDB, pc HashCache, pid uuid.UUID, txns []string) queen.PushOutcome {
	b := batchOf(pid, txns)
	pc.Prepare(b)
	out := d.commit(t, b)
	pc.Observe(b, &out)
	return out
}

// waitHydrated waits until no partition of caches is reading the sidecar.
func waitHydrated(t *testing.T, caches []HashCache) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		busy := false
		for _, c := range caches {
			p := c.(*partitionCache)
			p.mu.Lock()
			busy = busy || p.hydrating
			p.mu.Unlock()
		}
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("hydration did not finish")
		}
		runtime.Gosched()
	}
}

// TestCacheWatermarkIsAPromise drives random pushes, repeats, writes by
// another broker, window changes, retention removing segments inside the
// window (hydration then meets holes), budget evictions and time through caches
// of several partitions, and checks every watermark against the model;
// with and without fingerprints of the compacted ranges (migration 0021),
// which hydrations read back for the holes.
func TestCacheWatermarkIsAPromise(t *testing.T) {
	for _, tc := range []struct {
		budget int64
		prints bool
	}{{512 << 20, false}, {4 << 10, false}, {1 << 10, false}, {512 << 20, true}, {4 << 10, true}} {
		budget := tc.budget
		t.Run(fmt.Sprintf("budget-%d/prints-%v", budget, tc.prints), func(t *testing.T) {
			t.Parallel()
			d := newSimDB()
			d.printsOn, d.printsLag = tc.prints, 15*time.Second
			c := NewCache(CacheConfig{BudgetBytes: budget, Source: d, ColdFor: 20 * time.Second, Logger: quiet()})
			r := rand.New(rand.NewSource(budget))
			pids := make([]uuid.UUID, 4)
			caches := make([]HashCache, 4)
			for i := range pids {
				pids[i], caches[i] = uuid.New(), c.New()
			}
			seq := 0
			for step := 0; step < 3000; step++ {
				k := r.Intn(len(pids))
				switch x := r.Intn(100); {
				case x < 75:
					var txns []string
					for n := 1 + r.Intn(8); n > 0; n-- {
						if seq > 0 && r.Intn(3) == 0 {
							txns = append(txns, fmt.Sprintf("t%d", seq-1-r.Intn(min(seq, 200))))
						} else {
							txns = append(txns, fmt.Sprintf("t%d", seq))
							seq++
						}
					}
					push(t, d, caches[k], pids[k], txns)
				case x < 82:
					d.otherWrite(pids[k], []queen.Hash{hashOf(fmt.Sprintf("t%d", seq)), hashOf(fmt.Sprintf("t%d", seq-1))})
					seq++
				case x < 84:
					d.mu.Lock()
					d.part(pids[k]).window = []int64{0, 30, 60, 120}[r.Intn(4)]
					d.mu.Unlock()
				case x < 86:
					// Retention shorter than the window: segments go while
					// their hashes may still be inside it.
					d.retain(pids[k], time.Duration(r.Intn(60))*time.Second)
				case x < 87:
					// The partition's actor stops and starts again: the new
					// cache hydrates, across holes retention left.
					caches[k].Passivate()
					caches[k] = c.New()
				case x < 99:
					d.advance(time.Duration(r.Intn(5000)) * time.Millisecond)
				default:
					waitHydrated(t, caches)
				}
				for _, pc := range caches {
					checkHeld(t, pc)
				}
			}
			st := c.Stats()
			t.Logf("%+v", st)
			require.NotZero(t, st.NarrowedProbes, "%+v", st)
			require.LessOrEqual(t, st.Bytes, budget, "%+v", st)
			if tc.prints && budget > 1<<20 {
				require.NotZero(t, st.PrintReads, "%+v", st)
			}
			if budget < 8<<10 {
				require.NotZero(t, st.Evictions, "%+v", st)
			}
		})
	}
}

// checkHeld checks that a partition cache's running totals of its
// generations' bytes and hashes (held, heldN: what it accounts on every
// commit without walking them) are what a walk over them finds.
func checkHeld(t *testing.T, hc HashCache) {
	t.Helper()
	p := hc.(*partitionCache)
	p.mu.Lock()
	defer p.mu.Unlock()
	var size, n int64
	for i := range p.gens {
		g := &p.gens[i]
		gs := int64(generationBytes)
		for j := range g.filters {
			gs += g.filters[j].bytes()
		}
		require.Equal(t, gs, g.size, "generation %d", i)
		size += gs
		n += g.n
	}
	require.Equal(t, size, p.held, "bytes of %d generations", len(p.gens))
	require.Equal(t, n, p.heldN, "hashes of %d generations", len(p.gens))
}

// TestCacheDoesNotVouchAcrossARetainedHole (SPEC.md §3, §8): retention
// removed segments whose hashes are still inside the window (a queue whose
// retentionSeconds is shorter than its dedupWindowSeconds). A cache that
// hydrates afterwards cannot read them back (persistence marks the hole
// Gone), so it probes in full until they leave the window: a repeat of one
// is still a duplicate. Then it vouches again.
func TestCacheDoesNotVouchAcrossARetainedHole(t *testing.T) {
	d := newSimDB()
	c := NewCache(CacheConfig{BudgetBytes: 512 << 20, Source: d, Logger: quiet()})
	pid, pc := uuid.New(), c.New()
	for i := range 10 {
		push(t, d, pc, pid, []string{fmt.Sprintf("t%d", i)})
		d.advance(time.Second)
	}
	d.retain(pid, 5*time.Second)       // t0..t5 go; the window is 60 s
	pc = c.New()                       // the partition activated again (another broker, a restart)
	push(t, d, pc, pid, []string{"x"}) // hydrates (-1, 9]
	waitHydrated(t, []HashCache{pc})
	b := batchOf(pid, []string{"t1"})
	pc.Prepare(b)
	require.Equal(t, int64(-1), b.Watermark, "no watermark across the hole")
	require.Equal(t, queen.Duplicate, d.commit(t, b).Results[0].Verdict)

	d.advance(61 * time.Second) // the hole left the window
	push(t, d, pc, pid, []string{"y"})
	waitHydrated(t, []HashCache{pc})
	b = batchOf(pid, []string{"z"})
	pc.Prepare(b)
	require.GreaterOrEqual(t, b.Watermark, int64(0), "vouches again")
}

// TestPartitionCacheFloor: a partition cache holding one hash accounts
// MinPartitionCacheBytes, the floor the broker's bound on active
// partitions is checked against (broker.ActivePartitionsBound).
func TestPartitionCacheFloor(t *testing.T) {
	d := newSimDB()
	c := NewCache(CacheConfig{BudgetBytes: 512 << 20, Source: d, Logger: quiet()})
	push(t, d, c.New(), uuid.New(), []string{"t0"})
	st := c.Stats()
	require.Equal(t, 1, st.Partitions, "%+v", st)
	require.Equal(t, int64(MinPartitionCacheBytes), st.Bytes, "%+v", st)
}

// TestCacheVouchesAcrossAFingerprintedHole (SPEC.md §3, §8; issue 40): as
// TestCacheDoesNotVouchAcrossARetainedHole, but the hole's ranges are
// compacted with fingerprints (migration 0021). The hydrated cache reads
// them back and vouches at once; a repeat of an id whose segment retention
// removed is a suspect looked up in its range's span only, and is still a
// duplicate; a new id is not a suspect.
func TestCacheVouchesAcrossAFingerprintedHole(t *testing.T) {
	d := newSimDB()
	d.printsOn, d.printsLag = true, 15*time.Second
	c := NewCache(CacheConfig{BudgetBytes: 512 << 20, Source: d, Logger: quiet()})
	pid, pc := uuid.New(), c.New()
	d.part(pid).window = 120
	for i := range 10 { // at 0..9 s
		push(t, d, pc, pid, []string{fmt.Sprintf("t%d", i)})
		d.advance(time.Second)
	}
	d.advance(30 * time.Second)
	for i := range 3 { // at 40..42 s
		push(t, d, pc, pid, []string{fmt.Sprintf("r%d", i)})
		d.advance(time.Second)
	}
	d.advance(30 * time.Second)        // 73 s: the ranges before 50 s are compacted
	d.retain(pid, 50*time.Second)      // t0..t9 go, r0..r2 stay; the window is 120 s
	pc = c.New()                       // the partition activated again (another broker, a restart)
	push(t, d, pc, pid, []string{"x"}) // hydrates (-1, 12]: a hole, then r0..r2
	waitHydrated(t, []HashCache{pc})
	require.Equal(t, 1, d.printReads)

	b := batchOf(pid, []string{"t3", "new"})
	pc.Prepare(b)
	require.GreaterOrEqual(t, b.Watermark, int64(0), "vouches across the fingerprinted hole")
	sp, ok := b.Suspects[hashOf("t3")]
	require.True(t, ok, "a removed segment's id is a suspect")
	require.LessOrEqual(t, sp.Until.Sub(sp.Since), 2*simRange, "looked up in its range's span, not the window")
	_, ok = b.Suspects[hashOf("new")]
	require.False(t, ok)
	out := d.commit(t, b)
	require.Equal(t, queen.Duplicate, out.Results[0].Verdict)
	require.Equal(t, queen.Queued, out.Results[1].Verdict)
	require.Equal(t, int64(1), c.Stats().PrintReads)

	// The fingerprints leave with the window.
	pc.Observe(b, &out)
	d.advance(121 * time.Second)
	push(t, d, pc, pid, []string{"y"})
	p := pc.(*partitionCache)
	p.mu.Lock()
	require.Empty(t, p.prints)
	p.mu.Unlock()
}

// TestCacheEvictsTheLeastRecentlyUsed: recency is kept the CLOCK way (a
// cache accounted again is marked, and an eviction that reaches it gives it
// a second chance), which evicts here as an LRU list would: of three caches
// that fill the budget, the one pushed to again stays, and the least
// recently used one goes when a fourth comes.
func TestCacheEvictsTheLeastRecentlyUsed(t *testing.T) {
	d := newSimDB()
	c := NewCache(CacheConfig{BudgetBytes: 3 * MinPartitionCacheBytes, Source: d, Logger: quiet()})
	pids := make([]uuid.UUID, 4)
	caches := make([]HashCache, 4)
	for i := range pids {
		pids[i], caches[i] = uuid.New(), c.New()
	}
	for i := range 3 {
		push(t, d, caches[i], pids[i], []string{fmt.Sprintf("p%d-a", i)})
	}
	require.Zero(t, c.Stats().Evictions, "three fit")
	push(t, d, caches[0], pids[0], []string{"p0-b"})
	push(t, d, caches[3], pids[3], []string{"p3-a"})
	require.Equal(t, int64(1), c.Stats().Evictions, "the fourth is one too many")
	evicted := func(i int) bool {
		p := caches[i].(*partitionCache)
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.cold
	}
	require.False(t, evicted(0), "pushed to again: kept")
	require.True(t, evicted(1), "the least recently used goes")
	require.False(t, evicted(2))
	require.False(t, evicted(3))
}

// TestCacheDegradesWithoutThrashing: 64 equally busy partitions whose
// windows need about four times the budget. Over many windows each partition
// is read back from the sidecar at most once per window, the budget holds,
// and the partitions that fit keep narrowing their probes.
func TestCacheDegradesWithoutThrashing(t *testing.T) {
	d := newSimDB()
	const parts, window, perPush = 64, 30, 20
	// One push per partition per simulated second, 20 new ids each: a
	// window holds 1,200 hashes per partition (~2.6 KB of filters).
	c := NewCache(CacheConfig{BudgetBytes: 48 << 10, Source: d, Logger: quiet()})
	pids := make([]uuid.UUID, parts)
	caches := make([]HashCache, parts)
	for i := range pids {
		pids[i], caches[i] = uuid.New(), c.New()
		d.part(pids[i]).window = window
	}
	seq := 0
	const seconds = 8 * window
	var maxBytes int64
	for s := 0; s < seconds; s++ {
		for k := range pids {
			txns := make([]string, 0, perPush+1)
			for i := 0; i < perPush; i++ {
				txns = append(txns, fmt.Sprintf("t%d", seq))
				seq++
			}
			txns = append(txns, fmt.Sprintf("t%d", seq-perPush*parts/2)) // a repeat
			push(t, d, caches[k], pids[k], txns)
		}
		maxBytes = max(maxBytes, c.Stats().Bytes)
		d.advance(time.Second)
	}
	st := c.Stats()
	t.Logf("%+v (max bytes %d)", st, maxBytes)
	require.LessOrEqual(t, maxBytes, int64(48<<10))
	// At most one read-back per partition per window (plus the first).
	require.LessOrEqual(t, st.Hydrations, int64(parts*(seconds/window+1)), "%+v", st)
	require.Zero(t, st.GapReads, "%+v", st)
	// Evictions: a partition is cold for a window after each one.
	require.LessOrEqual(t, st.Evictions, int64(parts*(seconds/window+1)), "%+v", st)
	require.NotZero(t, st.NarrowedProbes, "%+v", st)
	require.NotZero(t, st.Partitions, "%+v", st)
}

// TestCacheAccountingMatchesTheHeap: the bytes the cache accounts are the
// Go heap it adds, within 25%. The heap is read around the cache's release
// (live heap with it minus live heap without it, two forced collections
// apart), so garbage or goroutines left by earlier tests weigh little; the
// measurement is taken up to three times and the closest one is asserted
// (an accounting that is off fails all three).
func TestCacheAccountingMatchesTheHeap(t *testing.T) {
	const parts, pushes, perPush = 100, 50, 200
	measure := func() (accounted, entries, heap int64) {
		d := newSimDB()
		c := NewCache(CacheConfig{BudgetBytes: 1 << 30, Source: d, Logger: quiet()})
		caches := make([]HashCache, parts)
		pids := make([]uuid.UUID, parts)
		for i := range caches {
			caches[i], pids[i] = c.New(), uuid.New()
		}
		seq := 0
		for r := 0; r < pushes; r++ {
			for k := range caches {
				b := &queen.PushBatch{PartitionID: pids[k]}
				out := queen.PushOutcome{Results: make([]queen.Result, perPush), Window: 3600, FirstOffset: int64(r * perPush), LastOffset: int64(r*perPush + perPush - 1), CreatedAt: d.now}
				for i := 0; i < perPush; i++ {
					b.Items = append(b.Items, &queen.Item{Hash: hashOf(fmt.Sprintf("h%d", seq))})
					out.Results[i] = queen.Result{Verdict: queen.Queued, Offset: int64(r*perPush + i)}
					seq++
				}
				caches[k].Prepare(b)
				caches[k].Observe(b, &out)
			}
			d.now = d.now.Add(time.Second)
		}
		st := c.Stats()
		var with, without runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&with)
		runtime.KeepAlive(caches)
		runtime.KeepAlive(c)
		caches, c = nil, nil //nolint:ineffassign // for the reader: the heap measured next is the one without them (KeepAlive above ends their life)
		runtime.GC()
		runtime.ReadMemStats(&without)
		return st.Bytes, st.Entries, int64(with.HeapAlloc) - int64(without.HeapAlloc)
	}
	best := math.Inf(1)
	for attempt := 0; attempt < 3; attempt++ {
		accounted, entries, heap := measure()
		t.Logf("accounted %d bytes for %d hashes (%.2f B/hash), heap held %d", accounted, entries, float64(accounted)/float64(entries), heap)
		require.Equal(t, int64(parts*pushes*perPush), entries)
		best = math.Min(best, math.Abs(float64(heap-accounted))/float64(accounted))
		if best <= 0.25 {
			break
		}
	}
	require.LessOrEqual(t, best, 0.25, "accounted bytes within 25%% of the heap the cache holds")
}

// TestCacheColdAfterEvictionVouchesOnlyOnceTheUnknownLeftTheWindow: a
// partition re-based without a read-back sends watermark -1 until what it
// does not know is older than the window.
func TestCacheColdAfterEvictionVouchesOnlyOnceTheUnknownLeftTheWindow(t *testing.T) {
	d := newSimDB()
	c := NewCache(CacheConfig{BudgetBytes: 1 << 20, Source: d, Logger: quiet()})
	pid := uuid.New()
	pc := c.New()
	push(t, d, pc, pid, []string{"a"})
	p := pc.(*partitionCache)
	waitHydrated(t, []HashCache{pc})
	// Evict with no room to read back, so the next base starts unknown.
	c.mu.Lock()
	p.lastSize = 2 << 20
	c.mu.Unlock()
	p.evict()
	d.advance(61 * time.Second) // one window: cold no longer
	push(t, d, pc, pid, []string{"b"})
	b := batchOf(pid, []string{"c"})
	pc.Prepare(b)
	require.EqualValues(t, -1, b.Watermark, "the part before the re-base is unknown and inside the window")
	d.advance(59 * time.Second)
	push(t, d, pc, pid, []string{"d"})
	pc.Prepare(b)
	require.EqualValues(t, -1, b.Watermark)
	d.advance(2 * time.Second)
	push(t, d, pc, pid, []string{"e"})
	pc.Prepare(b)
	require.EqualValues(t, 3, b.Watermark, "the unknown part left the window")
	require.EqualValues(t, 1, c.Stats().Evictions)
}

// BenchmarkCacheSteadyState pushes 100 new ids per commit into one
// partition at a constant rate for three windows and reports the memory per
// in-window hash once generations expire, and the cost of Prepare+Observe.
func BenchmarkCacheSteadyState(b *testing.B) {
	d := newSimDB()
	c := NewCache(CacheConfig{BudgetBytes: 1 << 30, Source: d, Logger: quiet()})
	pc := c.New()
	pid := uuid.New()
	const window, perCommit, commitsPerSecond = 600, 100, 10
	items := make([]*queen.Item, perCommit)
	for i := range items {
		items[i] = &queen.Item{}
	}
	commit := func(k int) {
		bt := &queen.PushBatch{PartitionID: pid, Items: items}
		out := queen.PushOutcome{Results: make([]queen.Result, perCommit), Window: window, FirstOffset: int64(k * perCommit), LastOffset: int64(k*perCommit + perCommit - 1), CreatedAt: d.now}
		for i := range items {
			binary.BigEndian.PutUint64(items[i].Hash[:8], uint64(k*perCommit+i)*0x9E3779B97F4A7C15)
			binary.BigEndian.PutUint64(items[i].Hash[8:], uint64(k*perCommit+i)*0xC2B2AE3D27D4EB4F)
			out.Results[i] = queen.Result{Verdict: queen.Queued, Offset: int64(k*perCommit + i)}
		}
		pc.Prepare(bt)
		pc.Observe(bt, &out)
		d.now = d.now.Add(time.Second / commitsPerSecond)
	}
	k := 0
	for ; k < 3*window*commitsPerSecond; k++ {
		commit(k)
	}
	st := c.Stats()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		commit(k)
		k++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perCommit), "ns/item")
	b.ReportMetric(float64(st.Bytes)/float64(window*commitsPerSecond*perCommit), "bytes/in-window-hash")
	b.ReportMetric(float64(st.Hits)/float64(st.NarrowedProbes*perCommit), "false-positives/item")
}

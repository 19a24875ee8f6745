package actors

import (
	"container/list"
	"context"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
)

// HashCache is a partition actor's in-memory view of its window (SPEC.md §8).
// Its only output is the watermark (with the suspects it must not vouch
// for) set on each push batch; it never decides a verdict: the SQL probe
// under the row lock does.
type HashCache interface {
	// Prepare sets b.Watermark, b.Suspects and b.AssumedWindow: -1 when the
	// cache cannot vouch for anything.
	Prepare(b *queen.PushBatch)
	// Observe records a committed batch's outcome.
	Observe(b *queen.PushBatch, out *queen.PushOutcome)
	// Forget drops everything (after an error whose outcome is unknown).
	Forget()
	// Passivate drops the partition's knowledge and gives its memory back
	// to the budget: its actor is stopping for being idle. The cache is not
	// used afterwards.
	Passivate()
	// StartCold, called before the first Prepare, makes a reactivated
	// partition's cache start like an evicted one: cold (watermark -1, no
	// read of the window) for ColdFor after its first commit.
	StartCold()
}

// noCache never vouches, so every probe covers the whole window.
type noCache struct{}

func (noCache) Prepare(b *queen.PushBatch)                   { b.Watermark, b.Suspects = -1, nil }
func (noCache) Observe(*queen.PushBatch, *queen.PushOutcome) {}
func (noCache) Forget()                                      {}
func (noCache) Passivate()                                   {}
func (noCache) StartCold()                                   {}

// SidecarSource is where partition caches hydrate from (persistence.Store).
type SidecarSource interface {
	SidecarRange(ctx context.Context, pid uuid.UUID, after, upTo, windowSeconds int64) ([]queen.SidecarSegment, error)
	// SidecarPrints returns the partition's fingerprints of the sidecar's
	// ranges in the window: read when SidecarRange met segments retention
	// removed inside it.
	SidecarPrints(ctx context.Context, pid uuid.UUID, windowSeconds int64) (queen.SidecarPrints, error)
}

// CacheConfig configures the process-wide dedup cache (SPEC.md §8).
type CacheConfig struct {
	// BudgetBytes bounds the memory of every partition's cache together
	// (QUEEN_DEDUP_CACHE_MB); beyond it whole partition caches are evicted
	// (those still warming first, then the least recently used) and stay
	// cold for ColdFor. Default 512 MiB.
	BudgetBytes int64
	// Disabled starts the cache switched off (QUEEN_DEDUP_CACHE=off).
	Disabled bool
	// Source hydrates partition caches (required).
	Source SidecarSource
	// HydrateTimeout bounds one hydration query (one page). Default 60s.
	HydrateTimeout time.Duration
	// ColdFor is how long a partition whose cache was evicted stays without
	// one, measured on PostgreSQL's clock by the partition's own commits.
	// 0 (the production value) means one window: a partition is re-read from
	// the sidecar at most once per window, whatever the budget. Tests
	// shorten it.
	ColdFor time.Duration
	// MaxHydrations bounds the hydrations running at once (each reads one
	// partition's window from the sidecar in pages). Default 2.
	MaxHydrations int
	Logger        *slog.Logger
}

// Cache is the process-wide dedup cache: it hands each partition actor its
// own cache (New), keeps their total memory under the budget, and has a kill
// switch (SetEnabled). It is safe for concurrent use.
//
// A partition's cache holds the partition's in-window transactionId hashes
// as Bloom filters (filter, about 2 bytes per hash) in time generations of
// window/8, dropped whole once older than the window on PostgreSQL's clock.
// It is lossy: a hash a filter may hold is a suspect, looked up by the SQL
// probe in the whole window; a hash no filter holds is certainly not in the
// window at or below the watermark, so the probe skips it. A cold, evicted,
// warming or disabled cache sends watermark -1, and the verdicts are the
// same.
type Cache struct {
	cfg     CacheConfig
	enabled atomic.Bool
	// hydrating bounds concurrent hydrations (MaxHydrations tokens).
	hydrating chan struct{}
	// The fields above are read by every Prepare and Observe; those below
	// are written by them. The pad keeps them on separate cache lines, so
	// that the writes of one core do not evict what the others read.
	_ [64]byte

	mu      sync.Mutex
	lru     *list.List // of *partitionCache holding memory; front = most recently placed (used marks a later use: account)
	total   int64      // bytes accounted
	entries int64      // hashes accounted

	hits, evictions, fullProbes, narrowedProbes, hydrations, gapReads, printReads, hydrationErrors atomic.Int64
}

// NewCache returns the process-wide cache.
func NewCache(cfg CacheConfig) *Cache {
	if cfg.BudgetBytes <= 0 {
		cfg.BudgetBytes = 512 << 20
	}
	if cfg.HydrateTimeout <= 0 {
		cfg.HydrateTimeout = 60 * time.Second
	}
	if cfg.MaxHydrations <= 0 {
		cfg.MaxHydrations = 2
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Cache{cfg: cfg, lru: list.New(), hydrating: make(chan struct{}, cfg.MaxHydrations)}
	c.enabled.Store(!cfg.Disabled)
	return c
}

// New returns a new partition cache (Config.NewCache).
func (c *Cache) New() HashCache {
	return &partitionCache{c: c}
}

// SetEnabled is the kill switch: off drops every partition's cache at once
// and every later push probes the whole window; on lets them warm again.
func (c *Cache) SetEnabled(on bool) {
	c.enabled.Store(on)
	if on {
		return
	}
	for _, p := range c.holding() {
		p.mu.Lock()
		p.reset()
		p.mu.Unlock()
		p.c.account(p, 0, 0, false)
	}
}

// Enabled reports the kill switch.
func (c *Cache) Enabled() bool { return c.enabled.Load() }

// CacheStats is the cache's state for /health and metrics.
type CacheStats struct {
	Enabled    bool `json:"enabled"`
	Partitions int  `json:"partitions"`
	// Bytes is the memory the partitions' caches hold (filters and their
	// bookkeeping), within BudgetBytes.
	Bytes int64 `json:"bytes"`
	// Entries is the hashes held (in-window hashes, plus those of
	// generations not yet expired).
	Entries     int64 `json:"entries"`
	BudgetBytes int64 `json:"budgetBytes"`
	// Hits counts incoming hashes the cache may have seen (suspects, looked
	// up in the window): repeats and the filters' false positives.
	Hits int64 `json:"hits"`
	// Evictions counts partition caches dropped to keep the budget.
	Evictions int64 `json:"evictions"`
	// FullProbes counts partition probes sent with watermark -1 (whole window).
	FullProbes int64 `json:"fullProbes"`
	// NarrowedProbes counts partition probes sent with a watermark.
	NarrowedProbes int64 `json:"narrowedProbes"`
	// Hydrations counts partition caches filled with a whole window read
	// from the sidecar (at a partition's first commit on this broker, or
	// after a cold period when the budget has room).
	Hydrations int64 `json:"hydrations"`
	// GapReads counts sidecar reads of segments others wrote between two of
	// this broker's commits (other brokers, transactions, lost outcomes).
	GapReads int64 `json:"gapReads"`
	// PrintReads counts hydrations that read back, as fingerprints, the
	// hashes of segments retention removed inside the window.
	PrintReads      int64 `json:"printReads"`
	HydrationErrors int64 `json:"hydrationErrors"`
}

// Stats returns the cache's counters and size.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	s := CacheStats{Partitions: c.lru.Len(), Bytes: c.total, Entries: c.entries}
	c.mu.Unlock()
	s.Enabled = c.enabled.Load()
	s.BudgetBytes = c.cfg.BudgetBytes
	s.Hits, s.Evictions = c.hits.Load(), c.evictions.Load()
	s.FullProbes, s.NarrowedProbes = c.fullProbes.Load(), c.narrowedProbes.Load()
	s.Hydrations, s.GapReads, s.HydrationErrors = c.hydrations.Load(), c.gapReads.Load(), c.hydrationErrors.Load()
	s.PrintReads = c.printReads.Load()
	return s
}

// evictScan bounds how far from the least recently used end an eviction
// looks for a partition that is still warming.
const evictScan = 64

// account sets p's accounted size, hashes and warmth, and evicts while the
// total is over the budget: first a partition cache that is still warming
// (it cannot vouch yet, so dropping it costs no narrowed probe), among the
// least recently used, else the least recently used (p itself last).
//
// Recency is kept the CLOCK way: a cache accounted again is marked used,
// not moved, and an eviction that reaches a used one clears the mark and
// moves it to the front instead (a second chance). With traffic spread over
// many partitions, moving the cache to the front on every commit touched
// two more list elements that were cold in the CPU's caches.
func (c *Cache) account(p *partitionCache, size, entries int64, warm bool) {
	c.mu.Lock()
	if p.gone {
		// Passivated: a hydration that was under way must not bring it
		// back into the budget.
		size, entries, warm = 0, 0, false
	}
	c.total += size - p.accounted
	c.entries += entries - p.entries
	p.accounted, p.entries, p.warm = size, entries, warm
	switch {
	case size > 0 && p.elem == nil:
		p.elem, p.used = c.lru.PushFront(p), false
	case size > 0:
		p.used = true
	case p.elem != nil:
		c.lru.Remove(p.elem)
		p.elem = nil
	}
	var victims []*partitionCache
	for c.total > c.cfg.BudgetBytes && c.lru.Len() > 0 {
		e := c.lru.Back()
		for n := c.lru.Len(); n > 0 && e.Value.(*partitionCache).used; n-- {
			e.Value.(*partitionCache).used = false
			c.lru.MoveToFront(e)
			e = c.lru.Back()
		}
		for i, x := 0, e; i < evictScan && x != nil; i, x = i+1, x.Prev() {
			if !x.Value.(*partitionCache).warm {
				e = x
				break
			}
		}
		v := e.Value.(*partitionCache)
		c.lru.Remove(e)
		v.elem = nil
		c.total -= v.accounted
		c.entries -= v.entries
		v.lastSize = v.accounted
		v.accounted, v.entries = 0, 0
		victims = append(victims, v)
	}
	c.mu.Unlock()
	for _, v := range victims {
		v.evict()
	}
}

// Age moves the cache's clock readings of the given partitions back by d:
// what tests that move the stored created_at of those partitions back by d
// (to simulate d passing on PostgreSQL's clock) must do on every broker,
// since a suspect's Span is read from them (queen.Span). move runs
// the database change while the partitions' caches are held: a read of the
// sidecar under way (a hydration or a gap read, which runs in the
// background and may straddle the change) is abandoned and the partition
// starts again, so no reading is moved twice or not at all. The caller
// must have no push to those partitions in flight. It returns move's error
// (the clock readings are then left unmoved). Production code never moves
// created_at and never calls it.
func Age(caches []*Cache, pids []uuid.UUID, d time.Duration, move func() error) error {
	want := make(map[uuid.UUID]bool, len(pids))
	for _, id := range pids {
		want[id] = true
	}
	var held []*partitionCache
	for _, c := range caches {
		for _, p := range c.holding() {
			p.mu.Lock()
			if !want[p.pid] {
				p.mu.Unlock()
				continue
			}
			if p.hydrating {
				p.reset()
			}
			held = append(held, p)
		}
	}
	err := move()
	for _, p := range held {
		if err == nil {
			for i := range p.gens {
				g := &p.gens[i]
				g.start, g.newest = g.start.Add(-d), g.newest.Add(-d)
			}
			for i := range p.prints {
				p.prints[i].since, p.prints[i].until = p.prints[i].since.Add(-d), p.prints[i].until.Add(-d)
			}
			p.newest = p.newest.Add(-d)
			if !p.unknownUntil.IsZero() {
				p.unknownUntil = p.unknownUntil.Add(-d)
			}
			if !p.coldUntil.IsZero() {
				p.coldUntil = p.coldUntil.Add(-d)
			}
		}
		p.mu.Unlock()
	}
	return err
}

// holding returns the partition caches that hold memory (the LRU list).
func (c *Cache) holding() []*partitionCache {
	c.mu.Lock()
	defer c.mu.Unlock()
	all := make([]*partitionCache, 0, c.lru.Len())
	for e := c.lru.Front(); e != nil; e = e.Next() {
		all = append(all, e.Value.(*partitionCache))
	}
	return all
}

// room reports whether the budget has room to read p's window back: the
// size p had when it was last evicted (any size if it never was).
func (c *Cache) room(p *partitionCache) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return p.lastSize == 0 || c.total+p.lastSize <= c.cfg.BudgetBytes
}

// generation holds the hashes of the segments stored in one span of time
// (window/8), until the newest of them is older than the window.
//
// A partition's generations and a generation's filters are held by value
// (partitionCache.gens, filters): with traffic spread over many
// partitions, each message's Prepare and Observe find the partition's
// cache cold in the CPU's caches, and every pointer followed between the
// partition and a filter's blocks was one more miss.
type generation struct {
	start, newest time.Time // created_at of its oldest and newest segment
	filters       []filter  // the last one is being filled
	n             int64
	size          int64 // generationBytes and its filters' bytes
}

// generationBytes is a generation's fixed cost beside its filters.
const generationBytes = 96

func newGeneration(t time.Time, keys int) generation {
	f := newFilter(keys)
	return generation{start: t, newest: t, filters: []filter{f}, size: generationBytes + f.bytes()}
}

// add adds h and returns the bytes the generation grew by (a new filter,
// twice the last one's capacity, once the last one is full).
func (g *generation) add(h *queen.Hash) int64 {
	var grew int64
	f := &g.filters[len(g.filters)-1]
	if f.full() {
		g.filters = append(g.filters, newFilter(2*f.limit))
		f = &g.filters[len(g.filters)-1]
		grew = f.bytes()
		g.size += grew
	}
	f.add(h)
	g.n++
	return grew
}

// partitionCache is one partition's cache. Knowledge: every hash stored in
// the partition at offsets up to seen inside the window, except those stored
// at or before unknownUntil, once the gaps (segments written by others:
// transactions, other brokers, commits whose outcome was lost) are read.
// It vouches (sends a watermark) only while nothing unknown can still be in
// the window: unknownUntil <= newest - window, where newest is the newest
// commit's created_at (PostgreSQL's clock; a probe's clock is later).
//
// Every active partition has one, so its fields are ordered to pack (256
// bytes, partitionBytes).
type partitionCache struct {
	c *Cache

	// guarded by c.mu (and warm and gone below)
	elem      *list.Element
	accounted int64
	entries   int64
	lastSize  int64 // accounted when last evicted: the room a re-hydration needs

	mu   sync.Mutex
	pid  uuid.UUID
	gens []generation // ascending newest
	// held and heldN are the bytes and hashes of gens (their size and n
	// summed), kept as gens change so that accounting a commit does not
	// walk them.
	held, heldN  int64
	prints       []printSet // of segments retention removed inside the window
	gaps         [][2]int64 // (after, upTo] ranges still to read
	seen         int64      // last offset known: the end of the last observed commit
	window       int64      // seconds the knowledge covers
	epoch        uint64
	newest       time.Time // the newest commit's created_at
	unknownUntil time.Time // zero: nothing unknown
	coldUntil    time.Time
	based        bool // knowledge started for this epoch
	hydrating    bool
	// cold: evicted; no knowledge is gathered until newest reaches coldUntil.
	cold bool

	// guarded by c.mu
	warm bool
	gone bool // passivated: accounts nothing from now on
	used bool // accounted since an eviction last passed it (account)
}

func (p *partitionCache) Prepare(b *queen.PushBatch) {
	b.Watermark, b.Suspects, b.AssumedWindow = -1, nil, 0
	if !p.c.enabled.Load() {
		p.c.fullProbes.Add(1)
		return
	}
	p.mu.Lock()
	ready := p.vouches() && p.pid == b.PartitionID
	hits := 0
	if ready {
		b.Watermark, b.AssumedWindow = p.seen, p.window
		for i := range b.Items {
			if b.LeaderOf != nil && int(b.LeaderOf[i]) != i {
				continue
			}
			h := &b.Items[i].Hash
			if sp, ok := p.mayHave(h); ok {
				if b.Suspects == nil {
					b.Suspects = map[queen.Hash]queen.Span{}
				}
				b.Suspects[*h] = sp
				hits++
			}
		}
	}
	p.mu.Unlock()
	if ready {
		p.c.narrowedProbes.Add(1)
		p.c.hits.Add(int64(hits))
	} else {
		p.c.fullProbes.Add(1)
	}
}

// vouches reports whether the knowledge is complete for the window.
func (p *partitionCache) vouches() bool {
	return p.based && !p.hydrating && len(p.gaps) == 0 &&
		(p.unknownUntil.IsZero() || !p.unknownUntil.After(p.newest.Add(-time.Duration(p.window)*time.Second)))
}

// mayHave tests every generation and reports whether one may hold h, with
// the span of created_at covering all that may (a row holding h inside the
// window is in one of them: filters have no false negatives, and each
// generation's start and newest bound the created_at of what it holds).
func (p *partitionCache) mayHave(h *queen.Hash) (queen.Span, bool) {
	var sp queen.Span
	found := false
	widen := func(since, until time.Time) {
		if !found || since.Before(sp.Since) {
			sp.Since = since
		}
		if !found || until.After(sp.Until) {
			sp.Until = until
		}
		found = true
	}
	for i := range p.gens {
		g := &p.gens[i]
		for j := range g.filters {
			if g.filters[j].test(h) {
				widen(g.start, g.newest)
				break
			}
		}
	}
	for i := range p.prints {
		if ps := &p.prints[i]; ps.test(h) {
			widen(ps.since, ps.until)
		}
	}
	return sp, found
}

func (p *partitionCache) Observe(b *queen.PushBatch, out *queen.PushOutcome) {
	if !p.c.enabled.Load() {
		return
	}
	wrote := out.LastOffset >= out.FirstOffset
	p.mu.Lock()
	if wrote && out.CreatedAt.After(p.newest) {
		p.newest = out.CreatedAt
	}
	prevLast := out.FirstOffset - 1
	if p.based && (b.PartitionID != p.pid || out.Window > p.window) {
		// A new partition id (its queue was deleted and recreated), or a
		// window wider than the knowledge covers: start again.
		p.reset()
	}
	if p.cold && p.coldUntil.IsZero() && !p.newest.IsZero() {
		// Started cold (StartCold): the cold period starts at the first
		// clock reading.
		p.coldUntil = p.newest.Add(p.coldFor(out.Window))
	}
	if p.cold && !p.coldUntil.IsZero() && !p.newest.Before(p.coldUntil) {
		p.cold = false
	}
	if p.cold || (!p.based && !wrote) {
		// Cold after an eviction; or nothing written, so no clock reading
		// to start knowledge from: wait for a commit that writes.
		p.mu.Unlock()
		return
	}
	start := false
	switch {
	case !p.based:
		p.based, p.pid, p.window, p.seen = true, b.PartitionID, out.Window, prevLast
		if prevLast >= 0 {
			if p.c.room(p) {
				p.gaps = append(p.gaps, [2]int64{-1, prevLast})
			} else {
				// No room to read the window back: what came before this
				// commit stays unknown until it leaves the window.
				p.unknownUntil = out.CreatedAt
			}
		}
	case prevLast != p.seen:
		// Others wrote (p.seen, prevLast]: learn it from the sidecar.
		p.gaps = append(p.gaps, [2]int64{p.seen, prevLast})
	}
	if len(p.gaps) > 0 && !p.hydrating {
		p.hydrating, start = true, true
	}
	if wrote {
		if p.window > 0 {
			g, fresh := p.genAt(&p.gens, out.CreatedAt)
			if fresh {
				p.held += g.size
			}
			for i, r := range out.Results {
				if r.Verdict == queen.Queued {
					p.held += g.add(&b.Items[i].Hash)
					p.heldN++
				}
			}
		}
		p.seen = out.LastOffset
		p.prune()
	} else {
		p.seen = prevLast
	}
	epoch, size, n, warm := p.epoch, p.size(), p.count(), p.vouches()
	p.mu.Unlock()
	p.c.account(p, size, n, warm)
	if start {
		go p.hydrate(epoch)
	}
}

// genAt returns the generation of *gens (ascending time) that a segment
// stored at t goes to: the newest one while t is within its span, else a new
// one sized like the one before (fresh: appended). The pointer is into
// *gens: valid until it is appended to again.
func (p *partitionCache) genAt(gens *[]generation, t time.Time) (g *generation, fresh bool) {
	if k := len(*gens); k > 0 {
		g := &(*gens)[k-1]
		if t.Sub(g.start) < p.span() {
			if t.After(g.newest) {
				g.newest = t
			}
			if t.Before(g.start) {
				// Out of order (a clock step back): start stays the
				// oldest created_at it holds (Span relies on it).
				g.start = t
			}
			return g, false
		}
	}
	// The first filter is sized for the hashes of the generation before.
	keys := filterMinKeys
	if k := len(*gens); k > 0 {
		keys = int((*gens)[k-1].n + (*gens)[k-1].n/4)
	}
	*gens = append(*gens, newGeneration(t, keys))
	return &(*gens)[len(*gens)-1], true
}

// span is a generation's length of time: an eighth of the window.
func (p *partitionCache) span() time.Duration {
	return max(time.Duration(p.window)*time.Second/8, time.Second)
}

// Forget is called after a commit failed. Nothing needs forgetting: a commit
// whose outcome was lost shows up as a gap at the next commit, and the
// watermark stays below it until then.
func (p *partitionCache) Forget() {}

// evict drops the knowledge after a budget eviction and keeps the partition
// cold for ColdFor (one window by default).
func (p *partitionCache) evict() {
	p.mu.Lock()
	p.reset()
	p.cold, p.coldUntil = true, p.newest.Add(p.coldFor(p.window))
	p.mu.Unlock()
	p.c.evictions.Add(1)
	p.c.account(p, 0, 0, false)
}

// coldFor is how long an evicted or reactivated partition stays cold:
// ColdFor, else one window of window seconds.
func (p *partitionCache) coldFor(window int64) time.Duration {
	if p.c.cfg.ColdFor > 0 {
		return p.c.cfg.ColdFor
	}
	return time.Duration(window) * time.Second
}

// Passivate drops the knowledge (a hydration under way is abandoned: the
// epoch moves) and the accounted memory; the partition actor is stopping.
func (p *partitionCache) Passivate() {
	p.c.mu.Lock()
	p.gone = true
	p.c.mu.Unlock()
	p.mu.Lock()
	p.reset()
	p.mu.Unlock()
	p.c.account(p, 0, 0, false)
}

// StartCold makes the cache cold until ColdFor after the first commit that
// writes (its created_at is the first clock reading it gets): a
// reactivated partition answers its first pushes with full probes instead
// of re-reading its window, like a partition evicted for the budget, and
// is rebuilt only if it is still pushed to after that.
func (p *partitionCache) StartCold() {
	p.mu.Lock()
	p.cold, p.coldUntil = true, time.Time{}
	p.mu.Unlock()
}

func (p *partitionCache) reset() {
	p.gens, p.prints = nil, nil
	p.held, p.heldN = 0, 0
	p.based, p.gaps, p.hydrating = false, nil, false
	p.unknownUntil = time.Time{}
	p.epoch++
}

// partitionBytes is a partition cache's fixed cost while it holds knowledge.
const partitionBytes = 256

// MinPartitionCacheBytes is the least a partition cache holding knowledge
// accounts within the cache's budget (QUEEN_DEDUP_CACHE_MB): its record,
// one generation and one filter of one 64-byte block, 480 bytes. Every
// active partition pushed to holds at least this much, so a budget holds at
// most BudgetBytes ÷ this many active partitions' caches before it evicts.
const MinPartitionCacheBytes = partitionBytes + generationBytes + 64 + filterStructBytes

func (p *partitionCache) size() int64 {
	if !p.based {
		return 0
	}
	n := int64(partitionBytes) + p.held
	for i := range p.prints {
		n += p.prints[i].bytes()
	}
	return n
}

func (p *partitionCache) count() int64 {
	n := p.heldN
	for i := range p.prints {
		n += int64(len(p.prints[i].keys))
	}
	return n
}

// prune drops the generations whose newest segment is out of the window for
// every later probe: stored at or before newest - window.
func (p *partitionCache) prune() {
	cut := p.newest.Add(-time.Duration(p.window) * time.Second)
	k := 0
	for k < len(p.gens) && !p.gens[k].newest.After(cut) {
		p.held -= p.gens[k].size
		p.heldN -= p.gens[k].n
		p.gens[k] = generation{}
		k++
	}
	p.gens = p.gens[k:]
	k = 0
	for k < len(p.prints) && !p.prints[k].until.After(cut) {
		k++
	}
	p.prints = p.prints[k:]
}

// hydratePage is the offsets one hydration query covers (about 1 MiB of
// hashes at most).
const hydratePage = 1 << 16

// hydrate reads the gaps of epoch from the sidecar, one page at a time,
// accounting as it grows: a partition too large for the budget is evicted
// (and its hydration abandoned) early.
func (p *partitionCache) hydrate(epoch uint64) {
	p.c.hydrating <- struct{}{}
	defer func() { <-p.c.hydrating }()
	for {
		p.mu.Lock()
		if p.epoch != epoch {
			p.mu.Unlock()
			return
		}
		if len(p.gaps) == 0 {
			p.hydrating = false
			size, n, warm := p.size(), p.count(), p.vouches()
			p.mu.Unlock()
			p.c.account(p, size, n, warm)
			return
		}
		g, pid, window := p.gaps[0], p.pid, p.window
		p.mu.Unlock()
		if g[0] < 0 {
			p.c.hydrations.Add(1)
		} else {
			p.c.gapReads.Add(1)
		}
		var (
			read []generation
			// hole: retention removed segments of the gap inside the
			// window, stored at or before holeUntil (zero while only an
			// unbounded hole was met: the next segment read bounds it).
			hole, unbounded bool
			holeUntil       time.Time
		)
		for after := g[0]; after < g[1]; {
			upTo := min(g[1], after+hydratePage)
			ctx, cancel := context.WithTimeout(context.Background(), p.c.cfg.HydrateTimeout)
			segs, err := p.c.cfg.Source.SidecarRange(ctx, pid, after, upTo, window)
			cancel()
			p.mu.Lock()
			if p.epoch != epoch {
				p.mu.Unlock()
				return
			}
			if err != nil {
				p.c.hydrationErrors.Add(1)
				p.c.cfg.Logger.Warn("dedup cache hydration failed; the partition probes its whole window until the next try", "partition", pid, "err", err)
				p.reset() // the next commit starts again
				p.mu.Unlock()
				p.c.account(p, 0, 0, false)
				return
			}
			for _, sg := range segs {
				if sg.Gone {
					// Retention removed segments whose hashes may still be
					// inside the window: read back as fingerprints below.
					hole = true
					if sg.CreatedAt.IsZero() {
						unbounded = true
					} else if sg.CreatedAt.After(holeUntil) {
						holeUntil = sg.CreatedAt
					}
					continue
				}
				if unbounded {
					// Offsets grow with created_at in a partition: a hole
					// below this segment was stored no later than it.
					unbounded = false
					if sg.CreatedAt.After(holeUntil) {
						holeUntil = sg.CreatedAt
					}
				}
				gen, _ := p.genAt(&read, sg.CreatedAt)
				for i := 0; i+16 <= len(sg.Hashes); i += 16 {
					gen.add((*queen.Hash)(sg.Hashes[i : i+16]))
				}
			}
			size, n := p.size(), p.count()
			for i := range read {
				size += read[i].size
				n += read[i].n
			}
			p.mu.Unlock()
			p.c.account(p, size, n, false)
			after = upTo
		}
		var prints *queen.SidecarPrints
		if hole {
			ctx, cancel := context.WithTimeout(context.Background(), p.c.cfg.HydrateTimeout)
			pr, err := p.c.cfg.Source.SidecarPrints(ctx, pid, window)
			cancel()
			if err != nil {
				p.c.hydrationErrors.Add(1)
				p.c.cfg.Logger.Warn("dedup cache hydration failed; the partition probes its whole window until the next try", "partition", pid, "err", err)
				p.mu.Lock()
				if p.epoch == epoch {
					p.reset()
				}
				p.mu.Unlock()
				p.c.account(p, 0, 0, false)
				return
			}
			prints = &pr
		}
		p.mu.Lock()
		if p.epoch != epoch {
			p.mu.Unlock()
			return
		}
		if hole {
			if unbounded || holeUntil.IsZero() {
				// Not bounded by a later segment of the gap: no later than
				// the commit that showed it, which newest covers.
				holeUntil = p.newest
			}
			if prints.Uncovered.IsZero() || holeUntil.Before(prints.Uncovered) {
				// Every hash of the hole has its fingerprint. The sets of
				// an earlier read that this one lacks (a crash emptied
				// them since) are kept.
				fresh := make(map[time.Time]bool, len(prints.Sets))
				for _, set := range prints.Sets {
					fresh[set.Since] = true
				}
				kept := p.prints[:0]
				for _, ps := range p.prints {
					if !fresh[ps.since] {
						kept = append(kept, ps)
					}
				}
				p.prints = kept
				for _, set := range prints.Sets {
					p.prints = append(p.prints, newPrintSet(set))
				}
				sort.SliceStable(p.prints, func(a, b int) bool { return p.prints[a].until.Before(p.prints[b].until) })
				p.c.printReads.Add(1)
			} else if holeUntil.After(p.unknownUntil) {
				// A range the hole may be in has no fingerprints: not
				// vouched for until the hole leaves the window.
				p.unknownUntil = holeUntil
			}
		}
		for i := range read {
			p.held += read[i].size
			p.heldN += read[i].n
		}
		p.gens = append(p.gens, read...)
		sort.SliceStable(p.gens, func(a, b int) bool { return p.gens[a].newest.Before(p.gens[b].newest) })
		p.prune()
		p.gaps = p.gaps[1:]
		p.mu.Unlock()
	}
}

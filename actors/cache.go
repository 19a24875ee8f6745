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
	"github.com/queen-mq/queen-go/persistence"
)

// HashCache is a partition actor's in-memory view of its window (SPEC.md §8).
// Its only output is the watermark (with the suspects it must not vouch
// for) set on each push batch; it never decides a verdict: the SQL probe
// under the row lock does.
type HashCache interface {
	// Prepare sets b.Watermark, b.Suspects and b.AssumedWindow: -1 when the
	// cache cannot vouch for anything.
	Prepare(b *persistence.PushBatch)
	// Observe records a committed batch's outcome.
	Observe(b *persistence.PushBatch, out *persistence.PushOutcome)
	// Forget drops everything (after an error whose outcome is unknown).
	Forget()
}

// noCache never vouches, so every probe covers the whole window.
type noCache struct{}

func (noCache) Prepare(b *persistence.PushBatch)                         { b.Watermark, b.Suspects = -1, nil }
func (noCache) Observe(*persistence.PushBatch, *persistence.PushOutcome) {}
func (noCache) Forget()                                                  {}

// SidecarSource is where partition caches hydrate from (persistence.Store).
type SidecarSource interface {
	SidecarRange(ctx context.Context, pid uuid.UUID, after, upTo, windowSeconds int64) ([]persistence.SidecarSegment, error)
}

// CacheConfig configures the process-wide dedup cache (SPEC.md §8).
type CacheConfig struct {
	// BudgetBytes bounds the estimated memory of every partition's cache
	// together (QUEEN_DEDUP_CACHE_MB); the least recently used partitions'
	// caches are evicted beyond it. Default 512 MiB.
	BudgetBytes int64
	// Disabled starts the cache switched off (QUEEN_DEDUP_CACHE=off).
	Disabled bool
	// Source hydrates partition caches (required).
	Source SidecarSource
	// HydrateTimeout bounds one hydration query. Default 60s.
	HydrateTimeout time.Duration
	Logger         *slog.Logger
}

// EntryBytes is the estimated memory of one cached hash: its map entry
// (16-byte key, 8-byte offset and the map's overhead) and its 16 bytes in a
// generation.
const EntryBytes = 80

// Cache is the process-wide dedup cache: it hands each partition actor its
// own cache (New), keeps their total memory under the budget by evicting the
// least recently used, and has a kill switch (SetEnabled). It is safe for
// concurrent use.
type Cache struct {
	cfg     CacheConfig
	enabled atomic.Bool

	mu    sync.Mutex
	lru   *list.List // of *partitionCache holding memory; front = most recently used
	total int64      // bytes accounted

	hits, evictions, fullProbes, narrowedProbes, hydrations, hydrationErrors atomic.Int64
}

// NewCache returns the process-wide cache.
func NewCache(cfg CacheConfig) *Cache {
	if cfg.BudgetBytes <= 0 {
		cfg.BudgetBytes = 512 << 20
	}
	if cfg.HydrateTimeout <= 0 {
		cfg.HydrateTimeout = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Cache{cfg: cfg, lru: list.New()}
	c.enabled.Store(!cfg.Disabled)
	return c
}

// New returns a new partition cache (Config.NewCache).
func (c *Cache) New() HashCache {
	return &partitionCache{c: c, hashes: map[queen.Hash]int64{}}
}

// SetEnabled is the kill switch: off drops every partition's cache at once
// and every later push probes the whole window; on lets them warm again.
func (c *Cache) SetEnabled(on bool) {
	c.enabled.Store(on)
	if on {
		return
	}
	c.mu.Lock()
	var all []*partitionCache
	for e := c.lru.Front(); e != nil; e = e.Next() {
		all = append(all, e.Value.(*partitionCache))
	}
	c.mu.Unlock()
	for _, p := range all {
		p.drop(false)
	}
}

// Enabled reports the kill switch.
func (c *Cache) Enabled() bool { return c.enabled.Load() }

// CacheStats is the cache's state for /health and metrics.
type CacheStats struct {
	Enabled     bool  `json:"enabled"`
	Partitions  int   `json:"partitions"`
	Bytes       int64 `json:"bytes"`
	Entries     int64 `json:"entries"`
	BudgetBytes int64 `json:"budgetBytes"`
	// Hits counts incoming hashes the cache had seen (looked up in the window).
	Hits int64 `json:"hits"`
	// Evictions counts partition caches dropped to keep the budget.
	Evictions int64 `json:"evictions"`
	// FullProbes counts partition probes sent with watermark -1 (whole window).
	FullProbes int64 `json:"fullProbes"`
	// NarrowedProbes counts partition probes sent with a watermark.
	NarrowedProbes  int64 `json:"narrowedProbes"`
	Hydrations      int64 `json:"hydrations"`
	HydrationErrors int64 `json:"hydrationErrors"`
}

// Stats returns the cache's counters and size.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	s := CacheStats{Partitions: c.lru.Len(), Bytes: c.total}
	c.mu.Unlock()
	s.Enabled = c.enabled.Load()
	s.Entries = s.Bytes / EntryBytes
	s.BudgetBytes = c.cfg.BudgetBytes
	s.Hits, s.Evictions = c.hits.Load(), c.evictions.Load()
	s.FullProbes, s.NarrowedProbes = c.fullProbes.Load(), c.narrowedProbes.Load()
	s.Hydrations, s.HydrationErrors = c.hydrations.Load(), c.hydrationErrors.Load()
	return s
}

// account sets p's accounted size and evicts the least recently used caches
// while the total is over the budget (p itself last).
func (c *Cache) account(p *partitionCache, size int64) {
	c.mu.Lock()
	c.total += size - p.accounted
	p.accounted = size
	switch {
	case size > 0 && p.elem == nil:
		p.elem = c.lru.PushFront(p)
	case size > 0:
		c.lru.MoveToFront(p.elem)
	case p.elem != nil:
		c.lru.Remove(p.elem)
		p.elem = nil
	}
	var victims []*partitionCache
	for c.total > c.cfg.BudgetBytes && c.lru.Len() > 0 {
		e := c.lru.Back()
		v := e.Value.(*partitionCache)
		c.lru.Remove(e)
		v.elem = nil
		c.total -= v.accounted
		v.accounted = 0
		victims = append(victims, v)
	}
	c.mu.Unlock()
	for _, v := range victims {
		v.drop(true)
	}
}

// generation is the hashes one segment added, for pruning by age.
type generation struct {
	created time.Time
	first   int64
	hashes  []queen.Hash
}

// partitionCache is one partition's cache. Knowledge: every in-window hash
// of the partition at offsets up to seen, once the base hydration and every
// gap (segments written by others: transactions, other brokers) is filled.
// hashes maps a hash to the highest offset it was seen at; a generation is
// pruned once older than the window on PostgreSQL's clock (the newest
// commit's created_at), which keeps only in-window hashes.
type partitionCache struct {
	c *Cache

	// guarded by c.mu
	elem      *list.Element
	accounted int64

	mu        sync.Mutex
	pid       uuid.UUID
	hashes    map[queen.Hash]int64
	gens      []generation
	based     bool       // knowledge started for this epoch
	gaps      [][2]int64 // (after, upTo] ranges still to hydrate
	hydrating bool
	seen      int64 // last offset known: the end of the last observed commit
	window    int64 // seconds the knowledge covers
	epoch     uint64
	// cooldown is how many more commits to wait before knowledge starts
	// again after a budget eviction, so a partition too large for the
	// budget is not re-read from the sidecar on every commit.
	cooldown int
	// unsorted: gens are not in created order (a hydration appended older
	// ones); prune sorts them first.
	unsorted bool
}

// evictionCooldown is the commits a partition waits after a budget eviction.
const evictionCooldown = 16

func (p *partitionCache) Prepare(b *persistence.PushBatch) {
	b.Watermark, b.Suspects, b.AssumedWindow = -1, nil, 0
	if !p.c.enabled.Load() {
		p.c.fullProbes.Add(1)
		return
	}
	p.mu.Lock()
	ready := p.based && !p.hydrating && len(p.gaps) == 0 && p.pid == b.PartitionID
	hits := 0
	if ready {
		b.Watermark, b.AssumedWindow = p.seen, p.window
		for i, it := range b.Items {
			if b.LeaderOf != nil && int(b.LeaderOf[i]) != i {
				continue
			}
			if _, ok := p.hashes[it.Hash]; ok {
				if b.Suspects == nil {
					b.Suspects = map[queen.Hash]struct{}{}
				}
				b.Suspects[it.Hash] = struct{}{}
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

func (p *partitionCache) Observe(b *persistence.PushBatch, out *persistence.PushOutcome) {
	if !p.c.enabled.Load() {
		return
	}
	p.mu.Lock()
	prevLast := out.FirstOffset - 1
	if p.based && (b.PartitionID != p.pid || out.Window > p.window) {
		// A new partition id (its queue was deleted and recreated), or a
		// window wider than the knowledge covers: start again.
		p.reset()
	}
	start := false
	if !p.based && p.cooldown > 0 {
		p.cooldown--
		p.mu.Unlock()
		return
	}
	switch {
	case !p.based:
		p.based, p.pid, p.window, p.seen = true, b.PartitionID, out.Window, prevLast
		if prevLast >= 0 {
			p.gaps = append(p.gaps, [2]int64{-1, prevLast})
		}
	case prevLast != p.seen:
		// Others wrote (p.seen, prevLast]: learn it from the sidecar.
		p.gaps = append(p.gaps, [2]int64{p.seen, prevLast})
	}
	if len(p.gaps) > 0 && !p.hydrating {
		p.hydrating, start = true, true
	}
	if out.LastOffset >= out.FirstOffset {
		g := generation{created: out.CreatedAt, first: out.FirstOffset, hashes: make([]queen.Hash, 0, out.LastOffset-out.FirstOffset+1)}
		for i, r := range out.Results {
			if r.Verdict == queen.Queued {
				g.hashes = append(g.hashes, b.Items[i].Hash)
				p.add(b.Items[i].Hash, r.Offset)
			}
		}
		p.gens = append(p.gens, g)
		p.seen = out.LastOffset
		p.prune(out.CreatedAt)
	} else {
		p.seen = prevLast
	}
	epoch, size := p.epoch, p.size()
	p.mu.Unlock()
	p.c.account(p, size)
	if start {
		go p.hydrate(epoch)
	}
}

func (p *partitionCache) Forget() { p.drop(false) }

// drop forgets everything; evicted counts it as a budget eviction.
func (p *partitionCache) drop(evicted bool) {
	p.mu.Lock()
	p.reset()
	if evicted {
		p.cooldown = evictionCooldown
	}
	p.mu.Unlock()
	if evicted {
		p.c.evictions.Add(1)
	}
	p.c.account(p, 0)
}

func (p *partitionCache) reset() {
	p.hashes = map[queen.Hash]int64{}
	p.gens, p.unsorted = nil, false
	p.based, p.gaps, p.hydrating = false, nil, false
	p.epoch++
}

func (p *partitionCache) size() int64 { return int64(len(p.hashes)) * EntryBytes }

func (p *partitionCache) add(h queen.Hash, off int64) {
	if old, ok := p.hashes[h]; !ok || off > old {
		p.hashes[h] = off
	}
}

// prune drops the generations stored before now - window (now: the newest
// commit's created_at, PostgreSQL's clock): out of the window for every
// later probe.
func (p *partitionCache) prune(now time.Time) {
	if now.IsZero() {
		return
	}
	if p.unsorted { // hydrated generations arrive after newer commits
		sort.SliceStable(p.gens, func(a, b int) bool { return p.gens[a].created.Before(p.gens[b].created) })
		p.unsorted = false
	}
	// Oldest first: the work is the generations that expire, not all of them.
	cut := now.Add(-time.Duration(p.window) * time.Second)
	k := 0
	for ; k < len(p.gens) && p.gens[k].created.Before(cut); k++ {
		g := &p.gens[k]
		for i, h := range g.hashes {
			if p.hashes[h] == g.first+int64(i) {
				delete(p.hashes, h)
			}
		}
		*g = generation{}
	}
	p.gens = p.gens[k:]
}

// hydrate fills the gaps of epoch from the sidecar, one range at a time.
func (p *partitionCache) hydrate(epoch uint64) {
	for {
		p.mu.Lock()
		if p.epoch != epoch {
			p.mu.Unlock()
			return
		}
		if len(p.gaps) == 0 {
			p.hydrating = false
			p.mu.Unlock()
			return
		}
		g, pid, window := p.gaps[0], p.pid, p.window
		p.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), p.c.cfg.HydrateTimeout)
		segs, err := p.c.cfg.Source.SidecarRange(ctx, pid, g[0], g[1], window)
		cancel()
		p.c.hydrations.Add(1)

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
			p.c.account(p, 0)
			return
		}
		for k, sg := range segs {
			n := len(sg.Hashes) / 16
			gen := generation{created: sg.CreatedAt, first: sg.First, hashes: make([]queen.Hash, n)}
			for i := 0; i < n; i++ {
				copy(gen.hashes[i][:], sg.Hashes[i*16:])
				p.add(gen.hashes[i], sg.First+int64(i))
			}
			p.gens = append(p.gens, gen)
			p.unsorted = true
			segs[k].Hashes = nil
			if k%64 == 63 {
				// Account as it grows, so a partition too large for the
				// budget is evicted (and this hydration abandoned) early.
				size := p.size()
				p.mu.Unlock()
				p.c.account(p, size)
				p.mu.Lock()
				if p.epoch != epoch {
					p.mu.Unlock()
					return
				}
			}
		}
		p.gaps = p.gaps[1:]
		size := p.size()
		p.mu.Unlock()
		p.c.account(p, size)
	}
}

package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"github.com/zeebo/xxh3"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/lifecycle"
	"github.com/queen-mq/queen-go/metrics"
)

// Store is what partition actors need of a store, in the kernel's types
// (queen.PartitionKey, queen.PushBatch, queen.PushOutcome):
// persistence.Store implements it against PostgreSQL, internal/storetest's
// MemStore in memory. Declared here, by its caller, so actors compiles
// without the database driver.
type Store interface {
	// EnsurePartitions returns the partitions' ids in the order of keys,
	// creating queues and partitions on first use.
	EnsurePartitions(ctx context.Context, keys []queen.PartitionKey) ([]uuid.UUID, error)
	// CommitBundle runs one push transaction for several partitions (SPEC.md §3).
	CommitBundle(ctx context.Context, bs []*queen.PushBatch) ([]queen.PushOutcome, error)
}

// Config configures a Host. Zero values take the defaults named.
type Config struct {
	Store Store
	// MaxPendingItems bounds the items waiting in one partition's mailbox; a
	// request that would exceed it is refused with queen.ErrOverloaded. Default 20000.
	MaxPendingItems int
	// MaxInFlightItems bounds the items in flight across the host (waiting or
	// committing); beyond it pushes are refused with queen.ErrOverloaded. Default 200000.
	MaxInFlightItems int64
	// MaxFusedItems caps the items of one fused commit. Default 10000.
	MaxFusedItems int
	// MaxPendingBytes bounds the bytes (payloads and ids) waiting in one
	// partition's mailbox, like MaxPendingItems. Default 64 MiB.
	MaxPendingBytes int64
	// MaxInFlightBytes bounds the bytes in flight across the host, like
	// MaxInFlightItems. Default 512 MiB.
	MaxInFlightBytes int64
	// MaxFusedBytes caps the bytes of one fused commit (one segment). Default 16 MiB.
	MaxFusedBytes int64
	// MaxBundleBytes caps the bytes of one transaction. Default 64 MiB.
	MaxBundleBytes int64
	// Committers is the number of push transactions run at once. Default 2:
	// on 2 cores, 1 and 2 measured alike and 4 and 8 lower (smaller bundles,
	// more transactions for the same work).
	Committers int
	// ParallelItems is how many items must wait before a free committer
	// starts a transaction while another is in flight; with fewer it holds
	// them, so they join the next bundle instead of paying a transaction's
	// fixed cost (round trips, statements, the WAL flush) for a few items.
	// Default 256. It never delays a commit when no other is in flight (a
	// lone producer waits for nothing), nor past CommitHold.
	ParallelItems int
	// CommitHold bounds how long a free committer holds waiting items
	// (ParallelItems) after the newest commit in flight began: a commit
	// that stalls (a row lock held elsewhere, a slow flush) stops holding
	// up the others after it. Default 50ms.
	CommitHold time.Duration
	// MaxBundlePartitions caps the partitions of one transaction. Default
	// 1024: a bundle's statements cost about the same whatever its size, so
	// pushes spread over thousands of partitions (one item per partition per
	// commit) need wide bundles; at 10,000 partitions, 1024 took about a fifth
	// less CPU per stored message than 64 (issue 11). MaxBundleItems and
	// MaxBundleBytes bound a bundle too.
	MaxBundlePartitions int
	// MaxBundleItems caps the items of one transaction. Default 20000.
	MaxBundleItems int
	// CommitTimeout bounds one push transaction. Default 30s.
	CommitTimeout time.Duration
	// NewCache builds a partition's hash cache; nil means no cache (watermark -1).
	NewCache func() HashCache
	// PartitionIdle is how long a partition actor may go without a push
	// before it is passivated: stopped, its mailbox, process registry entry
	// and cache state freed (QUEEN_PARTITION_IDLE). The next push to the
	// partition spawns it again. Idle actors are looked for every
	// PartitionIdle/4 (at least every second), so one lives between
	// PartitionIdle and 1.25 × PartitionIdle after its last push. 0 (the
	// zero value) disables passivation; the broker's default is 2m.
	PartitionIdle time.Duration
	// MaxActivePartitions bounds the partition actors alive at once (the
	// broker derives it from QUEEN_PARTITION_MEMORY_MB: MiB ÷
	// ActivePartitionBytes). When a spawn takes the count over it, the
	// least recently pushed partitions are asked to passivate, whatever
	// PartitionIdle says; one with a push waiting or a commit running
	// refuses and stays, and the bound is enforced again once it is idle
	// (or at the next spawn), so the count may exceed the bound by the
	// busy partitions for as long as they are busy.
	// A partition passivated so starts cold when it comes back (spawn and
	// full-window probes, never a window re-read). 0 (the zero value): no
	// bound.
	MaxActivePartitions int
	// Now is the clock idle time is measured on (default time.Now). Tests
	// inject one and call Passivate instead of waiting for the sweep.
	Now     func() time.Time
	Metrics *metrics.Set
	Logger  *slog.Logger

	// Test hooks (nil in production). onStopping runs in a partition
	// actor that has decided to passivate, before it stops; onHeld runs in
	// the parent when it holds a push for a partition whose actor is
	// stopping.
	onStopping func(partitionKey)
	onHeld     func(partitionKey)
	// onRefusing runs in a partition actor that refuses to passivate,
	// before it answers.
	onRefusing func(partitionKey)
	// onCommitDone runs in a partition actor that receives a commitDone.
	onCommitDone func(partitionKey)
}

// Host owns the actor system and the parent of the partition actors.
type Host struct {
	cfg      Config
	metrics  *metrics.Set
	log      *slog.Logger
	system   *actor.ActorSystem
	parent   *actor.PID
	inflight atomic.Int64
	inBytes  atomic.Int64
	commits  atomic.Uint64
	mu       sync.RWMutex
	closed   bool // pushes are refused: before Start and from Stop on
	running  bool // between Start and Stop
	halted   bool // Stop was called
	started  atomic.Bool
	wg       sync.WaitGroup
	bundler  *bundler
	resolver *resolver
	// start anchors the idle clock: push times are kept as nanoseconds
	// since start (monotonic with the real clock).
	start      time.Time
	active     atomic.Int64
	passivated atomic.Uint64
	pressured  atomic.Uint64 // passivated for MaxActivePartitions
	stopping   atomic.Bool   // the parent is being stopped: spawn nothing
	sweepStop  chan struct{}
	sweepDone  chan struct{}
}

type partitionKey struct{ queue, partition string }

// NewHost returns a stopped Host: Start starts the actor system, the
// partitions' parent actor, the committers and the idle sweep; pushes
// before Start are refused with queen.ErrShuttingDown. It refuses (a
// *lifecycle.SettingError) a missing Store and a negative bound, count or
// duration; zero values take the defaults named.
func NewHost(cfg Config) (*Host, error) {
	if err := errors.Join(
		lifecycle.Required("Config.Store", cfg.Store == nil),
		lifecycle.NotNegative("Config.MaxPendingItems", cfg.MaxPendingItems),
		lifecycle.NotNegative("Config.MaxInFlightItems", cfg.MaxInFlightItems),
		lifecycle.NotNegative("Config.MaxFusedItems", cfg.MaxFusedItems),
		lifecycle.NotNegative("Config.MaxPendingBytes", cfg.MaxPendingBytes),
		lifecycle.NotNegative("Config.MaxInFlightBytes", cfg.MaxInFlightBytes),
		lifecycle.NotNegative("Config.MaxFusedBytes", cfg.MaxFusedBytes),
		lifecycle.NotNegative("Config.MaxBundleBytes", cfg.MaxBundleBytes),
		lifecycle.NotNegative("Config.Committers", cfg.Committers),
		lifecycle.NotNegative("Config.ParallelItems", cfg.ParallelItems),
		lifecycle.NotNegative("Config.CommitHold", cfg.CommitHold),
		lifecycle.NotNegative("Config.MaxBundlePartitions", cfg.MaxBundlePartitions),
		lifecycle.NotNegative("Config.MaxBundleItems", cfg.MaxBundleItems),
		lifecycle.NotNegative("Config.CommitTimeout", cfg.CommitTimeout),
		lifecycle.NotNegative("Config.PartitionIdle", cfg.PartitionIdle),
		lifecycle.NotNegative("Config.MaxActivePartitions", cfg.MaxActivePartitions),
	); err != nil {
		return nil, fmt.Errorf("actors: %w", err)
	}
	if cfg.MaxPendingItems <= 0 {
		cfg.MaxPendingItems = 20000
	}
	if cfg.MaxInFlightItems <= 0 {
		cfg.MaxInFlightItems = 200000
	}
	if cfg.MaxFusedItems <= 0 {
		cfg.MaxFusedItems = 10000
	}
	if cfg.MaxPendingBytes <= 0 {
		cfg.MaxPendingBytes = 64 << 20
	}
	if cfg.MaxInFlightBytes <= 0 {
		cfg.MaxInFlightBytes = 512 << 20
	}
	if cfg.MaxFusedBytes <= 0 {
		cfg.MaxFusedBytes = 16 << 20
	}
	if cfg.MaxBundleBytes <= 0 {
		cfg.MaxBundleBytes = 64 << 20
	}
	if cfg.Committers <= 0 {
		cfg.Committers = 2
	}
	if cfg.ParallelItems <= 0 {
		cfg.ParallelItems = 256
	}
	if cfg.CommitHold <= 0 {
		cfg.CommitHold = 50 * time.Millisecond
	}
	if cfg.MaxBundlePartitions <= 0 {
		cfg.MaxBundlePartitions = 1024
	}
	if cfg.MaxBundleItems <= 0 {
		cfg.MaxBundleItems = 20000
	}
	if cfg.CommitTimeout <= 0 {
		cfg.CommitTimeout = 30 * time.Second
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.NewCache == nil {
		cfg.NewCache = func() HashCache { return noCache{} }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &Host{cfg: cfg, metrics: cfg.Metrics, log: cfg.Logger, closed: true}
	h.bundler = newBundler(h)
	h.resolver = &resolver{h: h}
	return h, nil
}

// Start starts the actor system, the partitions' parent actor, the
// committers and, with PartitionIdle, the idle sweep; from then on pushes
// are taken. A second Start, or a Start after Stop, does nothing.
func (h *Host) Start(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running || h.halted {
		return nil
	}
	h.start = h.cfg.Now()
	quiet := slog.New(slog.NewTextHandler(discard{}, nil))
	h.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	h.parent = h.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		p := &parentActor{host: h, children: map[partitionKey]*child{}}
		p.lru.prev, p.lru.next = &p.lru, &p.lru
		return p
	}))
	h.bundler.start()
	if h.cfg.PartitionIdle > 0 {
		h.sweepStop, h.sweepDone = make(chan struct{}), make(chan struct{})
		go h.sweep(max(h.cfg.PartitionIdle/4, time.Second))
	}
	h.running, h.closed = true, false
	h.started.Store(true)
	return nil
}

// clock is the host's idle clock: nanoseconds since the host started.
func (h *Host) clock() int64 { return int64(h.cfg.Now().Sub(h.start)) }

// sweep asks the parent, every interval, to passivate the partitions idle
// for PartitionIdle.
func (h *Host) sweep(interval time.Duration) {
	defer close(h.sweepDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-h.sweepStop:
			return
		case <-t.C:
			h.Passivate(h.cfg.PartitionIdle)
		}
	}
}

// Passivate asks every partition actor that has had no push for at least
// idle (on Config.Now's clock; 0: every one) and has nothing waiting or
// committing to stop, and enforces MaxActivePartitions. It returns at
// once; PartitionStats shows the outcome. The idle sweep calls it with
// PartitionIdle; tests call it to force passivation.
func (h *Host) Passivate(idle time.Duration) {
	if !h.started.Load() {
		return
	}
	h.system.Root.Send(h.parent, &passivateSweep{cutoff: h.clock() - int64(idle), idle: true})
}

// PassivateWhere asks every partition actor whose (queue, partition)
// match reports true, and that has nothing waiting or committing, to stop:
// the partitions of shards this broker no longer owns (SPEC.md §9). One
// that is busy refuses and is left to the idle sweep and the bound. It
// returns at once; match runs on the parent actor, once per partition
// actor alive.
func (h *Host) PassivateWhere(match func(queue, partition string) bool) {
	if !h.started.Load() {
		return
	}
	h.system.Root.Send(h.parent, &passivateSweep{match: match})
}

// enforceBound asks the least recently pushed partitions over
// MaxActivePartitions to passivate (what every spawn over the bound does).
func (h *Host) enforceBound() {
	h.system.Root.Send(h.parent, &passivateSweep{})
}

// ActivePartitionBytes is the Go heap one active partition holds on this
// broker, measured by BenchmarkPartitionMemory (1,379-1,412 bytes: its
// actor, protoactor process, mailbox and registry entry, the parent's
// record, its dedup cache's partition record and first generation holding
// one hash): the unit of QUEEN_PARTITION_MEMORY_MB and of
// PartitionStats.Bytes. A partition's hashes past the first are the dedup
// cache's, within its own budget.
const ActivePartitionBytes = 1400

// PartitionStats is the partition actors' state for /health and metrics.
type PartitionStats struct {
	// Active is the partition actors alive (spawned and not yet passivated).
	Active int64 `json:"active"`
	// Passivated counts the partition actors stopped since the host
	// started, for being idle or for the bound.
	Passivated uint64 `json:"passivatedTotal"`
	// PressurePassivated counts those of Passivated stopped for
	// MaxActivePartitions (the least recently pushed first).
	PressurePassivated uint64 `json:"pressurePassivatedTotal"`
	// IdleSeconds is PartitionIdle in seconds (0: idle passivation off).
	IdleSeconds float64 `json:"idleSeconds"`
	// MaxActive is MaxActivePartitions (0: no bound).
	MaxActive int `json:"maxActive"`
	// Bytes estimates the heap the active partitions hold: Active ×
	// ActivePartitionBytes.
	Bytes int64 `json:"bytes"`
}

// PartitionStats returns the active and passivated partition counts.
func (h *Host) PartitionStats() PartitionStats {
	a := h.active.Load()
	return PartitionStats{Active: a, Passivated: h.passivated.Load(), PressurePassivated: h.pressured.Load(),
		IdleSeconds: h.cfg.PartitionIdle.Seconds(), MaxActive: h.cfg.MaxActivePartitions, Bytes: a * ActivePartitionBytes}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Commits returns how many push transactions the host has run.
func (h *Host) Commits() uint64 { return h.commits.Load() }

// release ends a request's stay in flight (called once per request, when it
// is answered): n items, b bytes.
func (h *Host) release(n, b int64) {
	h.inflight.Add(-n)
	h.inBytes.Add(-b)
	h.wg.Done()
}

// itemBytes is what an item holds in memory, for the byte bounds.
func itemBytes(items []*queen.Item) int64 {
	var b int64
	for _, it := range items {
		b += int64(len(it.Payload) + len(it.TransactionID) + len(it.Queue) + len(it.Partition) + 96)
		if it.TraceID != nil {
			b += int64(len(*it.TraceID))
		}
	}
	return b
}

// Pending is a push handed to a partition actor, waiting for its verdicts.
type Pending struct {
	h    *Host
	n    int64
	req  *pushReq
	done bool
	err  error
}

// Enqueue hands one request's items for one partition to the partition's
// actor without waiting: requests enqueued one after another from one
// goroutine reach the actor in that order. The error (queen.ErrOverloaded,
// ErrShuttingDown) means nothing was enqueued.
func (h *Host) Enqueue(queueName, partition string, items []*queen.Item) (*Pending, error) {
	p := &Pending{h: h, n: int64(len(items))}
	if len(items) == 0 {
		p.done = true
		return p, nil
	}
	h.mu.RLock()
	if h.closed {
		h.mu.RUnlock()
		return nil, queen.ErrShuttingDown
	}
	h.wg.Add(1)
	h.mu.RUnlock()
	nb := itemBytes(items)
	total, totalB := h.inflight.Add(p.n), h.inBytes.Add(nb)
	if (total > h.cfg.MaxInFlightItems || totalB > h.cfg.MaxInFlightBytes) && total != p.n {
		h.inflight.Add(-p.n)
		h.inBytes.Add(-nb)
		h.wg.Done()
		h.metrics.Overloads.Inc()
		return nil, queen.ErrOverloaded.With("the broker has %d push items (%d bytes) in flight (limits %d items, %d bytes); retry with the same transaction ids",
			total-p.n, totalB-nb, h.cfg.MaxInFlightItems, h.cfg.MaxInFlightBytes)
	}
	p.req = &pushReq{host: h, key: partitionKey{queueName, partition}, items: items, bytes: nb, reply: make(chan pushResp, 1)}
	h.system.Root.Send(h.parent, p.req)
	return p, nil
}

// Wait returns the verdicts, one per item in order. It returns an error
// (queen.ErrOverloaded, ErrShuttingDown, ErrTimeout when ctx ends first) only
// when no item got a verdict; per-item failures are queen.Failed results.
// Call it once.
func (p *Pending) Wait(ctx context.Context) ([]queen.Result, error) {
	if p.done {
		return nil, p.err
	}
	p.done = true
	select {
	case r := <-p.req.reply:
		return r.results, r.err
	case <-ctx.Done():
		// The items stay in flight until their commit ends.
		p.err = queen.ErrTimeout.With("push timed out waiting for its commit: %v; retry with the same transaction ids", ctx.Err())
		return nil, p.err
	}
}

// Push is Enqueue then Wait.
func (h *Host) Push(ctx context.Context, queueName, partition string, items []*queen.Item) ([]queen.Result, error) {
	p, err := h.Enqueue(queueName, partition, items)
	if err != nil {
		return nil, err
	}
	return p.Wait(ctx)
}

// Stop refuses new pushes, waits for those in flight to get their verdicts
// (or ctx to end: ctx.Err()), then stops every actor and the committers
// (the jobs they have queued are still committed). A second Stop, and a
// Stop before Start, do nothing.
func (h *Host) Stop(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	running := h.running
	h.running, h.halted = false, true
	h.mu.Unlock()
	if !running {
		return nil
	}
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if h.sweepStop != nil {
		close(h.sweepStop)
		<-h.sweepDone
	}
	h.stopping.Store(true)
	h.system.Root.StopFuture(h.parent).Wait() //nolint:errcheck
	h.bundler.stop()
	h.system.Shutdown()
	return err
}

// parentActor spawns partition actors lazily, forwards pushes to them and
// passivates the idle ones.
//
// Passivation is a handshake that never loses or doubles a push: the parent
// sends the actor passivateReq and marks it stopping; from then on it holds
// the pushes for that partition instead of forwarding them. The actor sees
// passivateReq after every push forwarded before it (one sender, one
// mailbox, in order): if it still has pushes waiting or a commit running it
// answers passivateRefused and the parent forwards what it held; otherwise
// it drops its cache state and stops. Only when the parent gets its
// partitionStopped (sent from its *actor.Stopped, after it left the process
// registry) is the partition forgotten; the held pushes, if any, go to a new
// incarnation spawned then, in arrival order. So no two incarnations of a
// partition are ever alive together, and each push reaches exactly one
// actor and is answered once.
//
// The children not stopping are kept in an intrusive list by their last
// push (lru: a push moves its partition to the front in O(1)); a spawn
// that takes them over MaxActivePartitions asks the ones at the back to
// passivate, by the same handshake.
type parentActor struct {
	host     *Host
	children map[partitionKey]*child
	lru      child // sentinel: lru.next is the most recently pushed
	live     int   // children not stopping (the ones in lru)
	peak     int   // the most children since the map was last rebuilt
	// recent remembers partitions passivated before (a bit per hash of the
	// key, never cleared; 128 KiB): a reactivated partition's cache starts
	// cold instead of re-reading its whole window (a false positive makes
	// a first activation start cold too, which costs probes, not verdicts).
	recent []uint64
	// ids remembers the partition ids of passivated partitions (a
	// direct-mapped table, idSlots × 32 bytes = 4 MiB, allocated at the
	// first passivation): a reactivated partition whose slot still holds
	// its id commits at once instead of looking its id up in PostgreSQL
	// first. A stale id (its queue deleted since) is handled as an active
	// partition's is: the store finds the partition gone, resolves it again
	// and commits once more (persistence.Store.CommitBundle).
	ids []idSlot
	seq int
	// shared is the Props every partition actor is spawned with; next is
	// the actor its producer returns (set only during spawn).
	shared *actor.Props
	next   *partitionActor
}

// stopOnFailure is the partition actors' guardian strategy: a panicking
// actor is stopped (it answers what it holds in *actor.Stopping), never
// restarted.
var stopOnFailure = actor.NewOneForOneStrategy(0, 0, func(any) actor.Directive { return actor.StopDirective })

// props returns the shared partition-actor Props: a lock-free unbounded
// mailbox (a linked queue, ~16 bytes while empty, where the default ring
// starts at 10 slots; the host's MaxPendingItems and MaxInFlightItems bound
// what waits) and the stopping guardian.
func (p *parentActor) props() *actor.Props {
	if p.shared == nil {
		p.shared = actor.PropsFromProducer(func() actor.Actor {
			if p.next == nil {
				panic("actors: partition actor produced outside spawn")
			}
			return p.next
		}, actor.WithMailbox(actor.UnboundedLockfree()), actor.WithGuardian(stopOnFailure), actor.WithDispatcher(dispatcher()))
	}
	return p.shared
}

// child is the parent's record of one partition actor.
type child struct {
	pid        *actor.PID
	prev, next *child // in parentActor.lru while not stopping
	last       int64  // host clock of the last push forwarded
	stopping   bool   // asked to passivate: pushes are held until it answers
	pressured  bool   // asked for MaxActivePartitions, not for idleness
	held       []*pushReq
}

// unlink takes c out of the lru list.
func (p *parentActor) unlink(c *child) {
	if c.prev == nil {
		return
	}
	c.prev.next, c.next.prev = c.next, c.prev
	c.prev, c.next = nil, nil
}

// link puts c at the lru list's front (most recently pushed), or at its
// back when back is set.
func (p *parentActor) link(c *child, back bool) {
	at := &p.lru // insert after at
	if back {
		at = p.lru.prev
	}
	c.prev, c.next = at, at.next
	at.next.prev = c
	at.next = c
}

// ask marks c stopping and sends it passivateReq.
func (p *parentActor) ask(ctx actor.Context, c *child, pressured bool) {
	p.unlink(c)
	p.live--
	c.stopping, c.pressured = true, pressured
	ctx.Send(c.pid, &passivateReq{})
}

// enforce asks the least recently pushed children to passivate while more
// than MaxActivePartitions are not stopping.
func (p *parentActor) enforce(ctx actor.Context) {
	bound := p.host.cfg.MaxActivePartitions
	for bound > 0 && p.live > bound && p.lru.prev != &p.lru {
		p.ask(ctx, p.lru.prev, true)
	}
}

const recentBits = 1 << 20

// idSlots is the size of parentActor.ids.
const idSlots = 1 << 17

// idSlot holds one passivated partition's id under the XXH3-128 of its key
// (queue, partition): two keys share a hash with a probability of about
// 2^-128 per pair, the bar the dedup itself holds transaction ids to
// (SPEC.md §8).
type idSlot struct {
	key xxh3.Uint128 // zero: empty
	id  uuid.UUID
}

// keyHash is the XXH3-128 of k's partition key, the ids table's key.
func keyHash(k partitionKey) xxh3.Uint128 {
	return queen.PartitionHash128(k.queue, k.partition)
}

// rememberID keeps partition k's id for its next activation.
func (p *parentActor) rememberID(k partitionKey, id uuid.UUID) {
	if id == uuid.Nil {
		return
	}
	if p.ids == nil {
		p.ids = make([]idSlot, idSlots)
	}
	h := keyHash(k)
	p.ids[h.Lo%idSlots] = idSlot{key: h, id: id}
}

// knownID returns partition k's id if the ids table still holds it.
func (p *parentActor) knownID(k partitionKey) uuid.UUID {
	if p.ids == nil {
		return uuid.Nil
	}
	h := keyHash(k)
	if s := &p.ids[h.Lo%idSlots]; s.key == h {
		return s.id
	}
	return uuid.Nil
}

// passivateSweep asks the partitions idle since cutoff (host clock) to stop
// (when idle is set), then enforces MaxActivePartitions.
type passivateSweep struct {
	cutoff int64
	idle   bool
	match  func(queue, partition string) bool // stop these (PassivateWhere)
}

// passivateReq asks a partition actor to stop if it is idle.
type passivateReq struct{}

// passivateRefused is a partition actor's answer when it was not idle.
type passivateRefused struct{ key partitionKey }

// partitionIdle is sent by a partition actor that refused to passivate,
// once it is idle: the parent enforces MaxActivePartitions again.
type partitionIdle struct{}

// partitionStopped is a partition actor's last message, sent once it is
// out of the process registry.
type partitionStopped struct {
	key partitionKey
	pid *actor.PID
	id  uuid.UUID // the partition's id, if the actor had resolved it
}

func recentBit(k partitionKey) uint64 {
	return queen.PartitionHash(k.queue, k.partition) % recentBits
}

func (p *parentActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *pushReq:
		p.route(ctx, m)
	case *passivateSweep:
		p.sweep(ctx, m)
	case *partitionIdle:
		p.enforce(ctx)
	case *passivateRefused:
		p.refused(ctx, m)
	case *actor.Stopping:
		p.stopAll(ctx)
	case *partitionStopped:
		p.stopped(ctx, m)
	}
}

// route hands a push to its partition's actor, spawning it when absent and
// holding the push while that actor is stopping (it goes to the next
// incarnation, see stopped).
func (p *parentActor) route(ctx actor.Context, m *pushReq) {
	c, ok := p.children[m.key]
	if !ok {
		var err error
		if c, err = p.spawn(ctx, m.key); err != nil {
			m.respond(pushResp{err: err})
			return
		}
		p.enforce(ctx)
	}
	c.last = p.host.clock()
	if !c.stopping && p.lru.next != c {
		p.unlink(c)
		p.link(c, false)
	}
	if c.stopping {
		c.held = append(c.held, m)
		if p.host.cfg.onHeld != nil {
			p.host.cfg.onHeld(m.key)
		}
		return
	}
	ctx.Send(c.pid, m)
}

// sweep asks the idle (or matching) partition actors to passivate, then
// enforces the bound on active actors.
func (p *parentActor) sweep(ctx actor.Context, m *passivateSweep) {
	if m.idle {
		for _, c := range p.children {
			if !c.stopping && c.last <= m.cutoff {
				p.ask(ctx, c, false)
			}
		}
	}
	if m.match != nil {
		for k, c := range p.children {
			if !c.stopping && m.match(k.queue, k.partition) {
				p.ask(ctx, c, false)
			}
		}
	}
	p.enforce(ctx)
}

// refused puts back a partition actor that was busy when asked to
// passivate: back where it was asked from (the back, when it was the least
// recently pushed), or to the front if pushes came meanwhile, which it then
// gets.
func (p *parentActor) refused(ctx actor.Context, m *passivateRefused) {
	c := p.children[m.key]
	if c == nil || !c.stopping {
		return
	}
	c.stopping, c.pressured = false, false
	p.live++
	p.link(c, len(c.held) == 0)
	for _, r := range c.held {
		ctx.Send(c.pid, r)
	}
	c.held = nil
}

// stopAll stops every partition actor and waits: each answers what it
// still holds with ErrShuttingDown, and so does the parent for the pushes
// it holds for stopping ones (only left when Stop's drain ended early).
func (p *parentActor) stopAll(ctx actor.Context) {
	root := ctx.ActorSystem().Root
	futs := make([]*actor.Future, 0, len(p.children))
	for _, c := range p.children {
		futs = append(futs, root.StopFuture(c.pid))
		for _, r := range c.held {
			r.respond(pushResp{err: queen.ErrShuttingDown})
		}
		c.held = nil
	}
	for _, f := range futs {
		f.Wait() //nolint:errcheck
	}
}

// stopped forgets a partition actor that has stopped: a passivation is
// counted and remembered (its id, for a quick reactivation), a failure
// leaves the next push to spawn a new one, and pushes held while it
// stopped go to a new incarnation in the order they arrived.
func (p *parentActor) stopped(ctx actor.Context, m *partitionStopped) {
	if p.host.stopping.Load() {
		return // the host is stopping every actor
	}
	c := p.children[m.key]
	if c == nil || !c.pid.Equal(m.pid) {
		return
	}
	delete(p.children, m.key)
	p.host.active.Add(-1)
	p.shrink()
	if !c.stopping {
		// Not a passivation (the guardian stopped a failing actor): the
		// next push spawns a new one.
		p.unlink(c)
		p.live--
		return
	}
	p.host.passivated.Add(1)
	if c.pressured {
		p.host.pressured.Add(1)
	}
	if p.recent == nil {
		p.recent = make([]uint64, recentBits/64)
	}
	b := recentBit(m.key)
	p.recent[b/64] |= 1 << (b % 64)
	p.rememberID(m.key, m.id)
	if len(c.held) == 0 {
		return
	}
	n, err := p.spawn(ctx, m.key)
	if err != nil {
		for _, r := range c.held {
			r.respond(pushResp{err: err})
		}
		return
	}
	n.last = c.last
	for _, r := range c.held {
		ctx.Send(n.pid, r)
	}
	p.enforce(ctx)
}

// shrink rebuilds the children map once it holds under a quarter of its
// peak: a Go map keeps the buckets of its largest size, so a burst of
// partitions, passivated since, would otherwise hold their entries' memory.
func (p *parentActor) shrink() {
	n := len(p.children)
	if n > p.peak {
		p.peak = n
	}
	if p.peak < 1024 || n*4 > p.peak {
		return
	}
	m := make(map[partitionKey]*child, n)
	for k, c := range p.children {
		m[k] = c
	}
	p.children, p.peak = m, n
}

// spawn starts the actor of partition k; a partition passivated before
// starts with a cold cache (HashCache.StartCold).
func (p *parentActor) spawn(ctx actor.Context, k partitionKey) (*child, error) {
	p.seq++
	// The names may be slices of a request body: keep copies only.
	k = partitionKey{strings.Clone(k.queue), strings.Clone(k.partition)}
	cold := false
	if p.recent != nil {
		b := recentBit(k)
		cold = p.recent[b/64]&(1<<(b%64)) != 0
	}
	a := &partitionActor{host: p.host, key: k, partitionID: p.knownID(k), cache: p.host.cfg.NewCache()}
	if cold {
		a.cache.StartCold()
	}
	// One Props for every partition (a Props is ~230 bytes): its producer
	// hands over the actor built here, since protoactor calls it inside
	// SpawnNamed, on this goroutine. It is called nowhere else: the
	// guardian stops a failing partition actor instead of restarting it
	// (a restart would build a fresh actor and lose the pushes it held;
	// stopping answers them, and the next push spawns a new one).
	//
	// Spawned at the root, not as children: protoactor keeps a parent's
	// children in a PIDSet whose removals leave stale pointers in its
	// backing array, which kept every passivated actor (mailbox, state,
	// cache) reachable. An actor reports its own end (partitionStopped),
	// so no watch (and no per-actor watcher set) is needed either.
	p.next = a
	pid, err := ctx.ActorSystem().Root.SpawnNamed(p.props(), "p"+strconv.Itoa(p.seq))
	p.next = nil
	if err != nil {
		return nil, queen.ErrInternal.With("spawn partition actor %s: %v", k, err)
	}
	c := &child{pid: pid}
	p.children[k] = c
	p.link(c, false)
	p.live++
	p.host.active.Add(1)
	return c, nil
}

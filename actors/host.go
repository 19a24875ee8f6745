package actors

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence"
)

// Store is what partition actors need from persistence.
type Store interface {
	// EnsurePartition returns the partition's id, creating queue and partition on first use.
	EnsurePartition(ctx context.Context, queue, partition string) (uuid.UUID, error)
	// CommitBundle runs one push transaction for several partitions (SPEC.md §3).
	CommitBundle(ctx context.Context, bs []*persistence.PushBatch) ([]persistence.PushOutcome, error)
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
	// MaxBundlePartitions caps the partitions of one transaction. Default 64.
	MaxBundlePartitions int
	// MaxBundleItems caps the items of one transaction. Default 20000.
	MaxBundleItems int
	// CommitTimeout bounds one push transaction. Default 30s.
	CommitTimeout time.Duration
	// NewCache builds a partition's hash cache; nil means no cache (watermark -1).
	NewCache func() HashCache
	Metrics  *queen.Metrics
	Logger   *slog.Logger
}

// Host owns the actor system and the parent of the partition actors.
type Host struct {
	cfg      Config
	metrics  *queen.Metrics
	log      *slog.Logger
	system   *actor.ActorSystem
	parent   *actor.PID
	inflight atomic.Int64
	inBytes  atomic.Int64
	commits  atomic.Uint64
	mu       sync.RWMutex
	closed   bool
	wg       sync.WaitGroup
	bundler  *bundler
}

type partitionKey struct{ queue, partition string }

// NewHost starts the actor system and the partitions' parent actor.
func NewHost(cfg Config) *Host {
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
	if cfg.MaxBundlePartitions <= 0 {
		cfg.MaxBundlePartitions = 64
	}
	if cfg.MaxBundleItems <= 0 {
		cfg.MaxBundleItems = 20000
	}
	if cfg.CommitTimeout <= 0 {
		cfg.CommitTimeout = 30 * time.Second
	}
	if cfg.Metrics == nil {
		cfg.Metrics = queen.NewMetrics()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.NewCache == nil {
		cfg.NewCache = func() HashCache { return noCache{} }
	}
	h := &Host{cfg: cfg, metrics: cfg.Metrics, log: cfg.Logger}
	h.bundler = newBundler(h)
	quiet := slog.New(slog.NewTextHandler(discard{}, nil))
	h.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	h.parent = h.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &parentActor{host: h, children: map[partitionKey]*actor.PID{}}
	}))
	return h
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
// (or ctx to end), then stops every actor.
func (h *Host) Stop(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	h.system.Root.StopFuture(h.parent).Wait() //nolint:errcheck
	h.bundler.stop()
	h.system.Shutdown()
	return err
}

// parentActor spawns partition actors lazily and forwards pushes to them.
type parentActor struct {
	host     *Host
	children map[partitionKey]*actor.PID
	seq      int
}

func (p *parentActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *pushReq:
		pid, ok := p.children[m.key]
		if !ok {
			p.seq++
			key := m.key
			props := actor.PropsFromProducer(func() actor.Actor {
				return &partitionActor{host: p.host, key: key, cache: p.host.cfg.NewCache()}
			})
			var err error
			pid, err = ctx.SpawnNamed(props, "p"+strconv.Itoa(p.seq))
			if err != nil {
				m.respond(pushResp{err: queen.ErrInternal.With("spawn partition actor %s: %v", key, err)})
				return
			}
			p.children[m.key] = pid
		}
		ctx.Send(pid, m)
	case *actor.Terminated:
		for k, pid := range p.children {
			if pid.Equal(m.Who) {
				delete(p.children, k)
			}
		}
	}
}

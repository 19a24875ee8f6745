package actors

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/internal/storetest"
)

// fakeClock is an injected idle clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func pushTxn(t *testing.T, h *Host, partition, txn string) queen.Result {
	t.Helper()
	it := item(txn)
	it.Partition = partition
	rs, err := h.Push(context.Background(), "q", partition, []*queen.Item{it})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	return rs[0]
}

func cachedHost(t *testing.T, cfg Config) (*Host, *Cache) {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = storetest.NewMem()
	}
	cache := NewCache(CacheConfig{Source: emptySidecar{}, Logger: quiet()})
	cfg.NewCache, cfg.Logger = cache.New, quiet()
	h := startHost(t, cfg)
	t.Cleanup(func() { h.Stop(context.Background()) }) //nolint:errcheck
	return h, cache
}

// TestPassivationThenReactivationKeepsVerdictsExact: a repeat pushed to a
// passivated partition reactivates it and is a duplicate of the original
// (SPEC.md §3, §8); the reactivated cache starts cold and holds nothing.
func TestPassivationThenReactivationKeepsVerdictsExact(t *testing.T) {
	h, cache := cachedHost(t, Config{})
	orig := pushTxn(t, h, "p", "t1")
	require.Equal(t, queen.Queued, orig.Verdict)
	require.Equal(t, queen.Duplicate, pushTxn(t, h, "p", "t1").Verdict)
	require.NotZero(t, cache.Stats().Bytes, "the partition's cache holds its hash")

	passivateUntil(t, h, 0, func() bool { return h.PartitionStats().Active == 0 })
	require.Equal(t, uint64(1), h.PartitionStats().Passivated)
	require.Zero(t, cache.Stats().Bytes, "a passivated partition's cache holds nothing")

	again := pushTxn(t, h, "p", "t1")
	require.Equal(t, queen.Duplicate, again.Verdict)
	require.Equal(t, orig.MessageID, again.MessageID, "the duplicate echoes the original's message id")
	require.Equal(t, queen.Queued, pushTxn(t, h, "p", "t2").Verdict)
	require.Equal(t, int64(1), h.PartitionStats().Active)
	st := cache.Stats()
	require.Zero(t, st.Bytes, "the reactivated cache is cold: it gathers nothing for a window")
	require.Zero(t, st.Hydrations, "reactivation reads no window back")
}

// TestRepeatArrivingWhileTheActorStopsIsAnsweredOnce: a push that reaches
// the parent while the partition's actor is stopping is held, then handed
// to the next incarnation once the old one has stopped: one answer, exact.
func TestRepeatArrivingWhileTheActorStopsIsAnsweredOnce(t *testing.T) {
	stopping, release, held := make(chan struct{}), make(chan struct{}), make(chan struct{}, 4)
	h, _ := cachedHost(t, Config{
		onStopping: func(partitionKey) { close(stopping); <-release },
		onHeld:     func(partitionKey) { held <- struct{}{} },
	})
	orig := pushTxn(t, h, "p", "t1")
	require.Equal(t, queen.Queued, orig.Verdict)

	// The actor decides to stop and waits in the hook.
	passivateUntil(t, h, 0, func() bool {
		select {
		case <-stopping:
			return true
		default:
			return false
		}
	})
	rep := item("t1")
	pend, err := h.Enqueue("q", "p", []*queen.Item{rep, item("t3")})
	require.NoError(t, err)
	<-held // the parent holds it: the old actor is still alive
	require.Equal(t, int64(1), h.PartitionStats().Active)
	close(release)

	rs, err := pend.Wait(context.Background())
	require.NoError(t, err)
	require.Equal(t, queen.Duplicate, rs[0].Verdict)
	require.Equal(t, orig.MessageID, rs[0].MessageID)
	require.Equal(t, queen.Queued, rs[1].Verdict)
	st := h.PartitionStats()
	require.Equal(t, int64(1), st.Active, "one incarnation alive")
	require.Equal(t, uint64(1), st.Passivated)
}

// TestABusyPartitionIsNotPassivated: an actor with a commit running refuses
// to stop; the push held meanwhile is forwarded to it.
func TestABusyPartitionIsNotPassivated(t *testing.T) {
	st := &fakeStore{gate: make(chan struct{}), started: make(chan struct{}, 10)}
	// The refusal waits until the second push is held: otherwise it may
	// reach the parent first, and the push would not be held at all.
	held := make(chan struct{})
	h := startHost(t, Config{Store: st, Logger: quiet(),
		onHeld:     func(partitionKey) { close(held) },
		onRefusing: func(partitionKey) { <-held }})
	defer h.Stop(context.Background()) //nolint:errcheck
	first, err := h.Enqueue("q", "p", []*queen.Item{item("a")})
	require.NoError(t, err)
	<-st.started // committing
	h.Passivate(0)
	second, err := h.Enqueue("q", "p", []*queen.Item{item("b")})
	require.NoError(t, err)
	<-held
	st.gate <- struct{}{}
	<-st.started
	st.gate <- struct{}{}
	for _, p := range []*Pending{first, second} {
		rs, err := p.Wait(context.Background())
		require.NoError(t, err)
		require.Equal(t, queen.Queued, rs[0].Verdict)
	}
	require.Equal(t, PartitionStats{Active: 1, Bytes: ActivePartitionBytes}, h.PartitionStats())
}

// TestOnlyIdlePartitionsArePassivated: the idle time is measured on the
// injected clock from each partition's last push.
func TestOnlyIdlePartitionsArePassivated(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	h, _ := cachedHost(t, Config{Now: clk.Now})
	pushTxn(t, h, "old", "t1")
	clk.advance(time.Minute)
	pushTxn(t, h, "new", "t1")
	clk.advance(time.Minute)
	// "old" is 2m idle, "new" 1m.
	passivateUntil(t, h, 90*time.Second, func() bool { return h.PartitionStats().Passivated == 1 })
	require.Equal(t, int64(1), h.PartitionStats().Active)
	passivateUntil(t, h, 0, func() bool { return h.PartitionStats().Active == 0 })
	require.Equal(t, uint64(2), h.PartitionStats().Passivated)
}

// panicCache panics in Prepare while armed.
type panicCache struct {
	noCache
	armed *atomic.Bool
}

func (c panicCache) Prepare(b *queen.PushBatch) {
	if c.armed.Load() {
		panic("test: cache fails")
	}
	c.noCache.Prepare(b)
}

// TestAFailingPartitionActorIsStoppedAndAnswers: a partition actor that
// panics is stopped, not restarted (the shared Props' producer can only
// build an actor during spawn): the push it held is answered (retryable),
// and the next push spawns a new actor.
func TestAFailingPartitionActorIsStoppedAndAnswers(t *testing.T) {
	armed := &atomic.Bool{}
	armed.Store(true)
	h := startHost(t, Config{Store: storetest.NewMem(), Logger: quiet(), NewCache: func() HashCache { return panicCache{armed: armed} }})
	defer h.Stop(context.Background()) //nolint:errcheck
	_, err := h.Push(context.Background(), "q", "p", []*queen.Item{item("t1")})
	require.ErrorIs(t, err, queen.ErrShuttingDown)
	waitFor(t, func() bool { return h.PartitionStats().Active == 0 })
	armed.Store(false)
	require.Equal(t, queen.Queued, pushTxn(t, h, "p", "t1").Verdict)
	require.Equal(t, queen.Duplicate, pushTxn(t, h, "p", "t1").Verdict)
	require.Equal(t, int64(1), h.PartitionStats().Active)
}

// TestPressurePassivatesTheLeastRecentlyPushedFirst: over
// MaxActivePartitions, the partitions pushed least recently are passivated
// first, whatever PartitionIdle says (off here); a repeat to one of them
// reactivates it cold and is a duplicate with the original's message id.
func TestPressurePassivatesTheLeastRecentlyPushedFirst(t *testing.T) {
	var mu sync.Mutex
	var stopped []string
	h, cache := cachedHost(t, Config{MaxActivePartitions: 3, onStopping: func(k partitionKey) {
		mu.Lock()
		stopped = append(stopped, k.partition)
		mu.Unlock()
	}})
	stoppedNow := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), stopped...)
	}
	// settle re-asks (as the next spawn would) until n partitions were
	// passivated: an actor that has just answered a push may refuse once,
	// before its commitDone.
	settle := func(n uint64) {
		waitFor(t, func() bool {
			if h.PartitionStats().PressurePassivated >= n && h.PartitionStats().Active <= 3 {
				return true
			}
			h.enforceBound()
			return false
		})
	}
	orig := map[string]queen.Result{}
	for _, p := range []string{"a", "b", "c"} {
		orig[p] = pushTxn(t, h, p, "t-"+p)
		require.Equal(t, queen.Queued, orig[p].Verdict)
	}
	pushTxn(t, h, "a", "t-a2") // order now a, c, b
	require.Equal(t, int64(3), h.PartitionStats().Active)

	pushTxn(t, h, "d", "t-d")
	settle(1)
	require.Equal(t, []string{"b"}, stoppedNow(), "the least recently pushed goes first")
	pushTxn(t, h, "e", "t-e") // e, d, a, c: c goes
	settle(2)
	require.Equal(t, []string{"b", "c"}, stoppedNow())

	again := pushTxn(t, h, "b", "t-b") // b, e, d, a: a goes
	require.Equal(t, queen.Duplicate, again.Verdict)
	require.Equal(t, orig["b"].MessageID, again.MessageID, "the duplicate echoes the original's message id")
	settle(3)
	require.Equal(t, []string{"b", "c", "a"}, stoppedNow())
	for _, p := range []string{"a", "c"} {
		r := pushTxn(t, h, p, "t-"+p)
		require.Equal(t, queen.Duplicate, r.Verdict)
		require.Equal(t, orig[p].MessageID, r.MessageID)
	}
	settle(5)
	st := h.PartitionStats()
	require.Equal(t, int64(3), st.Active)
	require.Equal(t, uint64(5), st.Passivated)
	require.Equal(t, 3, st.MaxActive)
	require.Equal(t, 3*int64(ActivePartitionBytes), st.Bytes)
	require.Zero(t, cache.Stats().Hydrations, "reactivation reads no window back")
}

// TestARefusedPartitionIsAskedAgainOnceIdle: a partition asked to
// passivate for the bound while committing refuses; once its commit ends it
// tells the parent, which asks again: the bound holds with no further
// spawn and no sweep.
func TestARefusedPartitionIsAskedAgainOnceIdle(t *testing.T) {
	st := &fakeStore{gate: make(chan struct{}), started: make(chan struct{}, 10)}
	refused := make(chan struct{}, 4)
	h := startHost(t, Config{Store: st, Logger: quiet(), MaxActivePartitions: 1,
		onRefusing: func(partitionKey) { refused <- struct{}{} }})
	defer h.Stop(context.Background()) //nolint:errcheck
	first, err := h.Enqueue("q", "a", []*queen.Item{item("x")})
	require.NoError(t, err)
	<-st.started // a commits
	second, err := h.Enqueue("q", "b", []*queen.Item{item("y")})
	require.NoError(t, err)
	<-refused // b's spawn asked a, which is committing
	st.gate <- struct{}{}
	<-st.started
	st.gate <- struct{}{}
	for _, p := range []*Pending{first, second} {
		rs, err := p.Wait(context.Background())
		require.NoError(t, err)
		require.Equal(t, queen.Queued, rs[0].Verdict)
	}
	waitFor(t, func() bool { return h.PartitionStats().Active == 1 })
	require.Equal(t, uint64(1), h.PartitionStats().PressurePassivated)
}

// TestPassivateWhereStopsTheMatchingPartitions: the partitions of shards
// this broker lost (any predicate) are passivated at once, the others stay.
func TestPassivateWhereStopsTheMatchingPartitions(t *testing.T) {
	var mu sync.Mutex
	stopped := map[string]bool{}
	h, _ := cachedHost(t, Config{onStopping: func(k partitionKey) {
		mu.Lock()
		stopped[k.partition] = true
		mu.Unlock()
	}})
	for _, p := range []string{"a", "b", "c", "d"} {
		pushTxn(t, h, p, "t")
	}
	lost := map[string]bool{"a": true, "c": true}
	waitFor(t, func() bool {
		if h.PartitionStats().Active == 2 {
			return true
		}
		h.PassivateWhere(func(_, partition string) bool { return lost[partition] })
		return false
	})
	mu.Lock()
	require.Equal(t, lost, stopped)
	mu.Unlock()
	require.Equal(t, queen.Duplicate, pushTxn(t, h, "a", "t").Verdict)
}

// TestAReactivatedPartitionKeepsItsID: a passivated partition's id is
// remembered, so its reactivation commits without looking the id up again.
func TestAReactivatedPartitionKeepsItsID(t *testing.T) {
	st := storetest.NewMem()
	h, _ := cachedHost(t, Config{Store: st})
	orig := pushTxn(t, h, "p", "t1")
	require.Equal(t, int64(1), st.Ensures())
	passivateUntil(t, h, 0, func() bool { return h.PartitionStats().Active == 0 })
	again := pushTxn(t, h, "p", "t1")
	require.Equal(t, queen.Duplicate, again.Verdict)
	require.Equal(t, orig.MessageID, again.MessageID)
	require.Equal(t, orig.PartitionID, again.PartitionID)
	require.Equal(t, int64(1), st.Ensures(), "the id was not looked up again")
}

// TestACommitNothingWaitsForLeavesTheActorIdle (issue 42): once a
// partition's id is known, a commit that succeeded and that nothing waited
// for finishes without a commitDone message, decided before its push is
// answered: the actor is idle once the answer is out, so a single
// passivation asked then stops it (an actor still waiting for its
// commitDone refuses, and this test asks only once); pushes before and
// after stay exact. A push that comes while a commit is in flight still
// gets one (TestPushesDuringACommitAreFusedAfterIt).
func TestACommitNothingWaitsForLeavesTheActorIdle(t *testing.T) {
	var refusals, dones atomic.Int32
	h, _ := cachedHost(t, Config{
		onRefusing:   func(partitionKey) { refusals.Add(1) },
		onCommitDone: func(partitionKey) { dones.Add(1) },
	})
	first := pushTxn(t, h, "p", "t0")
	require.Equal(t, queen.Queued, first.Verdict)
	// The first commit resolved the partition's id: its commitDone carries it.
	waitFor(t, func() bool { return dones.Load() == 1 })
	second := pushTxn(t, h, "p", "t1")
	require.Equal(t, queen.Queued, second.Verdict)
	require.Equal(t, first.Offset+1, second.Offset)
	h.Passivate(0)
	waitFor(t, func() bool { return h.PartitionStats().Active == 0 })
	require.Zero(t, refusals.Load(), "the actor was idle when its push was answered")
	require.Equal(t, int32(1), dones.Load(), "the second commit finished without a commitDone")
	again := pushTxn(t, h, "p", "t1")
	require.Equal(t, queen.Duplicate, again.Verdict)
	require.Equal(t, second.MessageID, again.MessageID)
	require.Equal(t, queen.Queued, pushTxn(t, h, "p", "t2").Verdict)
}

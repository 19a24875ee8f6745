package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/internal/storetest"
)

// fakeStore answers commits from memory: every leader is queued at the next
// offset, followers echo their leader. gate, when set, holds each commit
// until a value is received, so tests control when commits finish.
type fakeStore struct {
	mu      sync.Mutex
	next    int64
	commits [][]string
	gate    chan struct{}
	started chan struct{}
	err     error
}

func (f *fakeStore) EnsurePartitions(_ context.Context, keys []queen.PartitionKey) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, len(keys))
	for i := range ids {
		ids[i] = uuid.MustParse("00000000-0000-0000-0000-000000000001")
	}
	return ids, nil
}

func (f *fakeStore) CommitBundle(ctx context.Context, bs []*queen.PushBatch) ([]queen.PushOutcome, error) {
	var outs []queen.PushOutcome
	var err error
	for _, b := range bs {
		out, e := f.commit(ctx, b)
		outs = append(outs, out)
		err = e
	}
	return outs, err
}

func (f *fakeStore) commit(ctx context.Context, b *queen.PushBatch) (queen.PushOutcome, error) {
	if f.started != nil {
		f.started <- struct{}{}
	}
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := queen.PushOutcome{Results: make([]queen.Result, len(b.Items)), Window: 3600}
	var txns []string
	for i, it := range b.Items {
		txns = append(txns, it.TransactionID)
		if f.err != nil {
			out.Results[i] = queen.Result{Verdict: queen.Failed, Err: queen.AsError(f.err)}
			continue
		}
		if l := int(b.LeaderOf[i]); l != i {
			out.Results[i] = queen.Result{Verdict: queen.Duplicate, MessageID: out.Results[l].MessageID, Offset: out.Results[l].Offset}
			continue
		}
		out.Results[i] = queen.Result{Verdict: queen.Queued, MessageID: uuid.New(), Offset: f.next}
		f.next++
	}
	f.commits = append(f.commits, txns)
	return out, f.err
}

func item(txn string) *queen.Item {
	return &queen.Item{Queue: "q", Partition: "p", TransactionID: txn, Payload: []byte(`{}`), Hash: queen.HashTxn(txn)}
}

func TestPushesWaitingDuringACommitAreFused(t *testing.T) {
	st := &fakeStore{gate: make(chan struct{}), started: make(chan struct{}, 100)}
	h := startHost(t, Config{Store: st})
	defer h.Stop(context.Background()) //nolint:errcheck

	first, err := h.Enqueue("q", "p", []*queen.Item{item("a")})
	require.NoError(t, err)
	<-st.started // the first commit is in flight and held
	var pend []*Pending
	for i := 0; i < 10; i++ {
		p, err := h.Enqueue("q", "p", []*queen.Item{item(fmt.Sprintf("x%d", i)), item("dup")})
		require.NoError(t, err)
		pend = append(pend, p)
	}
	// Requests reach the actor in order; release the first commit only once
	// all ten wait in its mailbox, so they fuse into exactly one commit.
	require.Eventually(t, func() bool { return pendingItems(h) == 20 }, 5*time.Second, time.Millisecond)
	st.gate <- struct{}{}
	_, err = first.Wait(context.Background())
	require.NoError(t, err)
	<-st.started
	st.gate <- struct{}{}
	var dupLeaderID uuid.UUID
	for i, p := range pend {
		rs, err := p.Wait(context.Background())
		require.NoError(t, err)
		require.Len(t, rs, 2)
		require.Equal(t, queen.Queued, rs[0].Verdict)
		if i == 0 {
			require.Equal(t, queen.Queued, rs[1].Verdict, "first occurrence in the fused batch leads")
			dupLeaderID = rs[1].MessageID
		} else {
			require.Equal(t, queen.Duplicate, rs[1].Verdict, "later fused requests follow the leader")
			require.Equal(t, dupLeaderID, rs[1].MessageID)
		}
	}
	require.Equal(t, uint64(2), h.Commits(), "11 requests, 2 commits")
	require.Len(t, st.commits[1], 20)
}

// TestPushesDuringACommitAreFusedAfterIt (issue 42): with the partition's
// id known, a commit may finish without a commitDone when nothing waits for
// it (partitionActor.flight); a push that comes while it is in flight makes
// the actor wait for one, so the push is committed right after it instead
// of waiting for a commitDone that never comes.
func TestPushesDuringACommitAreFusedAfterIt(t *testing.T) {
	st := &fakeStore{gate: make(chan struct{}), started: make(chan struct{}, 100)}
	var dones atomic.Int32
	h := startHost(t, Config{Store: st, onCommitDone: func(partitionKey) { dones.Add(1) }})
	defer h.Stop(context.Background()) //nolint:errcheck
	// Should the test fail, a commit held at the gate goes on, so Stop
	// returns (deferred calls run in reverse).
	defer close(st.gate)

	first, err := h.Enqueue("q", "p", []*queen.Item{item("a")})
	require.NoError(t, err)
	<-st.started
	st.gate <- struct{}{}
	_, err = first.Wait(context.Background())
	require.NoError(t, err)
	// The first commit resolved the partition's id: its commitDone carries it.
	require.Eventually(t, func() bool { return dones.Load() == 1 }, 5*time.Second, time.Millisecond)

	second, err := h.Enqueue("q", "p", []*queen.Item{item("b")})
	require.NoError(t, err)
	<-st.started // in flight and held
	third, err := h.Enqueue("q", "p", []*queen.Item{item("c")})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return pendingItems(h) == 1 }, 5*time.Second, time.Millisecond)
	st.gate <- struct{}{}
	rs, err := second.Wait(context.Background())
	require.NoError(t, err)
	require.Equal(t, queen.Queued, rs[0].Verdict)
	select {
	case <-st.started: // the third push's commit, after the second's
	case <-time.After(10 * time.Second):
		t.Fatal("the push that came during the second commit was never committed")
	}
	st.gate <- struct{}{}
	rs, err = third.Wait(context.Background())
	require.NoError(t, err)
	require.Equal(t, queen.Queued, rs[0].Verdict)
	require.Equal(t, [][]string{{"a"}, {"b"}, {"c"}}, st.commits)
	require.Equal(t, int32(2), dones.Load(), "the second commit's outcome told the waiting actor; the third's finished without")
}

// TestRequestsLeftByTheFuseLimitsAreCommitted (issue 42): a commit that
// takes only part of the waiting requests (MaxFusedItems) starts waiting
// for its outcome's commitDone, so the requests it left are committed after
// it; finishing it without one stranded them until the next push.
func TestRequestsLeftByTheFuseLimitsAreCommitted(t *testing.T) {
	st := &fakeStore{gate: make(chan struct{}), started: make(chan struct{}, 100)}
	h := startHost(t, Config{Store: st, MaxFusedItems: 1})
	defer func() {
		// Bounded: should the test fail, a request may never be answered.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.Stop(ctx) //nolint:errcheck
	}()
	// Should the test fail, a commit held at the gate goes on (deferred
	// calls run in reverse).
	defer close(st.gate)
	commitAt := func(what string) {
		t.Helper()
		select {
		case <-st.started:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s was never committed (%d items waiting)", what, pendingItems(h))
		}
		st.gate <- struct{}{}
	}

	first, err := h.Enqueue("q", "p", []*queen.Item{item("a")})
	require.NoError(t, err)
	commitAt("a")
	_, err = first.Wait(context.Background())
	require.NoError(t, err)
	var pend []*Pending
	for _, txn := range []string{"b", "c", "d"} {
		p, err := h.Enqueue("q", "p", []*queen.Item{item(txn)})
		require.NoError(t, err)
		pend = append(pend, p)
		if txn == "b" {
			<-st.started // b in flight and held; c and d wait behind it
		}
	}
	require.Eventually(t, func() bool { return pendingItems(h) == 2 }, 5*time.Second, time.Millisecond)
	st.gate <- struct{}{} // b
	commitAt("c")         // one item a commit: d stays waiting
	commitAt("d")
	for _, p := range pend {
		rs, err := p.Wait(context.Background())
		require.NoError(t, err)
		require.Equal(t, queen.Queued, rs[0].Verdict)
	}
	require.Equal(t, [][]string{{"a"}, {"b"}, {"c"}, {"d"}}, st.commits)
}

func pendingItems(h *Host) int {
	// The mailbox gauge counts items waiting in partition actors.
	m := &dtoGauge{}
	return m.read(h)
}

func TestOverloadIsAFastError(t *testing.T) {
	st := &fakeStore{gate: make(chan struct{}), started: make(chan struct{}, 100)}
	h := startHost(t, Config{Store: st, MaxPendingItems: 5})
	defer func() {
		close(st.gate)
		h.Stop(context.Background()) //nolint:errcheck
	}()
	held, err := h.Enqueue("q", "p", []*queen.Item{item("a")})
	require.NoError(t, err)
	<-st.started
	ok, err := h.Enqueue("q", "p", []*queen.Item{item("b"), item("c"), item("d"), item("e")})
	require.NoError(t, err)
	over, err := h.Enqueue("q", "p", []*queen.Item{item("f"), item("g")})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = over.Wait(ctx)
	require.ErrorIs(t, err, queen.ErrOverloaded, "a full mailbox answers at once, while the commit is still held")
	_ = ok
	_ = held
}

func TestStopDrainsInFlightPushes(t *testing.T) {
	st := &fakeStore{gate: make(chan struct{}), started: make(chan struct{}, 100)}
	h := startHost(t, Config{Store: st})
	p, err := h.Enqueue("q", "p", []*queen.Item{item("a")})
	require.NoError(t, err)
	<-st.started
	stopped := make(chan error)
	go func() { stopped <- h.Stop(context.Background()) }()
	// New pushes are refused while draining.
	require.Eventually(t, func() bool {
		_, err := h.Enqueue("q", "p", []*queen.Item{item("late")})
		return errors.Is(err, queen.ErrShuttingDown)
	}, 5*time.Second, time.Millisecond)
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) before the in-flight commit finished", err)
	default:
	}
	close(st.gate) // release this commit and any "late" push enqueued before the drain began
	rs, err := p.Wait(context.Background())
	require.NoError(t, err)
	require.Equal(t, queen.Queued, rs[0].Verdict)
	require.NoError(t, <-stopped)
}

func TestCommitErrorFailsEveryItem(t *testing.T) {
	st := &fakeStore{err: queen.ErrUnavailable.With("db down")}
	h := startHost(t, Config{Store: st})
	defer h.Stop(context.Background()) //nolint:errcheck
	rs, err := h.Push(context.Background(), "q", "p", []*queen.Item{item("a"), item("b")})
	require.NoError(t, err)
	for _, r := range rs {
		require.Equal(t, queen.Failed, r.Verdict)
		require.Equal(t, "unavailable", r.Err.Code)
	}
}

func TestByteBoundsRefuseLargeBodies(t *testing.T) {
	st := &fakeStore{gate: make(chan struct{}), started: make(chan struct{}, 100)}
	h := startHost(t, Config{Store: st, MaxPendingBytes: 1 << 20, MaxInFlightBytes: 3 << 20})
	defer func() {
		close(st.gate)
		h.Stop(context.Background()) //nolint:errcheck
	}()
	big := func(txn string) *queen.Item {
		it := item(txn)
		it.Payload = make([]byte, 600<<10)
		return it
	}
	held, err := h.Enqueue("q", "p", []*queen.Item{big("a")})
	require.NoError(t, err)
	<-st.started // the first commit is in flight and held
	_, err = h.Enqueue("q", "p", []*queen.Item{big("b")})
	require.NoError(t, err, "600 KiB waits in a 1 MiB mailbox")
	over, err := h.Enqueue("q", "p", []*queen.Item{big("c")})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = over.Wait(ctx)
	require.ErrorIs(t, err, queen.ErrOverloaded, "a second 600 KiB request overflows the partition's 1 MiB mailbox")

	// Across partitions, the host's byte budget (3 MiB) refuses at Enqueue.
	_, err = h.Enqueue("q", "p2", []*queen.Item{big("d"), big("e")})
	require.NoError(t, err)
	_, err = h.Enqueue("q", "p3", []*queen.Item{big("f"), big("g")})
	require.ErrorIs(t, err, queen.ErrOverloaded)
	_ = held
}

// startHost is NewHost and Start for valid settings; the caller may stop
// it, and the test's cleanup does.
func startHost(tb testing.TB, cfg Config) *Host {
	tb.Helper()
	h, err := NewHost(cfg)
	require.NoError(tb, err)
	require.NoError(tb, h.Start(context.Background()))
	tb.Cleanup(func() {
		// Stop is idempotent: this releases the host's goroutines when a
		// test did not stop it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.Stop(ctx) //nolint:errcheck
	})
	return h
}

// TestNewHostRefusesInvalidSettings: a bad setting is refused, named; a
// host not started refuses pushes and stops; Start and Stop are idempotent.
func TestNewHostRefusesInvalidSettings(t *testing.T) {
	st := storetest.NewMem()
	for _, c := range []struct {
		cfg     Config
		setting string
	}{
		{Config{}, "Config.Store"},
		{Config{Store: st, MaxPendingItems: -1}, "Config.MaxPendingItems"},
		{Config{Store: st, MaxInFlightBytes: -1}, "Config.MaxInFlightBytes"},
		{Config{Store: st, Committers: -1}, "Config.Committers"},
		{Config{Store: st, CommitTimeout: -time.Second}, "Config.CommitTimeout"},
		{Config{Store: st, PartitionIdle: -time.Second}, "Config.PartitionIdle"},
		{Config{Store: st, MaxActivePartitions: -1}, "Config.MaxActivePartitions"},
	} {
		_, err := NewHost(c.cfg)
		require.ErrorContains(t, err, "actors: "+c.setting+" is ")
	}
	h, err := NewHost(Config{Store: st, Logger: quiet()})
	require.NoError(t, err)
	_, err = h.Enqueue("q", "p", []*queen.Item{item("a")})
	require.ErrorIs(t, err, queen.ErrShuttingDown, "not started")
	ctx := context.Background()
	require.NoError(t, h.Start(ctx))
	require.NoError(t, h.Start(ctx))
	_, err = h.Push(ctx, "q", "p", []*queen.Item{item("a")})
	require.NoError(t, err)
	require.NoError(t, h.Stop(ctx))
	require.NoError(t, h.Stop(ctx))
	never, err := NewHost(Config{Store: st})
	require.NoError(t, err)
	require.NoError(t, never.Stop(ctx), "a host never started stops")
}

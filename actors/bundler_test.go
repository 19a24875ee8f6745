package actors

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// items returns n items of partition p with transaction ids p-0, p-1, ...
func items(p string, n int) []*queen.Item {
	out := make([]*queen.Item, n)
	for i := range out {
		txn := fmt.Sprintf("%s-%d", p, i)
		out[i] = &queen.Item{Queue: "q", Partition: p, TransactionID: txn, Payload: []byte(`{}`), Hash: queen.HashTxn(txn)}
	}
	return out
}

// holdSetup starts a host whose store holds every commit until the test
// releases it, and puts one commit (partition p1, one item) in flight.
func holdSetup(t *testing.T, cfg Config) (*Host, *fakeStore, *Pending) {
	t.Helper()
	st := &fakeStore{gate: make(chan struct{}), started: make(chan struct{}, 10)}
	cfg.Store = st
	h := startHost(t, cfg)
	t.Cleanup(func() {
		close(st.gate)               // release whatever is still held
		h.Stop(context.Background()) //nolint:errcheck
	})
	first, err := h.Enqueue("q", "p1", items("p1", 1))
	require.NoError(t, err)
	<-st.started
	return h, st, first
}

// waitStarted waits for the next commit to begin.
func waitStarted(t *testing.T, st *fakeStore, why string) {
	t.Helper()
	select {
	case <-st.started:
	case <-time.After(10 * time.Second):
		t.Fatal(why)
	}
}

// While a commit is in flight, a few waiting items are held for the next
// bundle instead of a transaction of their own; they commit once it ends.
func TestFreeCommitterHoldsFewItems(t *testing.T) {
	h, st, first := holdSetup(t, Config{CommitHold: time.Hour})
	second, err := h.Enqueue("q", "p2", items("p2", 1))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return h.bundler.holds.Load() > 0 }, 10*time.Second, time.Millisecond,
		"the free committer holds the waiting item")
	require.Empty(t, st.started, "no second commit while the first is in flight")
	st.gate <- struct{}{}
	_, err = first.Wait(context.Background())
	require.NoError(t, err)
	waitStarted(t, st, "the held item is not committed after the first commit ended")
	st.gate <- struct{}{}
	rs, err := second.Wait(context.Background())
	require.NoError(t, err)
	require.Equal(t, queen.Queued, rs[0].Verdict)
}

// A hold ends CommitHold after the commit in flight began, even when that
// commit is still held (a row lock held elsewhere, a slow flush).
func TestHoldEndsAfterCommitHold(t *testing.T) {
	h, st, _ := holdSetup(t, Config{CommitHold: 20 * time.Millisecond})
	_, err := h.Enqueue("q", "p2", items("p2", 1))
	require.NoError(t, err)
	waitStarted(t, st, "the second commit never began while the first was held")
}

// ParallelItems waiting items start a second transaction at once.
func TestEnoughWaitingItemsCommitInParallel(t *testing.T) {
	h, st, _ := holdSetup(t, Config{CommitHold: time.Hour, ParallelItems: 3})
	_, err := h.Enqueue("q", "p2", items("p2", 3))
	require.NoError(t, err)
	waitStarted(t, st, "three waiting items did not start a second commit")
	require.Zero(t, h.bundler.holds.Load())
}

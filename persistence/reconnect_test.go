package persistence

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// terminateAll ends every other session of url's database, as a restart
// or a failover does (SQLSTATE 57P01), and waits until they are gone.
func terminateAll(t testing.TB, url string) int {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	var pids []int32
	// The sessions are chosen first (MATERIALIZED): a filter on the view
	// may run pg_terminate_backend before the datname test.
	require.NoError(t, c.QueryRow(ctx, `WITH mine AS MATERIALIZED (
			SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid())
		SELECT coalesce(array_agg(pid), '{}') FROM mine WHERE pg_terminate_backend(pid)`).Scan(&pids))
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&n))
		return n == 0
	}, 30*time.Second, 5*time.Millisecond)
	return len(pids)
}

// fillPool makes the pool hold n idle connections.
func fillPool(t testing.TB, s *Store, n int) {
	t.Helper()
	conns := make([]*pgxpool.Conn, n)
	for i := range conns {
		c, err := s.pool.Acquire(context.Background())
		require.NoError(t, err)
		conns[i] = c
	}
	for _, c := range conns {
		c.Release()
	}
}

// A push, a pop and an ack each handed a pooled connection the server
// ended while it sat in the pool (every session terminated with 57P01)
// succeed: the attempt runs again on a checked connection (SPEC.md §9).
// Pinging idle connections is turned off so that the dead ones are handed
// out.
func TestDeadPooledConnectionIsReplaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	s, err := Open(ctx, Config{URL: url, MaxConns: 4, idlePing: time.Hour})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)

	kill := func() int64 {
		fillPool(t, s, 4)
		require.Positive(t, terminateAll(t, url))
		return s.conns.retried.Load()
	}

	before := kill()
	out := commit(t, s, pid, items("q", "p", "m1", "m2"))
	require.Equal(t, []queen.Verdict{queen.Queued, queen.Queued}, verdicts(out))
	require.Greater(t, s.conns.retried.Load(), before, "the push met a dead connection")

	before = kill()
	res, st := pop(t, s, pid, g, 2)
	require.Equal(t, queen.PopDelivered, st)
	require.Equal(t, []string{"m1", "m2"}, txns(res))
	require.Greater(t, s.conns.retried.Load(), before, "the pop met a dead connection")

	before = kill()
	require.Equal(t, []queen.AckOutcome{queen.Acked, queen.Acked},
		ack(t, s, ackTxn(pid, g, "m1", queen.AckCompleted, res.LeaseID), ackTxn(pid, g, "m2", queen.AckCompleted, res.LeaseID)))
	require.Greater(t, s.conns.retried.Load(), before, "the ack met a dead connection")

	before = kill()
	again, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	require.Equal(t, pid, again)
	require.Greater(t, s.conns.retried.Load(), before, "the partition lookup met a dead connection")

	_, st = pop(t, s, pid, g, 2)
	require.Equal(t, queen.PopEmpty, st, "the acks committed once")
}

// Under load (pushes, pops and acks from several goroutines), every session
// of the database is terminated several times, as a restart does: no call
// answers unavailable. A commit whose answer was lost (commit_unknown) may
// happen when a session ends during its COMMIT round trip; its outcome is
// unknown, so it is left to the client's retry (none was counted here in
// practice).
func TestTerminatedSessionsUnderLoadAnswerNoUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	s, err := Open(ctx, Config{URL: url, MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	const partitions = 4
	pids := make([]uuid.UUID, partitions)
	for i := range pids {
		pids[i], err = s.EnsurePartition(ctx, "q", fmt.Sprintf("p%d", i))
		require.NoError(t, err)
	}

	var (
		ops     atomic.Int64
		mu      sync.Mutex
		errs    = map[string]int{}
		samples []string
	)
	fail := func(op string, err error) {
		code := queen.AsError(err).Code
		mu.Lock()
		errs[op+":"+code]++
		if len(samples) < 5 {
			samples = append(samples, op+": "+err.Error())
		}
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				p := (n + w) % partitions
				b := &queen.PushBatch{PartitionID: pids[p], Watermark: -1,
					Items: items("q", fmt.Sprintf("p%d", p), fmt.Sprintf("w%d-%d-a", w, n), fmt.Sprintf("w%d-%d-b", w, n))}
				if _, err := s.CommitBundle(ctx, []*queen.PushBatch{b}); err != nil {
					fail("push", err)
				}
				ops.Add(1)
			}
		})
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				pid := pids[(n+w)%partitions]
				res, st, err := popOne(ctx, s, queen.PopSpec{PartitionID: pid, Group: g, Batch: 10, SkipLocked: true})
				ops.Add(1)
				if err != nil {
					fail("pop", err)
					continue
				}
				if st != queen.PopDelivered {
					continue
				}
				acks := make([]queen.AckItem, len(res.Messages))
				for i, m := range res.Messages {
					acks[i] = ackTxn(pid, g, m.TransactionID, queen.AckCompleted, res.LeaseID)
				}
				if _, err := s.Ack(ctx, acks); err != nil {
					fail("ack", err)
				}
				ops.Add(1)
			}
		})
	}

	killed := 0
	for range 5 {
		from := ops.Load()
		require.Eventually(t, func() bool { return ops.Load() >= from+50 }, time.Minute, time.Millisecond, "the load goes on")
		killed += terminateAll(t, url)
	}
	from := ops.Load()
	require.Eventually(t, func() bool { return ops.Load() >= from+50 }, time.Minute, time.Millisecond, "the load goes on after the last termination")
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d operations, %d sessions terminated, %d dead connections met, %d attempts retried, errors %v",
		ops.Load(), killed, s.conns.broken.Load(), s.conns.retried.Load(), errs)
	require.Positive(t, s.conns.retried.Load(), "the load met dead connections")
	for k, n := range errs {
		if !strings.HasSuffix(k, ":"+queen.ErrCommitUnknown.Code) {
			t.Errorf("%d calls answered %s; first errors: %q", n, k, samples)
		}
	}
}

// A pop and an ack whose session ends right after the server ran their
// COMMIT (57P01, as a restart can end it between the COMMIT and the next
// message) took effect once and answer as such: the pop delivers its span
// under the lease it took, the ack answers acked (not stale, as an attempt
// run again did), and a failed ack counts one failed delivery (its retry
// counted two). The fault is a statement sent after each COMMIT that ends
// its own session.
func TestSessionEndedAfterCommitCommittedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	configure(t, s, "q", `{"retryLimit":5}`)
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "m1", "m2", "m3"))
	// Every COMMIT of a session from here on is followed by the end of the
	// session.
	s.afterCommit = `SELECT pg_terminate_backend(pg_backend_pid())`
	before := s.conns.retried.Load()

	res, st := pop(t, s, pid, g, 2)
	require.Equal(t, queen.PopCut, st, "the pop's lease is its own")
	require.Equal(t, []string{"m1", "m2"}, txns(res))
	lease := uuid.MustParse(*res.LeaseID)

	at := func(off int64, status queen.AckStatus) queen.AckItem {
		it := ackAt(pid, g, off)
		it.Status, it.LeaseID = status, &lease
		return it
	}
	require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, at(0, queen.AckCompleted)))
	require.Equal(t, []queen.AckOutcome{queen.RetryScheduled}, ack(t, s, at(1, queen.AckFailed)))
	require.Equal(t, before, s.conns.retried.Load(), "no attempt ran again")

	s.afterCommit = ""
	res, st = pop(t, s, pid, g, 1)
	require.Equal(t, queen.PopCut, st)
	require.Equal(t, []string{"m2"}, txns(res))
	require.Equal(t, 1, res.Messages[0].RetryCount, "one failed delivery counted")
}

// A transaction whose session ends right after its COMMIT ran committed:
// it is answered as committed, not as unavailable ("nothing written"), and
// its push is then a duplicate (SPEC.md §5).
func TestTransactionEndedAfterCommitCommitted(t *testing.T) {
	t.Parallel()
	s := setup(t)
	configure(t, s, "q", `{}`)
	s.afterCommit = `SELECT pg_terminate_backend(pg_backend_pid())`
	res, err := runTxn(s, txnPushOp(txnItem("q", "p", "t1")))
	require.NoError(t, err, "the COMMIT ran")
	require.Len(t, res, 1)
	require.Len(t, res[0].Push, 1)
	require.Equal(t, queen.Queued, res[0].Push[0].Verdict)

	s.afterCommit = ""
	_, err = runTxn(s, txnPushOp(txnItem("q", "p", "t1")))
	c := txnConflictOf(t, err, queen.ErrDuplicate)
	require.Equal(t, 0, c.Op, "the push is the duplicate")
	require.Equal(t, []string{"t1"}, txnStored(t, s, "q", "p"))
}

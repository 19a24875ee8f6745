package persistence

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// lockLog records the store's lock events.
type lockLog struct {
	mu     sync.Mutex
	events []LockEvent
}

func (l *lockLog) observe(e LockEvent) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

// timeouts counts the timed-out events of op.
func (l *lockLog) timeouts(op string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.Op == op && e.TimedOut {
			n++
		}
	}
	return n
}

// count counts the events of op that match.
func (l *lockLog) count(op string, match func(LockEvent) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.Op == op && match(e) {
			n++
		}
	}
	return n
}

// moved counts the pushes run again because a known partition moved.
func (l *lockLog) moved() int { return l.count("push", func(e LockEvent) bool { return e.Moved }) }

// lockedFirst counts the pushes that locked rows before their probe.
func (l *lockLog) lockedFirst() int {
	return l.count("push", func(e LockEvent) bool { return !e.Moved })
}

// setupLocks returns a Store with a short lock timeout, its lock log, and the
// database URL (for a second session that holds locks).
func setupLocks(t *testing.T) (*Store, *lockLog, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	log := &lockLog{}
	s, err := Open(context.Background(), Config{URL: url, LockTimeout: 300 * time.Millisecond, ObserveLock: log.observe})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s, log, url
}

// holdLock opens a transaction on a separate session that runs lockSQL (a
// SELECT ... FOR UPDATE) and keeps it open; the returned func releases it.
func holdLock(t *testing.T, url, lockSQL string, args ...any) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	tag, err := tx.Exec(ctx, lockSQL, args...)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "the holder locked one row")
	var once sync.Once
	release = func() {
		once.Do(func() {
			_ = tx.Rollback(ctx)
			_ = conn.Close(ctx)
		})
	}
	t.Cleanup(release)
	return release
}

func requireLockTimeout(t *testing.T, out queen.PushOutcome) {
	t.Helper()
	for i, r := range out.Results {
		require.Equal(t, queen.Failed, r.Verdict, "item %d", i)
		require.NotNil(t, r.Err, "item %d", i)
		require.Equal(t, "lock_timeout", r.Err.Code, "item %d", i)
		require.True(t, r.Err.Retryable, "item %d", i)
	}
}

// A partition whose row lock another session holds (SPEC.md §3): a push to
// it alone answers failed/lock_timeout after the lock timeout; a bundle with
// another partition commits the other partition and answers only the stuck
// one lock_timeout; once the lock is released, the retry of the same
// transaction ids is queued for the stuck partition and duplicate for the
// one that was stored.
func TestPushStuckPartitionLock(t *testing.T) {
	t.Parallel()
	s, log, url := setupLocks(t)
	ctx := context.Background()
	stuck, err := s.EnsurePartition(ctx, "q", "stuck")
	require.NoError(t, err)
	free, err := s.EnsurePartition(ctx, "q", "free")
	require.NoError(t, err)

	release := holdLock(t, url, `SELECT 1 FROM queen.partition_ends WHERE partition_id = $1 FOR UPDATE`, stuck)

	// Alone.
	its := items("q", "stuck", "s1", "s2")
	out, err := s.Commit(ctx, &queen.PushBatch{PartitionID: stuck, Items: its, LeaderOf: leadersOf(its), Watermark: -1})
	require.ErrorIs(t, err, queen.ErrLockTimeout)
	requireLockTimeout(t, out)
	require.Equal(t, 1, log.timeouts("push"))

	// Bundled with a free partition, in both orders of partition ids.
	stuckItems := items("q", "stuck", "s1", "s2")
	freeItems := items("q", "free", "f1", "f2", "f1")
	bundle := func() []*queen.PushBatch {
		return []*queen.PushBatch{
			{PartitionID: stuck, Items: stuckItems, LeaderOf: leadersOf(stuckItems), Watermark: -1},
			{PartitionID: free, Items: freeItems, LeaderOf: leadersOf(freeItems), Watermark: -1},
		}
	}
	outs, err := s.CommitBundle(ctx, bundle())
	require.NoError(t, err, "the free partition committed")
	requireLockTimeout(t, outs[0])
	require.ErrorIs(t, outs[0].Err, queen.ErrLockTimeout)
	require.Equal(t, []queen.Verdict{queen.Queued, queen.Queued, queen.Duplicate}, verdicts(outs[1]))
	require.NoError(t, outs[1].Err)
	require.Equal(t, int64(0), outs[1].FirstOffset)
	require.Equal(t, int64(1), outs[1].LastOffset)
	require.Equal(t, 2, log.timeouts("push"), "the bundle's first attempt timed out once; the second did not wait")

	// Released: the retry of the same ids.
	release()
	outs, err = s.CommitBundle(ctx, bundle())
	require.NoError(t, err)
	require.Equal(t, []queen.Verdict{queen.Queued, queen.Queued}, verdicts(outs[0]))
	require.Equal(t, int64(0), outs[0].FirstOffset, "nothing was written for the stuck partition before")
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Duplicate, queen.Duplicate}, verdicts(outs[1]))
	require.Equal(t, outs[1].Results[0].MessageID, outs[1].Results[2].MessageID)
	require.Equal(t, 2, log.timeouts("push"))
	waits := 0
	log.mu.Lock()
	for _, e := range log.events {
		if e.Op == "push" && !e.TimedOut {
			waits++
			require.GreaterOrEqual(t, e.Wait, time.Duration(0))
		}
	}
	log.mu.Unlock()
	require.Equal(t, 2, waits, "the skip attempt and the retry measured their waits")
}

// A bundle whose every partition is held answers every item lock_timeout.
func TestPushBundleAllStuck(t *testing.T) {
	t.Parallel()
	s, _, url := setupLocks(t)
	ctx := context.Background()
	var pids []uuid.UUID
	var bs []*queen.PushBatch
	for _, name := range []string{"a", "b"} {
		pid, err := s.EnsurePartition(ctx, "q", name)
		require.NoError(t, err)
		pids = append(pids, pid)
		its := items("q", name, "x", "y")
		bs = append(bs, &queen.PushBatch{PartitionID: pid, Items: its, LeaderOf: leadersOf(its), Watermark: -1})
	}
	holdLock(t, url, `SELECT 1 FROM queen.partition_ends WHERE partition_id = $1 FOR UPDATE`, pids[0])
	holdLock(t, url, `SELECT 1 FROM queen.partition_ends WHERE partition_id = $1 FOR UPDATE`, pids[1])
	outs, err := s.CommitBundle(ctx, bs)
	require.NoError(t, err, "the second attempt ran; it had nothing to commit")
	requireLockTimeout(t, outs[0])
	requireLockTimeout(t, outs[1])
}

// An ack whose consumer row another session holds answers lock_timeout
// (SPEC.md §4), and succeeds once the lock is released.
func TestAckStuckConsumerLock(t *testing.T) {
	t.Parallel()
	s, log, url := setupLocks(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "m0", "m1"))
	ack := func(off int64) ([]queen.AckResult, error) {
		return s.Ack(ctx, []queen.AckItem{{PartitionID: pid, Offset: off, Status: queen.AckCompleted, ConsumerGroup: "g"}})
	}
	res, err := ack(0) // creates the consumer row
	require.NoError(t, err)
	require.Equal(t, queen.Acked, res[0].Result)

	release := holdLock(t, url, `SELECT 1 FROM queen.consumers WHERE partition_id = $1 AND consumer_group = 'g' FOR UPDATE`, pid)
	_, err = ack(1)
	require.ErrorIs(t, err, queen.ErrLockTimeout)
	require.True(t, queen.AsError(err).Retryable)
	require.Equal(t, 1, log.timeouts("ack"))

	release()
	res, err = ack(1)
	require.NoError(t, err)
	require.Equal(t, queen.Acked, res[0].Result)
	require.Equal(t, 1, log.timeouts("ack"))
}

// A pop with SkipLocked (consumer_lock's SKIP LOCKED form) answers busy at once when
// another session holds the group's consumer row; without it the pop waits
// for the row and fails with lock_timeout.
func TestPopSkipsHeldConsumerRow(t *testing.T) {
	t.Parallel()
	s, _, url := setupLocks(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "m0", "m1"))
	_, err = s.Ack(ctx, []queen.AckItem{{PartitionID: pid, Offset: 0, Status: queen.AckCompleted, ConsumerGroup: "g"}})
	require.NoError(t, err) // creates the consumer row

	release := holdLock(t, url, `SELECT 1 FROM queen.consumers WHERE partition_id = $1 AND consumer_group = 'g' FOR UPDATE`, pid)
	res, st, err := popOne(ctx, s, queen.PopSpec{PartitionID: pid, Group: "g", Batch: 1, SkipLocked: true})
	require.NoError(t, err)
	require.Equal(t, queen.PopBusy, st)
	require.Empty(t, res.Messages)
	_, _, err = popOne(ctx, s, queen.PopSpec{PartitionID: pid, Group: "g", Batch: 1})
	require.ErrorIs(t, err, queen.ErrLockTimeout)

	release()
	res, st, err = popOne(ctx, s, queen.PopSpec{PartitionID: pid, Group: "g", Batch: 1, SkipLocked: true})
	require.NoError(t, err)
	require.Equal(t, queen.PopDelivered, st)
	require.Equal(t, []string{"m1"}, txns(res))
}

// The pool's sessions carry the lock timeout and the idle-in-transaction
// limit (Config.LockTimeout, Config.IdleInTransactionTimeout).
func TestSessionLockSettings(t *testing.T) {
	t.Parallel()
	s, _, _ := setupLocks(t)
	ctx := context.Background()
	var lt, idle string
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT current_setting('lock_timeout'), current_setting('idle_in_transaction_session_timeout')`).Scan(&lt, &idle))
	require.Equal(t, "300ms", lt)
	require.Equal(t, "1min", idle)
}

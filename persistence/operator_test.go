package persistence

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// InspectDedup agrees with the push probe in every case a push meets: an
// original inside the window (its id; the zero id once its segment is
// gone), past the window (expired), purged from the sidecar or never
// pushed (unknown); an unknown queue or partition is not found.
func TestInspectDedup(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "iq", "p")
	require.NoError(t, err)
	first := commit(t, s, pid, items("iq", "p", "a", "b"))
	commit(t, s, pid, items("iq", "p", "c"))

	d, err := s.InspectDedup(ctx, "iq", "p", queen.HashTxn("b"))
	require.NoError(t, err)
	require.Equal(t, queen.InWindow, d.State)
	require.Equal(t, first.Results[1].MessageID.String(), *d.MessageID)
	require.EqualValues(t, 1, *d.Offset)
	require.EqualValues(t, 3600, d.WindowSeconds)
	require.WithinDuration(t, first.CreatedAt, *d.CreatedAt, 0)
	require.Equal(t, d.CreatedAt.Add(time.Hour), *d.WindowClosesAt)

	d, err = s.InspectDedup(ctx, "iq", "p", queen.HashTxn("never"))
	require.NoError(t, err)
	require.Equal(t, queen.DedupInspection{State: queen.Unknown, WindowSeconds: 3600}, d)

	// The segment of a and b is gone (retention): a duplicate push names the
	// zero id, and so does the inspector.
	_, err = s.pool.Exec(ctx, `DELETE FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1) AND first_offset = 0`, pid)
	require.NoError(t, err)
	d, err = s.InspectDedup(ctx, "iq", "p", queen.HashTxn("a"))
	require.NoError(t, err)
	require.Equal(t, queen.InWindow, d.State)
	require.Equal(t, queen.ZeroUUID.String(), *d.MessageID)
	dup := commit(t, s, pid, items("iq", "p", "a"))
	require.Equal(t, queen.Duplicate, dup.Results[0].Verdict)
	require.Equal(t, queen.ZeroUUID, dup.Results[0].MessageID)

	// Its sidecar row purged: unknown, and the push agrees (queued).
	require.NoError(t, s.ForgetHashes(ctx, pid, 0))
	d, err = s.InspectDedup(ctx, "iq", "p", queen.HashTxn("b"))
	require.NoError(t, err)
	require.Equal(t, queen.Unknown, d.State)
	require.Equal(t, queen.Queued, commit(t, s, pid, items("iq", "p", "b")).Results[0].Verdict)

	// c's window closes (its rows moved back two hours): expired.
	_, err = s.pool.Exec(ctx, `UPDATE queen.segments SET created_at = created_at - interval '2 hours', timed = false WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1) AND first_offset = 2`, pid)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `UPDATE queen.log_txn_hashes SET created_at = created_at - interval '2 hours' WHERE partition_id = $1 AND segment = 2`, pid)
	require.NoError(t, err)
	d, err = s.InspectDedup(ctx, "iq", "p", queen.HashTxn("c"))
	require.NoError(t, err)
	require.Equal(t, queen.Expired, d.State)
	require.EqualValues(t, 2, *d.Offset)
	require.True(t, d.WindowClosesAt.Before(time.Now()), "closed at %v", d.WindowClosesAt)
	require.Equal(t, queen.Queued, commit(t, s, pid, items("iq", "p", "c")).Results[0].Verdict)

	_, err = s.InspectDedup(ctx, "nope", "p", queen.HashTxn("a"))
	require.ErrorIs(t, err, queen.ErrNotFound)
	_, err = s.InspectDedup(ctx, "iq", "nope", queen.HashTxn("a"))
	require.ErrorIs(t, err, queen.ErrNotFound)
}

// ReplayDeadLetters serialises replays of one dead letter: while a first
// replay holds it (inside its replay callback, where the broker pushes),
// a second waits on its advisory lock (seen waiting in pg_locks, polled),
// and once the first removed it and committed, the second reads nothing
// (the letter is gone) and removes nothing. A replay that removes nothing
// leaves the letter for the next one.
func TestReplayDeadLettersSerialised(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "rq", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("rq", "p", "a", "b"))
	res, _ := pop(t, s, pid, g, 2)
	out := ack(t, s, ackTxn(pid, g, "a", queen.AckDLQ, res.LeaseID), ackTxn(pid, g, "b", queen.AckDLQ, res.LeaseID))
	require.Equal(t, []queen.AckOutcome{queen.DeadLettered, queen.DeadLettered}, out)
	dls, _, err := s.DeadLetters(ctx, queen.DLQFilter{Queue: "rq", Limit: 10})
	require.NoError(t, err)
	require.Len(t, dls, 2)
	a, b := dls[0].ID, dls[1].ID

	// A replay that pushes nothing keeps the letter.
	removed, err := s.ReplayDeadLetters(ctx, "rq", "", []int64{a}, func(l []queen.DeadLetter) []int64 {
		require.Len(t, l, 1)
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, removed)

	holding := make(chan struct{})
	release := make(chan struct{})
	second := make(chan []queen.DeadLetter, 1)
	secondDone := make(chan error, 1)
	var secondRemoved []int64
	firstRemoved, err := s.ReplayDeadLetters(ctx, "rq", g, []int64{b, a}, func(l []queen.DeadLetter) []int64 {
		require.Len(t, l, 2)
		close(holding)
		go func() {
			var err error
			secondRemoved, err = s.ReplayDeadLetters(ctx, "rq", g, []int64{a}, func(l []queen.DeadLetter) []int64 {
				second <- l
				return []int64{a}
			})
			secondDone <- err
		}()
		// The second replay waits on a's lock while this one holds it.
		deadline := time.Now().Add(30 * time.Second)
		for {
			var n int64
			require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n))
			if n == 1 {
				break
			}
			require.True(t, time.Now().Before(deadline), "the second replay never waited on the lock")
			runtime.Gosched()
		}
		select {
		case l := <-second:
			t.Fatalf("the second replay read %v while the first held the letter", l)
		default:
		}
		close(release)
		return []int64{a, b}
	})
	<-holding
	<-release
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{a, b}, firstRemoved)
	require.NoError(t, <-secondDone)
	require.Empty(t, <-second, "the second replay found the letter the first removed")
	require.Empty(t, secondRemoved)
	left, total, err := s.DeadLetters(ctx, queen.DLQFilter{Queue: "rq", Limit: 10})
	require.NoError(t, err)
	require.Zero(t, total)
	require.Empty(t, left)
}

package persistence

import (
	"context"
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
	_, err = s.pool.Exec(ctx, `DELETE FROM queen.segments WHERE partition_id = $1 AND first_offset = 0`, pid)
	require.NoError(t, err)
	d, err = s.InspectDedup(ctx, "iq", "p", queen.HashTxn("a"))
	require.NoError(t, err)
	require.Equal(t, queen.InWindow, d.State)
	require.Equal(t, queen.ZeroUUID.String(), *d.MessageID)
	dup := commit(t, s, pid, items("iq", "p", "a"))
	require.Equal(t, queen.Duplicate, dup.Results[0].Verdict)
	require.Equal(t, queen.ZeroUUID, dup.Results[0].MessageID)

	// Its sidecar row purged: unknown, and the push agrees (queued).
	require.NoError(t, s.PurgeSidecar(ctx, pid, 0))
	d, err = s.InspectDedup(ctx, "iq", "p", queen.HashTxn("b"))
	require.NoError(t, err)
	require.Equal(t, queen.Unknown, d.State)
	require.Equal(t, queen.Queued, commit(t, s, pid, items("iq", "p", "b")).Results[0].Verdict)

	// c's window closes (its rows moved back two hours): expired.
	_, err = s.pool.Exec(ctx, `UPDATE queen.segments SET created_at = created_at - interval '2 hours', timed = false WHERE partition_id = $1 AND first_offset = 2`, pid)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `UPDATE queen.log_txns SET created_at = created_at - interval '2 hours' WHERE partition_id = $1 AND first_offset = 2`, pid)
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

package persistence

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// TestStorageFullErrorMapping: PostgreSQL's disk_full (SQLSTATE 53100, as a
// file it could not extend arrives) is queen.ErrStorageFull (503,
// retryable) with PostgreSQL's words kept, also wrapped and with another
// code when the message says ENOSPC; the other insufficient-resources codes
// and a lost sidecar range stay unavailable.
func TestStorageFullErrorMapping(t *testing.T) {
	t.Parallel()
	extend := &pgconn.PgError{Severity: "ERROR", Code: "53100", Message: `could not extend file "base/16384/24576.1": No space left on device`, Hint: "Check free disk space."}
	for _, err := range []error{
		extend,
		fmt.Errorf("push: %w", extend),
		&pgconn.PgError{Severity: "PANIC", Code: "58030", Message: `could not write to file "pg_wal/xlogtemp.77": No space left on device`},
		&pgconn.PgError{Severity: "ERROR", Code: "XX000", Message: "could not write block 7 of temporary file", Detail: "No space left on device"},
	} {
		qe := queen.AsError(unavailable(err))
		require.Equal(t, queen.ErrStorageFull.Code, qe.Code, "%v", err)
		require.Equal(t, 503, qe.Status)
		require.True(t, qe.Retryable)
		require.Contains(t, qe.Message, "the database is out of disk space")
		require.Contains(t, qe.Message, "No space left on device", "PostgreSQL's own words are kept")
		require.True(t, errors.Is(qe, queen.ErrStorageFull))
		require.True(t, storageFull(err))
	}
	for _, err := range []error{
		&pgconn.PgError{Code: "53200", Message: "out of memory"},
		&pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"},
		&pgconn.PgError{Code: sqlstateRangeLost, Message: "sidecar range from 2026-01-01 is being rebuilt after a database restart"},
		errors.New("write: No space left on device"), // not the database's
	} {
		require.Equal(t, queen.ErrUnavailable.Code, queen.AsError(unavailable(err)).Code, "%v", err)
		require.False(t, storageFull(err), "%v", err)
	}
	require.True(t, storageFull(queen.ErrStorageFull.With("x")))
	require.Equal(t, queen.ErrStorageFull.Code, queen.AsError(unavailable(queen.ErrStorageFull.With("x"))).Code)

	var f fullDisk
	require.False(t, f.recent())
	f.note(&pgconn.PgError{Code: "53200"})
	require.False(t, f.recent(), "out of memory is not a full disk")
	f.note(extend)
	require.True(t, f.recent())
	f.at.Store(time.Now().Add(-StorageFullHold - time.Second).UnixNano())
	require.False(t, f.recent(), "reported for StorageFullHold after the last one")
}

// diskFullTrigger makes PostgreSQL answer every row written by when
// (e.g. "BEFORE UPDATE ON queen.partition_ends") with the error a full disk
// gives: SQLSTATE 53100, "could not extend file ...: No space left on
// device". It returns the trigger's removal (space freed).
func diskFullTrigger(t *testing.T, s *Store, name, when string) func() {
	t.Helper()
	ctx := context.Background()
	_, err := s.pool.Exec(ctx, `CREATE OR REPLACE FUNCTION public.test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'could not extend file "base/16384/24576": No space left on device'
        USING ERRCODE = 'disk_full', HINT = 'Check free disk space.';
END $$`)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `CREATE TRIGGER `+name+` `+when+` FOR EACH ROW EXECUTE FUNCTION public.test_disk_full()`)
	require.NoError(t, err)
	return func() {
		t.Helper()
		_, err := s.pool.Exec(ctx, `DROP TRIGGER `+name+` ON `+onTable(when))
		require.NoError(t, err)
	}
}

// onTable is the table of a trigger's "BEFORE ... ON <table>" clause.
func onTable(when string) string {
	for i := len(when) - 1; i > 0; i-- {
		if when[i] == ' ' {
			return when[i+1:]
		}
	}
	return when
}

// TestFullDiskIsNamedAsSuch (issue 38): with the database out of space a
// push is answered storage_full, never the misleading "sidecar range ... is
// being rebuilt after a database restart", and Store.StorageFull says so.
// The trial's sequence: the restart a full disk causes empties the level-0
// sidecar range, its rebuild fails for lack of space (and is what first
// meets the full disk), and every push meets the lost range; once space is
// freed the rebuild finishes and the repeat is a duplicate of the stored
// message. A push whose own write meets the full disk is storage_full too.
func TestFullDiskIsNamedAsSuch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupSpan(t, time.Hour)
	pid := partition(t, s, "full", "p")
	first := commit(t, s, pid, items("full", "p", "a"))
	require.False(t, s.StorageFull())

	// The restart empties the range; rebuilding it needs space.
	freeAlive := diskFullTrigger(t, s, "test_full_alive", "BEFORE INSERT ON queen.sidecar_alive")
	crash(t, s)
	push := func(txn string) queen.PushOutcome {
		t.Helper()
		its := items("full", "p", txn)
		out, _ := s.Commit(ctx, &queen.PushBatch{PartitionID: pid, Items: its, LeaderOf: leadersOf(its), Watermark: -1})
		return out
	}
	out := push("a")
	require.Equal(t, queen.Failed, out.Results[0].Verdict, "the lookup meets the emptied range")
	require.Eventually(t, s.StorageFull, 30*time.Second, 5*time.Millisecond, "the failed rebuild pass met the full disk")
	out = push("a")
	require.Equal(t, queen.Failed, out.Results[0].Verdict)
	e := out.Results[0].Err
	require.Equal(t, queen.ErrStorageFull.Code, e.Code, "%s", e.Message)
	require.True(t, e.Retryable)
	require.Contains(t, e.Message, "the database is out of disk space")

	// Space freed: the next rebuild pass (started by a push) finishes.
	freeAlive()
	require.Eventually(t, func() bool {
		out := push("a")
		return out.Results[0].Verdict == queen.Duplicate && out.Results[0].MessageID == first.Results[0].MessageID
	}, 30*time.Second, 5*time.Millisecond, "the repeat is a duplicate once the range is rebuilt")

	// A push whose own write needs space.
	freeWrites := diskFullTrigger(t, s, "test_full_writes", "BEFORE UPDATE ON queen.partition_ends")
	out = push("b")
	require.Equal(t, queen.Failed, out.Results[0].Verdict)
	require.Equal(t, queen.ErrStorageFull.Code, out.Results[0].Err.Code, "%s", out.Results[0].Err.Message)
	require.Contains(t, out.Results[0].Err.Message, "could not extend file")
	require.True(t, s.StorageFull())
	freeWrites()
	b := push("b")
	require.Equal(t, []queen.Verdict{queen.Queued}, verdicts(b), "nothing of the refused push was written")

	// A push whose segment (written by COPY, before the rest) needs space.
	freeSegments := diskFullTrigger(t, s, "test_full_segments", "BEFORE INSERT ON queen.segments_kept")
	out = push("c")
	require.Equal(t, queen.Failed, out.Results[0].Verdict)
	require.Equal(t, queen.ErrStorageFull.Code, out.Results[0].Err.Code, "%s", out.Results[0].Err.Message)
	freeSegments()
	c := push("c")
	require.Equal(t, []queen.Verdict{queen.Queued}, verdicts(c), "nothing of the refused push was written")
	require.Equal(t, b.Results[0].Offset+1, c.Results[0].Offset, "the refused push took no offset")
}

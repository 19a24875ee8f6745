package persistence

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

func TestPlanSegmentRanges(t *testing.T) {
	at := func(hm string) time.Time {
		x, err := time.Parse("2006-01-02 15:04:05", "2026-12-01 "+hm)
		require.NoError(t, err)
		return x
	}
	cells := func(out []bounds) []string {
		var s []string
		for _, c := range out {
			s = append(s, c.lo.Format("15:04")+"-"+c.hi.Format("15:04"))
		}
		return s
	}
	rng := func(lo, hi string) bounds { return bounds{at(lo), at(hi)} }

	require.Equal(t, []string{"12:00-12:02", "12:02-12:04", "12:04-12:06"},
		cells(planRanges(nil, at("12:00:30"), at("12:05:00"), 2*time.Minute, time.Minute)), "aligned cells of the span from the minute of from")
	require.Equal(t, []string{"12:01-12:02", "12:02-12:04", "12:04-12:08", "12:08-12:12"},
		cells(planRanges([]bounds{rng("12:00:00", "12:01:00")}, at("12:00:10"), at("12:09:00"), 4*time.Minute, time.Minute)),
		"a wider span starts on its own alignment: smaller cells fill up to it")
	require.Equal(t, []string{"12:08-12:09", "12:09-12:10"},
		cells(planRanges([]bounds{rng("12:00:00", "12:08:00")}, at("12:03:00"), at("12:10:00"), time.Minute, time.Minute)),
		"an existing wider range covers what it covers")
	require.Equal(t, []string{"12:00-12:02", "12:04-12:08"},
		cells(planRanges([]bounds{rng("12:02:00", "12:04:00")}, at("12:00:00"), at("12:05:00"), 4*time.Minute, time.Minute)),
		"a smaller existing range inside a cell splits it")
	require.Nil(t, planRanges([]bounds{rng("12:00:00", "12:16:00")}, at("12:00:00"), at("12:10:00"), 4*time.Minute, time.Minute))

	// The sidecar's ranges: unit = span, every range one cell.
	sec := func(out []bounds) []string {
		var s []string
		for _, c := range out {
			s = append(s, c.lo.Format("15:04:05")+"-"+c.hi.Format("15:04:05"))
		}
		return s
	}
	require.Equal(t, []string{"12:00:00-12:01:30", "12:01:30-12:03:00", "12:03:00-12:04:30"},
		sec(planRanges(nil, at("12:01:00"), at("12:04:00"), 90*time.Second, 90*time.Second)), "cells of a 90-second span from the one holding from")
	require.Equal(t, []string{"12:02:00-12:03:00", "12:03:00-12:04:30"},
		sec(planRanges([]bounds{rng("12:00:00", "12:01:00"), rng("12:01:00", "12:02:00")}, at("12:01:30"), at("12:04:30"), 90*time.Second, 90*time.Second)),
		"after a change of span a short range bridges from the old ranges' end to the new alignment")
}

// segmentTables returns, per table holding them, partition pid's segments.
func segmentTables(t testing.TB, s *Store, pid uuid.UUID) map[string]int {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT tableoid::regclass::text, count(*) FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1) GROUP BY 1`, pid)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var n string
		var c int
		require.NoError(t, rows.Scan(&n, &c))
		out[n] = c
	}
	require.NoError(t, rows.Err())
	return out
}

// pastSegmentRange creates the 1-minute range of segments_timed that ended
// a minute before PostgreSQL's clock's minute, and moves partition pids'
// segments (and sidecar rows) into its last seconds: less than a minute and
// a pass past a 60-second retention, so the walk leaves them to the drop.
// It returns the range's name.
func pastSegmentRange(t testing.TB, s *Store, pids ...uuid.UUID) string {
	t.Helper()
	ctx := context.Background()
	var lo, hi time.Time
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT date_trunc('minute', clock_timestamp()) - interval '2 minutes', date_trunc('minute', clock_timestamp()) - interval '1 minute'`).Scan(&lo, &hi))
	var created bool
	require.NoError(t, s.pool.QueryRow(ctx, sqlSegmentRangeCreate, lo, hi).Scan(&created))
	require.True(t, created)
	for _, pid := range pids {
		for _, q := range []string{
			`UPDATE queen.segments SET created_at = $2 WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1)`,
			`UPDATE queen.log_txn_hashes SET created_at = $2 WHERE partition_id = $1`,
		} {
			_, err := s.pool.Exec(ctx, q, pid, hi.Add(-5*time.Second))
			require.NoError(t, err)
		}
	}
	var name string
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT queen.segment_range_name($1, 1)`, lo).Scan(&name))
	return "queen." + name
}

func rangeExists(t testing.TB, s *Store, name string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok))
	return ok
}

func TestSegmentsOfRetainedQueuesGoToRangesDroppedWhole(t *testing.T) {
	t.Parallel()
	s := setup(t)
	configure(t, s, "tq", `{"retentionSeconds":60}`)
	configure(t, s, "kq", `{}`)
	tq := partition(t, s, "tq", "p")
	kq := partition(t, s, "kq", "p")
	commitEach(t, s, tq, "tq", "p", "m0", "m1")
	commitEach(t, s, kq, "kq", "p", "k0")

	// The configure made the ranges of now: tq's segments are in one of
	// them, kq's in segments_kept.
	for n := range segmentTables(t, s, tq) {
		require.Regexp(t, `^queen\.segments_\d{8}_\d{4}_1m$`, n)
	}
	require.Equal(t, map[string]int{"queen.segments_kept": 1}, segmentTables(t, s, kq))

	old := pastSegmentRange(t, s, tq)
	require.Equal(t, map[string]int{old: 2}, segmentTables(t, s, tq))
	commitEach(t, s, tq, "tq", "p", "m2") // young
	age(t, s, kq, 100*24*time.Hour)       // no retention: kept forever

	c := step(t, s, RetentionConfig{})
	require.Equal(t, 1, c.SegmentRanges.Dropped)
	require.Zero(t, c.Expired.Rows, "the walk left them to the range's drop")
	require.False(t, rangeExists(t, s, old))
	require.Equal(t, []int64{2}, segmentOffsets(t, s, tq))
	require.Equal(t, []int64{0}, segmentOffsets(t, s, kq))

	// A repeat of a dropped message is still a duplicate (the sidecar
	// holds it; SPEC.md §7), with the zero id.
	out := commit(t, s, tq, items("tq", "p", "m0"))
	require.Equal(t, []queen.Verdict{queen.Duplicate}, verdicts(out))
}

func TestSegmentRangeDropWaitsForEveryQueuesRetention(t *testing.T) {
	t.Parallel()
	s := setup(t)
	configure(t, s, "short", `{"retentionSeconds":60}`)
	configure(t, s, "long", `{"retentionSeconds":3600}`)
	sp := partition(t, s, "short", "p")
	lp := partition(t, s, "long", "p")
	commitEach(t, s, sp, "short", "p", "s0")
	commitEach(t, s, lp, "long", "p", "l0")
	old := pastSegmentRange(t, s, sp, lp)

	c := step(t, s, RetentionConfig{})
	require.Zero(t, c.SegmentRanges.Dropped, "long keeps its rows for an hour")
	require.Zero(t, c.Expired.Rows)
	require.True(t, rangeExists(t, s, old))
	require.Equal(t, []int64{0}, segmentOffsets(t, s, lp))

	// long's retention shrinks: every row of the range is past it now.
	configure(t, s, "long", `{"retentionSeconds":60}`)
	// short loses its retention: it keeps its rows again.
	configure(t, s, "short", `{}`)
	c = step(t, s, RetentionConfig{})
	require.Zero(t, c.SegmentRanges.Dropped, "short keeps its rows forever now")
	require.Equal(t, []int64{0}, segmentOffsets(t, s, sp))

	configure(t, s, "short", `{"retentionSeconds":60}`)
	c = step(t, s, RetentionConfig{})
	require.Equal(t, 1, c.SegmentRanges.Dropped)
	require.False(t, rangeExists(t, s, old))
	require.Empty(t, segmentOffsets(t, s, sp))
	require.Empty(t, segmentOffsets(t, s, lp))
}

// A database of the 0009 shape (segments a plain table) migrates up: its
// segments move to segments_kept (migration 0010) and come through every
// later rewrite of the table (0025: the partition named by number).
func TestMigrationKeepsExistingSegments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := databaseAt(t, 9)
	const pid = "01a22cb6-e34c-7283-bd05-8abc3fa7ac11"
	for _, q := range []string{
		`INSERT INTO queen.queues (name) VALUES ('mk')`,
		`INSERT INTO queen.partitions (id, queue_id, name, last_offset) SELECT '` + pid + `', id, 'p', 299 FROM queen.queues`,
		`INSERT INTO queen.segments SELECT '` + pid + `', g * 10, g * 10 + 9, clock_timestamp() - make_interval(secs => 1200 - g * 40), '\x01'::bytea, '\x02'::bytea
		   FROM generate_series(0, 29) g`,
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	applied, err := Migrate(ctx, url)
	require.NoError(t, err)
	require.Equal(t, 10, applied[0])
	require.Contains(t, applied, 25)
	var kept, last int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*), max(last_offset) FROM queen.segments_kept
		WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1)`, pid).Scan(&kept, &last))
	require.Equal(t, int64(30), kept)
	require.Equal(t, int64(299), last)
	s, err := Open(ctx, Config{URL: url})
	require.NoError(t, err)
	s.Close()
}

func TestNoRangeGraceDeletesAtTheCutoff(t *testing.T) {
	t.Parallel()
	s := setup(t)
	configure(t, s, "tq", `{"retentionSeconds":60}`)
	configure(t, s, "long", `{"retentionSeconds":3600}`)
	tq := partition(t, s, "tq", "p")
	lp := partition(t, s, "long", "p")
	commitEach(t, s, tq, "tq", "p", "m0", "m1")
	commitEach(t, s, lp, "long", "p", "l0")
	old := pastSegmentRange(t, s, tq, lp) // long keeps the range

	c := step(t, s, RetentionConfig{NoRangeGrace: true})
	require.Equal(t, RetentionStepCount{Statements: 1, Rows: 2, Messages: 2}, c.Expired, "tq's segments go at the cutoff")
	require.Zero(t, c.SegmentRanges.Dropped)
	require.Empty(t, segmentOffsets(t, s, tq))
	require.Equal(t, map[string]int{old: 1}, segmentTables(t, s, lp))
}

func TestSegmentRangesAreAddedBesideOpenPushes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	configure(t, s, "tq", `{"retentionSeconds":60}`)
	tq := partition(t, s, "tq", "p")
	before := len(segmentRangeNames(t, s))
	require.NotZero(t, before, "the configure made the ranges ahead")

	// A push in flight: its transaction holds segments_timed's lock.
	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `INSERT INTO queen.segments (partition_num, first_offset, last_offset, created_at, frames, timed)
		SELECT num, 100, 100, clock_timestamp(), '\x00', true FROM queen.partitions WHERE id = $1`, tq)
	require.NoError(t, err)

	// A longer retention asks for 4-minute ranges further ahead: they are
	// attached while the push's transaction is open.
	configure(t, s, "tq", `{"retentionSeconds":3600}`)
	r, err := s.EnsureSegmentRanges(ctx)
	require.NoError(t, err)
	require.Zero(t, r.Deferred)
	require.Greater(t, len(segmentRangeNames(t, s)), before)
	require.NoError(t, tx.Commit(ctx))

	// With no listed range holding now, a retained queue's segment goes to
	// segments_kept, and the push succeeds.
	_, err = s.pool.Exec(ctx, `DELETE FROM queen.segment_ranges`)
	require.NoError(t, err)
	commitEach(t, s, tq, "tq", "p", "k")
	require.Equal(t, 1, segmentTables(t, s, tq)["queen.segments_kept"])
}

func segmentRangeNames(t testing.TB, s *Store) []string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'queen.segments_timed'::regclass ORDER BY 1`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// segmentReader opens a transaction that has read partition pid's one
// segment (so a concurrent detach of its range waits for it); rolled back
// at the test's end unless committed.
func segmentReader(t *testing.T, s *Store, pid uuid.UUID) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	reader, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { reader.Rollback(ctx) }) //nolint:errcheck
	var n int
	require.NoError(t, reader.QueryRow(ctx, `SELECT count(*) FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1)`, pid).Scan(&n))
	require.Equal(t, 1, n)
	return reader
}

func TestSegmentRangeDropDoesNotBlockPushes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	configure(t, s, "tq", `{"retentionSeconds":60}`)
	tq := partition(t, s, "tq", "p")
	commitEach(t, s, tq, "tq", "p", "m0")
	old := pastSegmentRange(t, s, tq)

	// A reader still in a transaction that has read the old range: the
	// detach waits for it.
	reader := segmentReader(t, s, tq)

	type stepped struct {
		c   RetentionCounts
		err error
	}
	done := make(chan stepped, 1)
	go func() {
		c, err := s.RetentionStep(ctx, RetentionConfig{})
		done <- stepped{c, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting bool
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE query LIKE '%DETACH PARTITION%CONCURRENTLY%' AND wait_event_type = 'Lock' AND pid <> pg_backend_pid())`).Scan(&waiting))
		if waiting {
			break
		}
		require.True(t, time.Now().Before(deadline), "the detach never waited for the reader")
		select {
		case r := <-done:
			t.Fatalf("the step ended without waiting for the reader: %+v (error: %v)", r.c, r.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	// While the detach waits, pushes to a retained queue go on.
	commitEach(t, s, tq, "tq", "p", "m1", "m2")
	require.NoError(t, reader.Commit(ctx))
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, 1, r.c.SegmentRanges.Dropped)
	require.False(t, rangeExists(t, s, old))
	require.Equal(t, []int64{1, 2}, segmentOffsets(t, s, tq))
}

// A concurrent detach interrupted while it waits for a reader leaves its
// range pending detach; the next pass completes it (segment_range_finalize)
// and drops the range.
func TestInterruptedSegmentRangeDetachIsFinalized(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	configure(t, s, "tq", `{"retentionSeconds":60}`)
	tq := partition(t, s, "tq", "p")
	commitEach(t, s, tq, "tq", "p", "m0")
	old := pastSegmentRange(t, s, tq)

	reader := segmentReader(t, s, tq)

	done := make(chan error, 1)
	go func() {
		_, err := s.RetentionStep(ctx, RetentionConfig{})
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var cancelled bool
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT COALESCE(bool_or(pg_cancel_backend(pid)), false) FROM pg_stat_activity
			WHERE query LIKE '%DETACH PARTITION%CONCURRENTLY%' AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&cancelled))
		if cancelled {
			break
		}
		require.True(t, time.Now().Before(deadline), "the detach never waited for the reader")
		time.Sleep(10 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Logf("the cancelled detach fails the step: %v", err)
	}
	var pending bool
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_inherits
		WHERE inhrelid = to_regclass($1) AND inhdetachpending)`, old).Scan(&pending))
	require.True(t, pending, "the interrupted detach left its range pending")

	require.NoError(t, reader.Commit(ctx))
	c, err := s.RetentionStep(ctx, RetentionConfig{})
	require.NoError(t, err)
	require.Equal(t, 1, c.SegmentRanges.Dropped)
	require.False(t, rangeExists(t, s, old))
}

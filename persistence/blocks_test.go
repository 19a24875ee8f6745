package persistence

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// lastStamp is the created_at of partition pid's newest segment.
func lastStamp(t testing.TB, s *Store, pid uuid.UUID) time.Time {
	t.Helper()
	var at time.Time
	require.NoError(t, s.pool.QueryRow(context.Background(),
		`SELECT max(created_at) FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1)`, pid).Scan(&at))
	return at
}

// compactThrough runs the compaction step (no grace) until the sidecar
// range holding at is in level 1, polling PostgreSQL's clock past the
// range's end (a deadline of 30 s).
func compactThrough(t testing.TB, s *Store, at time.Time) SidecarRanges {
	t.Helper()
	ctx := context.Background()
	var total SidecarRanges
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := compactSidecarRanges(ctx, s.pool, 0)
		require.NoError(t, err)
		total.Compacted += r.Compacted
		total.Hashes += r.Hashes
		total.Refilled += r.Refilled
		var done bool
		require.NoError(t, s.pool.QueryRow(ctx,
			`SELECT EXISTS (SELECT 1 FROM queen.sidecar_ranges WHERE lo <= $1 AND hi > $1 AND bits IS NOT NULL)`, at).Scan(&done))
		if done {
			return total
		}
		require.True(t, time.Now().Before(deadline), "the range holding %v was not compacted in 30 s", at)
		time.Sleep(20 * time.Millisecond) // polling: the range closes on PostgreSQL's clock
	}
}

// levels counts partition pid's level-0 rows and every level-1 entry.
func levels(t testing.TB, s *Store, pid uuid.UUID) (l0, l1 int64) {
	t.Helper()
	require.NoError(t, s.pool.QueryRow(context.Background(), `
SELECT (SELECT count(*) FROM queen.log_txn_hashes WHERE partition_id = $1),
       (SELECT COALESCE(sum(cardinality(hashes)), 0)::bigint FROM queen.hash_blocks)`, pid).Scan(&l0, &l1))
	return l0, l1
}

// TestSidecarCompactionKeepsEveryAnswer (SPEC.md §2-§4, §13): once a closed
// range is compacted into level 1 (its level-0 table dropped), a repeat is
// still a duplicate naming the original's id and offset, an ack by
// transactionId still resolves, and the inspector still finds the original.
func TestSidecarCompactionKeepsEveryAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupSpan(t, time.Second)
	pid := partition(t, s, "c", "p")
	first := commit(t, s, pid, items("c", "p", "a", "b", "c"))
	require.Equal(t, []queen.Verdict{queen.Queued, queen.Queued, queen.Queued}, verdicts(first))
	r := compactThrough(t, s, lastStamp(t, s, pid))
	require.GreaterOrEqual(t, r.Hashes, int64(3))
	l0, l1 := levels(t, s, pid)
	require.Zero(t, l0, "the level-0 table is dropped")
	require.Equal(t, int64(3), l1)

	again := commit(t, s, pid, items("c", "p", "b", "a", "d"))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Duplicate, queen.Queued}, verdicts(again))
	require.Equal(t, first.Results[1].MessageID, again.Results[0].MessageID)
	require.Equal(t, int64(1), again.Results[0].Offset)
	require.Equal(t, first.Results[0].MessageID, again.Results[1].MessageID)

	insp, err := s.InspectDedup(ctx, "c", "p", queen.HashTxn("c"))
	require.NoError(t, err)
	require.Equal(t, queen.InWindow, insp.State)
	require.Equal(t, int64(2), *insp.Offset)

	require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, ackTxn(pid, g, "b", queen.AckCompleted, nil)))
	require.Equal(t, rowCounts{Segments: 2, Messages: 4, Hashes: 4}, counts(t, s, pid))
}

// printed reports whether txn's hash has its fingerprint in pr.
func printed(pr queen.SidecarPrints, txn string) bool {
	h := queen.HashTxn(txn)
	for _, set := range pr.Sets {
		for i := 0; i+4 <= len(set.Prints); i += 4 {
			if string(set.Prints[i:i+4]) == string(h[0:4]) {
				return true
			}
		}
	}
	return false
}

// TestSidecarPrintsCoverCompactedRanges (SPEC.md §8, migration 0021): a
// compaction writes each partition's fingerprints of its range, from level
// 0 or, after a crash emptied it, from the segments; SidecarPrints returns
// them with their range's bounds, and names the oldest range without them
// (level 0, or emptied by a crash) as Uncovered, so a hash cache reads a
// hole back only where every hash of it has its fingerprint; the retention
// pass writes a compacted range's fingerprints again from its level-1
// blocks after a crash emptied them.
func TestSidecarPrintsCoverCompactedRanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupSpan(t, time.Second)
	a := partition(t, s, "f", "a")
	b := partition(t, s, "f", "b")
	commit(t, s, a, items("f", "a", "x", "y"))
	commit(t, s, b, items("f", "b", "z"))
	at := lastStamp(t, s, a)

	pr, err := s.SidecarPrints(ctx, a, 3600)
	require.NoError(t, err)
	require.False(t, printed(pr, "x"), "level 0 has no fingerprints")
	require.False(t, pr.Uncovered.IsZero())
	require.False(t, pr.Uncovered.After(at), "the range holding x is not covered")

	compactThrough(t, s, at)
	pr, err = s.SidecarPrints(ctx, a, 3600)
	require.NoError(t, err)
	require.True(t, printed(pr, "x"), "%+v", pr)
	require.True(t, printed(pr, "y"))
	require.False(t, printed(pr, "z"), "b's hash is b's")
	require.True(t, pr.Uncovered.IsZero() || pr.Uncovered.After(at), "covered up to the compacted range: %v, x at %v", pr.Uncovered, at)
	for _, set := range pr.Sets {
		require.False(t, set.Since.After(at))
		require.False(t, set.Until.Before(at))
	}

	// A crash empties them (they are unlogged): not covered, until the
	// retention leader's pass writes them again from the level-1 blocks.
	crash(t, s)
	pr, err = s.SidecarPrints(ctx, a, 3600)
	require.NoError(t, err)
	require.False(t, printed(pr, "x"))
	require.False(t, pr.Uncovered.After(at))
	r, err := compactSidecarRanges(ctx, s.pool, compactGrace)
	require.NoError(t, err)
	require.GreaterOrEqual(t, r.Printed, 1)
	pr, err = s.SidecarPrints(ctx, a, 3600)
	require.NoError(t, err)
	require.True(t, printed(pr, "x"), "%+v", pr)
	require.False(t, printed(pr, "z"))
	require.True(t, pr.Uncovered.IsZero() || pr.Uncovered.After(at))

	// A range compacted after a crash emptied its level 0 takes its
	// fingerprints from the segments.
	_, err = refillLostRanges(ctx, s.pool)
	require.NoError(t, err)
	commit(t, s, a, items("f", "a", "w"))
	at = lastStamp(t, s, a)
	crash(t, s)
	compactThrough(t, s, at)
	pr, err = s.SidecarPrints(ctx, a, 3600)
	require.NoError(t, err)
	require.True(t, printed(pr, "w"), "%+v", pr)
}

// TestSidecarCompactionIgnoresOtherPartitions: a level-1 bucket holds the
// hashes of every partition; an entry of another partition (the same
// transactionId pushed there) never makes a push a duplicate.
func TestSidecarCompactionIgnoresOtherPartitions(t *testing.T) {
	t.Parallel()
	s := setupSpan(t, time.Second)
	a := partition(t, s, "x", "a")
	b := partition(t, s, "x", "b")
	commit(t, s, a, items("x", "a", "same", "only-a"))
	compactThrough(t, s, lastStamp(t, s, a))
	out := commit(t, s, b, items("x", "b", "same", "only-a"))
	require.Equal(t, []queen.Verdict{queen.Queued, queen.Queued}, verdicts(out))
	out = commit(t, s, a, items("x", "a", "same"))
	require.Equal(t, []queen.Verdict{queen.Duplicate}, verdicts(out))
}

// crash empties what PostgreSQL's crash recovery empties: every unlogged
// table (the sidecar's level-0 ranges and sidecar_alive, the partitions'
// allocator rows, migration 0019, with their mark, migration 0026, and the
// fingerprints, migration 0021).
func crash(t testing.TB, s *Store) {
	t.Helper()
	ctx := context.Background()
	for _, r := range ranges(t, s) {
		_, err := s.pool.Exec(ctx, `TRUNCATE queen.`+r.Name)
		require.NoError(t, err)
	}
	_, err := s.pool.Exec(ctx, `TRUNCATE queen.sidecar_alive, queen.partition_ends, queen.partition_ends_alive, queen.hash_prints, queen.hash_prints_alive`)
	require.NoError(t, err)
}

// TestSidecarLostRangeFailsUntilRefilled (SPEC.md §3, §9): after a database
// crash empties the open level-0 range, a push that must look a hash up is
// answered failed (retryable), never queued twice; the compaction step
// re-fills the range from the segments' hashes, and the repeat is then a
// duplicate.
// A warm cache's narrowed probe needs no lookup and goes on meanwhile.
func TestSidecarLostRangeFailsUntilRefilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupSpan(t, time.Hour)
	pid := partition(t, s, "l", "p")
	first := commit(t, s, pid, items("l", "p", "a", "b"))
	crash(t, s)

	its := items("l", "p", "a")
	out, err := s.Commit(ctx, &queen.PushBatch{PartitionID: pid, Items: its, LeaderOf: leadersOf(its), Watermark: -1})
	if err == nil {
		require.Equal(t, queen.Failed, out.Results[0].Verdict)
		require.True(t, out.Results[0].Err.Retryable, out.Results[0].Err.Error())
	}
	its = items("l", "p", "c")
	narrowed, err := s.Commit(ctx, &queen.PushBatch{PartitionID: pid, Items: its, LeaderOf: leadersOf(its), Watermark: first.LastOffset, AssumedWindow: 3600})
	require.NoError(t, err)
	require.Equal(t, []queen.Verdict{queen.Queued}, verdicts(narrowed), "no lookup, no failure")

	// The failed lookup started a rebuild pass of its own (rebuildLostRanges);
	// the compaction step re-fills the range unless that pass did first.
	r, err := compactSidecarRanges(ctx, s.pool, compactGrace)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return r.Refilled >= 1 || s.lost.lostPasses() >= 1 }, 30*time.Second, 10*time.Millisecond)
	again := commit(t, s, pid, items("l", "p", "a", "c"))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Duplicate}, verdicts(again))
	require.Equal(t, first.Results[0].MessageID, again.Results[0].MessageID)
	require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, ackTxn(pid, g, "b", queen.AckCompleted, nil)))
}

// TestSidecarLostRangeRebuiltOnDemand (SPEC.md §9): the first lookup that
// meets a level-0 range a crash emptied (QS001) starts a rebuild pass of
// its own, so the pushes work again without the retention leader's next
// pass; the repeat is then a duplicate of the stored message.
func TestSidecarLostRangeRebuiltOnDemand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupSpan(t, time.Hour)
	pid := partition(t, s, "od", "p")
	first := commit(t, s, pid, items("od", "p", "a"))
	crash(t, s)
	its := items("od", "p", "a")
	out, err := s.Commit(ctx, &queen.PushBatch{PartitionID: pid, Items: its, LeaderOf: leadersOf(its), Watermark: -1})
	if err == nil {
		require.Equal(t, queen.Failed, out.Results[0].Verdict, "the lookup meets the emptied range")
	}
	require.Eventually(t, func() bool { return s.lost.lostPasses() > 0 }, 30*time.Second, 10*time.Millisecond,
		"no rebuild pass started by the failed lookup")
	again := commit(t, s, pid, items("od", "p", "a"))
	require.Equal(t, []queen.Verdict{queen.Duplicate}, verdicts(again))
	require.Equal(t, first.Results[0].MessageID, again.Results[0].MessageID)
}

// TestSidecarLostClosedRangeIsCompactedFromSegments: a closed range a crash
// emptied is compacted from its segments' hashes (the authority, migration
// 0017), so no hash of it is lost.
func TestSidecarLostClosedRangeIsCompactedFromSegments(t *testing.T) {
	t.Parallel()
	s := setupSpan(t, time.Second)
	pid := partition(t, s, "k", "p")
	first := commit(t, s, pid, items("k", "p", "a", "b"))
	crash(t, s)
	compactThrough(t, s, lastStamp(t, s, pid))
	again := commit(t, s, pid, items("k", "p", "b"))
	require.Equal(t, []queen.Verdict{queen.Duplicate}, verdicts(again))
	require.Equal(t, first.Results[1].MessageID, again.Results[0].MessageID)
}

// TestMigrationToSidecarBlocksKeepsVerdicts (SPEC.md §2): a database
// written before migration 0011 (logged ranges of per-hash rows) upgrades in
// place; an id pushed before is a duplicate after, in its old range and
// once that range is compacted.
func TestMigrationToSidecarBlocksKeepsVerdicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := databaseAt(t, 10)

	// Pushed by the old layout: a logged range of the current minute with
	// the per-hash rows (what 0010's bundle_insert wrote).
	const pid = "01a22cb6-e34c-7283-bd05-8abc3fa7ac10"
	for _, q := range []string{
		`SELECT queen.sidecar_create_range(date_trunc('minute', clock_timestamp()), date_trunc('minute', clock_timestamp()) + interval '1 minute')`,
		`INSERT INTO queen.queues (name) VALUES ('m')`,
		`INSERT INTO queen.partitions (id, queue_id, name, last_offset) SELECT '` + pid + `', id, 'p', 1 FROM queen.queues`,
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	var persistence string
	require.NoError(t, conn.QueryRow(ctx, `SELECT relpersistence::text FROM pg_class WHERE relname = queen.sidecar_range_name(date_trunc('minute', clock_timestamp()))`).Scan(&persistence))
	require.Equal(t, "p", persistence, "0010 made logged ranges")
	ha, hb := queen.HashTxn("old-a"), queen.HashTxn("old-b")
	_, err := conn.Exec(ctx, `
WITH t AS (SELECT clock_timestamp() AS now),
s AS (INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, message_ids, frames)
      SELECT $1, 0, 1, t.now, decode(repeat('ab', 32), 'hex'), $4 FROM t),
l AS (INSERT INTO queen.log_txns (partition_id, first_offset, last_offset, created_at, hashes)
      SELECT $1, 0, 1, t.now, $2::bytea || $3::bytea FROM t)
INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
SELECT $1, h.hash, h.o, 0, t.now FROM t, (VALUES (encode($2, 'hex')::uuid, 0), (encode($3, 'hex')::uuid, 1)) h (hash, o)`,
		pid, ha[:], hb[:], AppendFrame(AppendFrame(nil, "old-a", nil, []byte(`{}`)), "old-b", nil, []byte(`{}`)))
	require.NoError(t, err)

	applied, err := Migrate(ctx, url)
	require.NoError(t, err)
	require.Contains(t, applied, 11)
	s, err := Open(ctx, Config{URL: url, SidecarRange: time.Minute})
	require.NoError(t, err)
	defer s.Close()
	p := uuid.MustParse(pid)
	out := commit(t, s, p, items("m", "p", "old-a", "new"))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Queued}, verdicts(out), "in the old range, level 0")
	require.Equal(t, int64(0), out.Results[0].Offset)

	// The old range compacted: still a duplicate, from level 1.
	var lo, hi time.Time
	require.NoError(t, conn.QueryRow(ctx, `SELECT lo, hi FROM queen.sidecar_ranges WHERE lo = date_trunc('minute', (SELECT created_at FROM queen.segments WHERE first_offset = 0))`).Scan(&lo, &hi))
	var n int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT queen.sidecar_compact($1, $2)`, lo, hi).Scan(&n))
	require.GreaterOrEqual(t, n, int64(2))
	out = commit(t, s, p, items("m", "p", "old-b", "old-a"))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Duplicate}, verdicts(out), "level 1")
	require.Equal(t, int64(1), out.Results[0].Offset)
}

// TestSidecarFindReadsFromTheSpan (SPEC.md §3, §8): a lookup in a level-1
// table that is not merged yet (the open one) reads the bucket's rows from
// the range holding its span's start on, not every row since the table's
// lo, and still finds a hash stored after that start in the same range.
func TestSidecarFindReadsFromTheSpan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupSpan(t, time.Second)
	pid := partition(t, s, "f", "p")
	require.Equal(t, []queen.Verdict{queen.Queued}, verdicts(commit(t, s, pid, items("f", "p", "a"))))
	atA := lastStamp(t, s, pid)
	compactThrough(t, s, atA)
	// b lands in a later range: the one holding a is closed.
	require.Equal(t, []queen.Verdict{queen.Queued}, verdicts(commit(t, s, pid, items("f", "p", "b"))))
	atB := lastStamp(t, s, pid)
	compactThrough(t, s, atB)

	// Both ranges are in one open level-1 table of one bucket, so without
	// the bound a lookup of b would read a's row too.
	var tables, bits int
	require.NoError(t, s.pool.QueryRow(ctx, `
SELECT count(*), max(t.bits) FROM queen.sidecar_tables t
 WHERE t.lo <= $1 AND t.hi > $2
   AND NOT EXISTS (SELECT 1 FROM queen.hash_merged_alive a WHERE a.wide = t.wide AND a.complete)`, atA, atB).Scan(&tables, &bits))
	require.Equal(t, 1, tables, "a and b are in one open level-1 table")
	require.Zero(t, bits, "one bucket")

	find := func(txn string, since time.Time) (offsets []int64, blockRows float64) {
		h := queen.HashTxn(txn)
		args := []any{pid, uuid.UUID(h), since}
		const q = `SELECT "offset" FROM queen.sidecar_find($1, $2, '-infinity', $3, 'infinity', true)`
		rows, err := s.pool.Query(ctx, q, args...)
		require.NoError(t, err)
		for rows.Next() {
			var o int64
			require.NoError(t, rows.Scan(&o))
			offsets = append(offsets, o)
		}
		require.NoError(t, rows.Err())
		var plan []map[string]any
		require.NoError(t, s.pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+q, args...).Scan(&plan))
		var walk func(n map[string]any)
		walk = func(n map[string]any) {
			if rel, _ := n["Relation Name"].(string); strings.HasPrefix(rel, "hash_blocks_") {
				blockRows += n["Actual Rows"].(float64) * n["Actual Loops"].(float64)
			}
			kids, _ := n["Plans"].([]any)
			for _, k := range kids {
				walk(k.(map[string]any))
			}
		}
		walk(plan[0]["Plan"].(map[string]any))
		return offsets, blockRows
	}
	// A span starting at b's stamp, inside b's range (past its lo): b is
	// found from its range's row alone.
	offsets, read := find("b", atB)
	require.Equal(t, []int64{1}, offsets)
	require.Equal(t, float64(1), read, "only the row of the range holding the span's start")
	// The whole window still reads both rows and finds a.
	offsets, read = find("a", atA.Add(-time.Hour))
	require.Equal(t, []int64{0}, offsets)
	require.Equal(t, float64(2), read)
}

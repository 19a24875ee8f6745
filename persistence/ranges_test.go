package persistence

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// setupSpan returns a Store with sidecar ranges of span on a fresh migrated
// database.
func setupSpan(t testing.TB, span time.Duration) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{URL: pgtest.NewDatabase(t), SidecarRange: span})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// sidecarRange is one partition of log_txn_hashes other than the DEFAULT
// one.
type sidecarRange struct {
	Name   string
	Lo, Hi time.Time
}

func ranges(t testing.TB, s *Store) []sidecarRange {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `
SELECT c.relname::text,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'queen.log_txn_hashes'::regclass AND c.relname <> 'log_txn_hashes_default'
 ORDER BY 2`)
	require.NoError(t, err)
	var out []sidecarRange
	for rows.Next() {
		var r sidecarRange
		require.NoError(t, rows.Scan(&r.Name, &r.Lo, &r.Hi))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// pastRanges creates the ranges of s's span covering [now - ago - span,
// now - ago + span], so rows aged by ago land in ranges, not in DEFAULT.
func pastRanges(t testing.TB, s *Store, ago time.Duration) {
	t.Helper()
	_, err := s.pool.Exec(context.Background(), `
SELECT queen.sidecar_create_range(to_timestamp((b + k) * $1), to_timestamp((b + k + 1) * $1))
  FROM (SELECT floor(extract(epoch FROM clock_timestamp() - make_interval(secs => $2)) / $1)::bigint AS b) n,
       generate_series(-1, 1) k`, int64(s.span/time.Second), ago.Seconds())
	require.NoError(t, err)
}

// pastRangeCount counts the sidecar ranges (level 0 or compacted into
// level 1) that ended over a minute ago.
func pastRangeCount(t testing.TB, s *Store) int {
	t.Helper()
	var n int
	require.NoError(t, s.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM queen.sidecar_ranges WHERE hi < clock_timestamp() - interval '1 minute'`).Scan(&n))
	return n
}

// physicalHashes counts partition pid's log_txn_hashes rows, counting or
// not, and those in the DEFAULT partition.
func physicalHashes(t testing.TB, s *Store, pid uuid.UUID) (all, inDefault int64) {
	t.Helper()
	require.NoError(t, s.pool.QueryRow(context.Background(), `
SELECT (SELECT count(*) FROM queen.log_txn_hashes WHERE partition_id = $1),
       (SELECT count(*) FROM queen.log_txn_hashes_default WHERE partition_id = $1)`, pid).Scan(&all, &inDefault))
	return all, inDefault
}

// TestSidecarRangesCreatedAheadIdempotentConcurrent: Open creates the three
// ranges covering now through now + 2 spans, aligned to the span, named
// after their start; running the creation again, from many sessions at
// once, changes nothing and fails nothing.
func TestSidecarRangesCreatedAheadIdempotentConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupSpan(t, time.Minute)
	var now time.Time
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now))
	rs := ranges(t, s)
	require.Len(t, rs, 3, "%v", rs)
	for i, r := range rs {
		require.Zero(t, r.Lo.Unix()%60, "aligned to the span: %v", r)
		require.Equal(t, time.Minute, r.Hi.Sub(r.Lo))
		require.Equal(t, "log_txn_hashes_"+r.Lo.UTC().Format("20060102_150405"), r.Name)
		if i > 0 {
			require.Equal(t, rs[i-1].Hi, r.Lo, "contiguous")
		}
	}
	require.False(t, rs[0].Lo.After(now), "covers now")
	require.True(t, rs[2].Hi.After(now.Add(2*time.Minute)), "covers now + 2 spans")

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.EnsureSidecarRanges(ctx)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	after := ranges(t, s)
	require.GreaterOrEqual(t, len(after), 3)
	require.LessOrEqual(t, len(after), 4, "one more only when the clock crossed a range boundary meanwhile")
	require.Equal(t, rs[0], after[0])

	// A second store (another broker) on the same database: same ranges.
	s2, err := Open(ctx, Config{URL: s.pool.Config().ConnString(), SidecarRange: time.Minute})
	require.NoError(t, err)
	defer s2.Close()
	r, err := s2.EnsureSidecarRanges(ctx)
	require.NoError(t, err)
	require.Zero(t, r.Deferred)
}

// TestSidecarRangeDDLGivesUpOnABusyTable: a range DDL that cannot have the
// table's lock gives up after the short lock_timeout (counted Deferred, not
// an error) and succeeds on the next round.
func TestSidecarRangeDDLGivesUpOnABusyTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupSpan(t, time.Minute)
	last := ranges(t, s)[2]
	_, err := s.pool.Exec(ctx, `DROP TABLE queen.`+last.Name)
	require.NoError(t, err)

	holder, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx) //nolint:errcheck // released below; this covers a failure before
	_, err = holder.Exec(ctx, `LOCK TABLE queen.log_txn_hashes IN ACCESS SHARE MODE`)
	require.NoError(t, err)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := s.EnsureSidecarRanges(dctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, r.Deferred, 1)
	require.NoError(t, holder.Rollback(ctx))

	r, err = s.EnsureSidecarRanges(ctx)
	require.NoError(t, err)
	require.Zero(t, r.Deferred)
	require.Contains(t, ranges(t, s), last)
}

// TestSidecarRangeDropKeepsWhatCounts (SPEC.md §3, §4, §7): a range is
// dropped only once none of its entries can count any more — past the
// largest floor over all queues, GREATEST(dedupWindowSeconds,
// completedRetentionSeconds, the floor) — and until then its entries count
// for every queue (migration 0017: they are self-contained), so a window
// widened meanwhile finds them.
func TestSidecarRangeDropKeepsWhatCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupSpan(t, time.Minute)
	low := RetentionConfig{TxnsFloor: time.Second}
	configure(t, s, "w", `{"dedupWindowSeconds":30}`)
	configure(t, s, "long", `{"dedupWindowSeconds":600}`)
	w := partition(t, s, "w", "p")
	long := partition(t, s, "long", "p")
	commitEach(t, s, w, "w", "p", "m0")
	commitEach(t, s, long, "long", "p", "l0")
	pastRanges(t, s, 180*time.Second)
	age(t, s, w, 180*time.Second)
	age(t, s, long, 180*time.Second)
	for _, pid := range []uuid.UUID{w, long} {
		all, inDefault := physicalHashes(t, s, pid)
		require.Equal(t, [2]int64{1, 0}, [2]int64{all, inDefault}, "aged rows moved to a past range")
	}

	// long's window (600 s) is the largest floor: nothing is dropped.
	r, err := dropSidecarRanges(ctx, s.pool, 1)
	require.NoError(t, err)
	require.Zero(t, r.Dropped)
	require.Equal(t, 3, pastRangeCount(t, s))
	c := step(t, s, low)
	require.Zero(t, c.Ranges.Dropped)
	require.Equal(t, 3, c.Ranges.Compacted, "the closed past ranges went to level 1")
	pr, err := s.SidecarPrints(ctx, w, 3600)
	require.NoError(t, err)
	require.True(t, printed(pr, "m0"), "the compaction wrote w's fingerprints: %+v", pr)
	require.False(t, printed(pr, "l0"), "and only w's")
	require.Equal(t, rowCounts{Segments: 1, Messages: 1, Hashes: 1}, counts(t, s, w), "w's entry stays in level 1")
	require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, ackTxn(long, g, "l0", queen.AckCompleted, nil)))
	again := commit(t, s, long, items("long", "p", "l0"))
	require.Equal(t, queen.Duplicate, again.Results[0].Verdict, "long's window (600 s) holds l0")
	out := commit(t, s, w, items("w", "p", "m1"))
	require.Equal(t, queen.Queued, out.Results[0].Verdict)
	require.Equal(t, int64(1), out.Results[0].Offset)

	// A window widened while the entry lives finds it: m0 is a duplicate of
	// offset 0 (level 1 names its partition, so long's entries match nothing
	// of w's).
	configure(t, s, "w", `{"dedupWindowSeconds":3600}`)
	again = commit(t, s, w, items("w", "p", "m0", "l0"))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Queued}, verdicts(again))
	require.Equal(t, int64(0), again.Results[0].Offset)
	require.Equal(t, int64(2), again.Results[1].Offset)

	// The largest floor is w's 3600 s: the ranges stay.
	configure(t, s, "long", `{"dedupWindowSeconds":30}`)
	c = step(t, s, low)
	require.Zero(t, c.Ranges.Dropped, "w's window (3600 s) may still need the ranges")
	require.Equal(t, 3, pastRangeCount(t, s))

	// Every queue at 30 s: the past ranges go (hi < now - 30 s), the current
	// ones stay, and what is young still counts.
	configure(t, s, "w", `{"dedupWindowSeconds":30}`)
	c = step(t, s, low)
	require.Equal(t, 3, c.Ranges.Dropped, "the three past ranges")
	require.Zero(t, pastRangeCount(t, s))
	require.GreaterOrEqual(t, len(ranges(t, s)), 3, "the current ones stay")
	for _, pid := range []uuid.UUID{w, long} {
		all, _ := physicalHashes(t, s, pid)
		require.Equal(t, counts(t, s, pid).Hashes, all, "only level-0 rows are left")
	}
	var prints, alive int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM queen.hash_prints), (SELECT count(*) FROM queen.hash_prints_alive)`).Scan(&prints, &alive))
	require.Equal(t, [2]int{0, 0}, [2]int{prints, alive}, "the fingerprints went with their ranges")
	again = commit(t, s, w, items("w", "p", "m1", "m0"))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Queued}, verdicts(again))
	require.Equal(t, int64(1), again.Results[0].Offset)
	require.Equal(t, int64(3), again.Results[1].Offset)

	// Nothing left to drop.
	c = step(t, s, low)
	require.Zero(t, c.Ranges.Dropped)
}

// TestSidecarDefaultPartition: a row whose range does not exist lands in
// the DEFAULT partition (the push does not fail), counts there like
// anywhere else, and is deleted once past the largest floor over all queues.
func TestSidecarDefaultPartition(t *testing.T) {
	t.Parallel()
	s := setupSpan(t, time.Minute)
	low := RetentionConfig{TxnsFloor: time.Second}
	configure(t, s, "d", `{"dedupWindowSeconds":7200}`)
	pid := partition(t, s, "d", "p")
	commitEach(t, s, pid, "d", "p", "x0", "x1")
	age(t, s, pid, time.Hour) // no range an hour ago
	all, inDefault := physicalHashes(t, s, pid)
	require.Equal(t, [2]int64{2, 2}, [2]int64{all, inDefault})

	// No range at all: every row goes to DEFAULT, and pushes still work.
	for _, r := range ranges(t, s) {
		_, err := s.pool.Exec(context.Background(), `DROP TABLE queen.`+r.Name)
		require.NoError(t, err)
	}
	commitEach(t, s, pid, "d", "p", "x2")
	out := commit(t, s, pid, items("d", "p", "x0", "x2", "x3"))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Duplicate, queen.Queued}, verdicts(out), "rows in DEFAULT count")
	require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, ackTxn(pid, g, "x1", queen.AckCompleted, nil)))

	// Retention recreates the ranges, keeps what counts, and deletes the
	// rows of DEFAULT once past every queue's floor.
	c := step(t, s, low)
	require.Equal(t, 3, c.Ranges.Created+c.Ranges.Deferred)
	require.GreaterOrEqual(t, c.Ranges.Created, 2, "the range of now holds rows in DEFAULT (x2, x3): deferred, not failed")
	require.Zero(t, c.Sidecar.Rows, "the window (7200 s) holds every row")
	configure(t, s, "d", `{"dedupWindowSeconds":1800}`)
	c = step(t, s, low)
	require.Equal(t, RetentionStepCount{Statements: 1, Rows: 2, Messages: 2}, c.Sidecar, "x0 and x1, an hour old")
	all, inDefault = physicalHashes(t, s, pid)
	require.Equal(t, [2]int64{2, 2}, [2]int64{all, inDefault}, "x2 and x3, young, counting, still in DEFAULT")
	require.Equal(t, int64(2), counts(t, s, pid).Hashes)
	out = commit(t, s, pid, items("d", "p", "x0", "x3"))
	require.Equal(t, []queen.Verdict{queen.Queued, queen.Duplicate}, verdicts(out))
}

// TestMigrationMovesExistingSidecarRows: migration 0006 on a database of the
// 0005 shape (log_txn_hashes one table) moves the rows that count into
// 5-minute ranges covering them and leaves the dead ones behind.
func TestMigrationMovesExistingSidecarRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := databaseAt(t, 5)
	const pid = "01a22cb6-e34c-7283-bd05-8abc3fa7ac10"
	for _, q := range []string{
		// 30 segments of 10 frames, one every 40 s, 20 minutes back; the
		// first 5 segments' log_txns rows are gone.
		`INSERT INTO queen.log_txns (partition_id, first_offset, last_offset, created_at, hashes)
		 SELECT '` + pid + `', g * 10, g * 10 + 9, clock_timestamp() - make_interval(secs => 1200 - g * 40), ''::bytea
		   FROM generate_series(5, 29) g`,
		`INSERT INTO queen.log_txn_hashes
		 SELECT '` + pid + `', md5(o::text)::uuid, o, (o / 10) * 10, clock_timestamp() - make_interval(secs => 1200 - (o / 10) * 40)
		   FROM generate_series(0, 299) o`,
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	applied, err := migrateTo(ctx, url, 6)
	require.NoError(t, err)
	require.Equal(t, []int{6}, applied)

	var moved, inDefault, parts int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM queen.log_txn_hashes), (SELECT count(*) FROM queen.log_txn_hashes_default),
		(SELECT count(*) FROM pg_inherits WHERE inhparent = 'queen.log_txn_hashes'::regclass)`).Scan(&moved, &inDefault, &parts))
	require.Equal(t, int64(250), moved, "the rows of the 25 segments whose log_txns row exists")
	require.Zero(t, inDefault)
	require.GreaterOrEqual(t, parts, int64(1+4), "DEFAULT and the 5-minute ranges of 17 minutes")
	var off int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT "offset" FROM queen.log_txn_hashes WHERE partition_id = $1 AND hash = md5('123')::uuid`, pid).Scan(&off))
	require.Equal(t, int64(123), off)

	// Migrated to the end, the store opens on it and creates the ranges of
	// now.
	_, err = Migrate(ctx, url)
	require.NoError(t, err)
	s, err := Open(ctx, Config{URL: url})
	require.NoError(t, err)
	defer s.Close()
	require.GreaterOrEqual(t, len(ranges(t, s)), 3)
}

// sidecarTables lists the level-1 tables (migration 0023): the first range's
// lo, the listed ranges' span, bucket bits and ranges compacted into each.
type sidecarTable struct {
	Wide, Lo, Hi time.Time
	Bits, Ranges int
	Exists       bool
}

func sidecarTables(t testing.TB, s *Store) []sidecarTable {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `
SELECT t.wide, t.lo, t.hi, t.bits, t.ranges, to_regclass(format('queen.%I', queen.hash_blocks_name(t.wide))) IS NOT NULL
  FROM queen.sidecar_tables t ORDER BY t.wide`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sidecarTable, error) {
		var x sidecarTable
		err := r.Scan(&x.Wide, &x.Lo, &x.Hi, &x.Bits, &x.Ranges, &x.Exists)
		return x, err
	})
	require.NoError(t, err)
	return out
}

// storedEntries counts partition pid's level-1 entries as stored, listed
// range or not.
func storedEntries(t testing.TB, s *Store, pid uuid.UUID) int64 {
	t.Helper()
	var n int64
	require.NoError(t, s.pool.QueryRow(context.Background(), `
SELECT count(*) FROM queen.hash_blocks k CROSS JOIN LATERAL generate_subscripts(k.hashes, 1) AS i
 CROSS JOIN LATERAL queen.hash_entry(k.entries, i) e WHERE e.num = (SELECT num FROM queen.partitions WHERE id = $1)`, pid).Scan(&n))
	return n
}

// pastWindow opens a store of one-minute sidecar ranges whose queue "w" has
// a dedup window of window seconds, creates the ranges around each of agos
// ago (pastRanges), and returns it with a retention config that compacts a
// range as soon as it closes (the production grace, 5 s, left a range that
// closed as the test ran uncompacted in the first seconds of a minute). It
// first waits until no range can close while the test runs
// (clearOfMinuteEnd).
func pastWindow(t *testing.T, window int, agos ...time.Duration) (*Store, RetentionConfig) {
	t.Helper()
	clearOfMinuteEnd(t, 15*time.Second)
	s := setupSpan(t, time.Minute)
	configure(t, s, "w", fmt.Sprintf(`{"dedupWindowSeconds":%d}`, window))
	for _, ago := range agos {
		pastRanges(t, s, ago)
	}
	return s, RetentionConfig{TxnsFloor: time.Second, CompactGrace: time.Nanosecond}
}

// clearOfMinuteEnd returns once the clock (this machine's, which the local
// PostgreSQL shares) is at least 5 s into its minute and clear before its
// end, waiting when it is not: a test of one-minute ranges whose steps
// expect the current range open, and the last closed one at least its
// floor old, must not see a range close while it runs (a step would then
// compact it too: one more range in a table, or a range too young to
// expire).
func clearOfMinuteEnd(t *testing.T, clear time.Duration) {
	t.Helper()
	const settled = 5 * time.Second
	now := time.Now()
	into := now.Sub(now.Truncate(time.Minute))
	switch {
	case into < settled:
		<-time.After(settled - into)
	case time.Minute-into < clear:
		<-time.After(time.Minute - into + settled)
	}
}

// TestSidecarTablesShareRanges (migration 0023, SPEC.md §8): contiguous
// compacted ranges share one level-1 table, bucketed alike, while the table
// spans at most a quarter of the longest window, so a cold lookup descends
// once per table, not once per range; a repeat of a hash in any of them is a
// duplicate naming its original. A range that expires leaves its entries in
// the table while a later range lives, and they count no more (the
// inspector does not find them); the table goes with its last range.
func TestSidecarTablesShareRanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, low := pastWindow(t, 3600, 60*time.Second, 180*time.Second, 300*time.Second)
	pid := partition(t, s, "w", "p")
	first := commit(t, s, pid, items("w", "p", "a"))
	age(t, s, pid, 120*time.Second)
	second := commit(t, s, pid, items("w", "p", "b"))
	age(t, s, pid, 60*time.Second) // a about 180 s old, b about 60 s

	c := step(t, s, low)
	require.GreaterOrEqual(t, c.Ranges.Compacted, 4, "the past ranges, from 6 minutes ago")
	var compacted int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM queen.sidecar_ranges WHERE bits IS NOT NULL`).Scan(&compacted))
	tables := sidecarTables(t, s)
	require.Len(t, tables, 1, "contiguous ranges, 3600 s window: one table (%+v)", tables)
	require.Equal(t, compacted, tables[0].Ranges)
	require.True(t, tables[0].Exists)
	require.Zero(t, tables[0].Bits, "a handful of hashes a range: one bucket")
	require.Equal(t, int64(2), storedEntries(t, s, pid))

	// Duplicates only: a new item would write a level-0 row in the current
	// minute, whose range a later step compacts if the minute ends while
	// the test runs (then the 0-s window's step lists it, and only the next
	// one expires it).
	again := commit(t, s, pid, items("w", "p", "b", "a"))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Duplicate}, verdicts(again))
	require.Equal(t, second.Results[0].MessageID, again.Results[0].MessageID)
	require.Equal(t, first.Results[0].MessageID, again.Results[1].MessageID)
	require.Equal(t, []int64{1, 0}, []int64{again.Results[0].Offset, again.Results[1].Offset})

	// A 100-s window: a's range (over 120 s old) expires, b's stays, and
	// with it the table, where a's entry stays but no longer counts.
	configure(t, s, "w", `{"dedupWindowSeconds":100}`)
	c = step(t, s, low)
	require.Positive(t, c.Ranges.Dropped)
	tables = sidecarTables(t, s)
	require.Len(t, tables, 1)
	require.True(t, tables[0].Exists)
	require.Equal(t, int64(2), storedEntries(t, s, pid), "a's entry is still stored")
	insp, err := s.InspectDedup(ctx, "w", "p", queen.HashTxn("a"))
	require.NoError(t, err)
	require.Equal(t, queen.Unknown, insp.State, "a's range is gone: its entry counts no more")
	insp, err = s.InspectDedup(ctx, "w", "p", queen.HashTxn("b"))
	require.NoError(t, err)
	require.Equal(t, queen.InWindow, insp.State)
	require.Equal(t, int64(1), *insp.Offset)

	// No window: every compacted range expires, and the table with the last.
	configure(t, s, "w", `{"dedupWindowSeconds":0}`)
	step(t, s, low)
	require.Empty(t, sidecarTables(t, s))
	require.Zero(t, storedEntries(t, s, pid))
	var left int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'queen.hash_blocks'::regclass`).Scan(&left))
	require.Zero(t, left, "no level-1 table is left")
}

// TestSidecarTableStartsOnMoreBits (migration 0023): a range that needs more
// than 2 bucket bits over the newest table's (its traffic grew over 4x)
// starts a table of its own on its own bits, so a bucket stays about 48
// hashes; its repeats are still duplicates.
func TestSidecarTableStartsOnMoreBits(t *testing.T) {
	t.Parallel()
	s := setupSpan(t, time.Minute)
	low := RetentionConfig{TxnsFloor: time.Second}
	configure(t, s, "w", `{"dedupWindowSeconds":3600}`)
	for _, ago := range []time.Duration{60 * time.Second, 180 * time.Second} {
		pastRanges(t, s, ago)
	}
	pid := partition(t, s, "w", "p")
	commit(t, s, pid, items("w", "p", "one"))
	age(t, s, pid, 120*time.Second)
	many := make([]string, 400)
	for i := range many {
		many[i] = fmt.Sprintf("m%d", i)
	}
	commit(t, s, pid, items("w", "p", many...))
	age(t, s, pid, 70*time.Second)
	step(t, s, low)

	tables := sidecarTables(t, s)
	require.GreaterOrEqual(t, len(tables), 2, "%+v", tables)
	var bits []int
	for _, x := range tables {
		bits = append(bits, x.Bits)
	}
	require.Contains(t, bits, 0, "the quiet ranges: one bucket")
	require.Contains(t, bits, 4, "400 hashes: 16 buckets of about 25 (%v)", bits)
	again := commit(t, s, pid, items("w", "p", "m7", "one", "m399", "new"))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Duplicate, queen.Duplicate, queen.Queued}, verdicts(again))
	require.Equal(t, []int64{8, 0, 400}, []int64{again.Results[0].Offset, again.Results[1].Offset, again.Results[2].Offset})
}

// mergedTable is a level-1 table's merged index (migration 0027) as listed
// in queen.hash_merged_alive, with the prints its partition holds.
type mergedTable struct {
	Wide     time.Time
	Bits     int
	Ranges   int
	Complete bool
	Prints   int64
}

func mergedTables(t testing.TB, s *Store) []mergedTable {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `
SELECT a.wide, a.bits, cardinality(a.los), a.complete,
       (SELECT COALESCE(sum(cardinality(x.prints)), 0)::bigint FROM queen.hash_merged x WHERE x.wide = a.wide)
  FROM queen.hash_merged_alive a ORDER BY a.wide`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (mergedTable, error) {
		var m mergedTable
		return m, r.Scan(&m.Wide, &m.Bits, &m.Ranges, &m.Complete, &m.Prints)
	})
	require.NoError(t, err)
	return out
}

// TestSidecarMergedTables (migration 0027, SPEC.md §3, §8: the cold probe
// independent of the window's length): once a level-1 table is closed (a
// newer one exists) the upkeep writes its merged index, one row per bucket
// naming the range that holds each hash, and lookups read it instead of a
// row per range: repeats of hashes in merged tables are duplicates naming
// their originals, new ids are queued. The merged index is unlogged: with
// its listing gone (a crash), lookups read range by range again and the
// next pass merges again. It goes with its table.
func TestSidecarMergedTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A 600-s window: a level-1 table holds at most 2 one-minute ranges
	// (a quarter of the window), so the past ranges fill several tables.
	s, low := pastWindow(t, 600, 60*time.Second, 180*time.Second, 300*time.Second, 420*time.Second)
	pid := partition(t, s, "w", "p")
	first := commit(t, s, pid, items("w", "p", "a", "a2"))
	age(t, s, pid, 120*time.Second)
	second := commit(t, s, pid, items("w", "p", "b"))
	age(t, s, pid, 120*time.Second)
	third := commit(t, s, pid, items("w", "p", "c"))
	age(t, s, pid, 120*time.Second) // a about 360 s old, b 240 s, c 120 s

	c := step(t, s, low)
	require.GreaterOrEqual(t, c.Ranges.Compacted, 6)
	tables := sidecarTables(t, s)
	require.GreaterOrEqual(t, len(tables), 3, "2 ranges a table: %+v", tables)
	merged := mergedTables(t, s)
	require.NotEmpty(t, merged, "the closed tables are merged in the same pass")
	var prints int64
	for _, m := range merged {
		require.True(t, m.Complete, "%+v", m)
		require.GreaterOrEqual(t, m.Ranges, 2)
		require.NotEqual(t, tables[len(tables)-1].Wide, m.Wide, "the newest table is not merged")
		prints += m.Prints
	}
	require.Equal(t, int64(3), prints, "a, a2 and b are in closed tables, each once: %+v", merged)
	require.Equal(t, len(merged), c.Ranges.Merged)

	inWindow := func(txn string) queen.DedupState {
		t.Helper()
		insp, err := s.InspectDedup(ctx, "w", "p", queen.HashTxn(txn))
		require.NoError(t, err)
		return insp.State
	}
	require.Equal(t, queen.InWindow, inWindow("a"))

	// The lookup reads the merged index: its rows emptied while it is still
	// listed complete, a is not found (this is what a crash must not do;
	// a crash empties the listing too).
	_, err := s.pool.Exec(ctx, `TRUNCATE queen.hash_merged`)
	require.NoError(t, err)
	require.Equal(t, queen.Unknown, inWindow("a"), "the merged index is what the lookup reads")
	// A crash: the listing goes with the rows; lookups read range by range.
	_, err = s.pool.Exec(ctx, `TRUNCATE queen.hash_merged_alive`)
	require.NoError(t, err)
	require.Equal(t, queen.InWindow, inWindow("a"))
	c = step(t, s, low)
	require.Equal(t, len(merged), c.Ranges.Merged, "merged again")
	require.Len(t, mergedTables(t, s), len(merged))

	// Duplicates only (see TestSidecarTablesShareRanges): a new item's
	// range could close and be compacted before the last step.
	again := commit(t, s, pid, items("w", "p", "c", "b", "a2", "a"))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Duplicate, queen.Duplicate, queen.Duplicate}, verdicts(again))
	require.Equal(t, third.Results[0].MessageID, again.Results[0].MessageID)
	require.Equal(t, second.Results[0].MessageID, again.Results[1].MessageID)
	require.Equal(t, first.Results[1].MessageID, again.Results[2].MessageID)
	require.Equal(t, first.Results[0].MessageID, again.Results[3].MessageID)
	require.Equal(t, []int64{3, 2, 1, 0}, []int64{again.Results[0].Offset, again.Results[1].Offset, again.Results[2].Offset, again.Results[3].Offset})

	// No window: every range expires, each table with its last range, and
	// its merged index with it.
	configure(t, s, "w", `{"dedupWindowSeconds":0}`)
	step(t, s, low)
	require.Empty(t, sidecarTables(t, s))
	require.Empty(t, mergedTables(t, s))
	var left int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'queen.hash_merged'::regclass`).Scan(&left))
	require.Zero(t, left, "no merged index is left")
}

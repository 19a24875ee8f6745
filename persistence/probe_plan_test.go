package persistence

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// TestProbePlanCachedOnSmallTablesStaysIndexed: a broker prepares the probe
// while log_txn_hashes is small (before autovacuum's first ANALYZE); the
// generic plan it caches must still look each hash up by (partition_id,
// hash) once the window holds many rows, not scan the partition (which made
// pushes slow down as the window filled).
func TestProbePlanCachedOnSmallTablesStaysIndexed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	const pid = "01a22cb6-e34c-7283-bd05-8abc3fa7ac10"
	fill := func(from, to int) {
		_, err := conn.Exec(ctx, `INSERT INTO queen.log_txn_hashes
			SELECT $1, md5(g::text)::uuid, g, (g / 100) * 100, clock_timestamp() FROM generate_series($2::int, $3::int) g`, pid, from, to)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `INSERT INTO queen.segments (partition_num, first_offset, last_offset, created_at, legacy_ids, frames, hashes)
			SELECT (SELECT num FROM queen.partitions WHERE id = $1), g, g + 99, clock_timestamp(), decode(repeat('ab', 1600), 'hex'), ''::bytea, decode(repeat('cd', 1600), 'hex')
			  FROM generate_series($2::int, $3::int, 100) g`, pid, from, to)
		require.NoError(t, err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO queen.queues (name) VALUES ('q');
		INSERT INTO queen.partitions (id, queue_id, name) SELECT '`+pid+`', id, 'p' FROM queen.queues`)
	require.NoError(t, err)
	fill(0, 199)
	var hits []string
	for i := 150; i < 200; i++ { // in the window, with their segments
		hits = append(hits, fmt.Sprintf("md5('%d')::uuid", i))
	}
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `PREPARE probe(uuid[], uuid[], bigint[], int[], int[], boolean[], bigint[], timestamptz[], timestamptz[], text[], text[]) AS `+sqlBundleProbe)
	require.NoError(t, err)
	fill(200, 199_999)
	var hashes []string
	for i := 0; i < 50; i++ {
		hashes = append(hashes, fmt.Sprintf("'00000000-0000-0000-0000-%012d'::uuid", i))
	}
	hashes = append(hashes, hits...)
	probe := `EXECUTE probe('{` + pid + `}', ARRAY[` + strings.Join(hashes, ",") + `], '{-1}', '{1}', '{100}', array_fill(false, ARRAY[100]), '{0}', array_fill('-infinity'::timestamptz, ARRAY[100]), array_fill('infinity'::timestamptz, ARRAY[100]), '{q}', '{q}')`
	found := 0
	res, err := conn.Query(ctx, probe)
	require.NoError(t, err)

	for res.Next() {
		found++
	}
	require.NoError(t, res.Err())
	require.Equal(t, 1+50, found, "the partition's window row and the 50 in-window hashes")
	rows, err := conn.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) `+probe)
	require.NoError(t, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	text := strings.Join(plan, "\n")
	require.Regexp(t, `Index Cond: \(hash = h\.hash\)`, text, text)
	// 100 descents of a 200k-entry index and 50 segment lookups touch a few
	// hundred buffers; a scan of the partition touches thousands.
	m := regexp.MustCompile(`Buffers: shared hit=(\d+)`).FindStringSubmatch(text)
	require.NotNil(t, m, text)
	buffers, _ := strconv.Atoi(m[1])
	require.Less(t, buffers, 1000, text)

	// A warm cache's watermark (the last offset): the probe reads the
	// segments after it through segments_offset (none here) and looks
	// nothing up by hash.
	narrowed := `EXECUTE probe('{` + pid + `}', ARRAY[` + strings.Join(hashes, ",") + `], '{199999}', '{1}', '{100}', array_fill(false, ARRAY[100]), '{3600}', array_fill('-infinity'::timestamptz, ARRAY[100]), array_fill('infinity'::timestamptz, ARRAY[100]), '{q}', '{q}')`
	rows, err = conn.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) `+narrowed)
	require.NoError(t, err)
	plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	text = strings.Join(plan, "\n")
	require.Regexp(t, `Index Scan using segments_kept_\w+ on segments_kept`, text, text)
	require.NotContains(t, text, "Seq Scan on segments", text)
	require.NotContains(t, text, "Seq Scan on partitions", text)
	m = regexp.MustCompile(`Buffers: shared hit=(\d+)`).FindStringSubmatch(text)
	require.NotNil(t, m, text)
	buffers, _ = strconv.Atoi(m[1])
	require.Less(t, buffers, 50, text)
}

// TestProbePrunesRangesOutsideTheWindow: the probe's per-hash lookups
// descend only the time ranges of log_txn_hashes that overlap the window
// (run-time partition pruning on now() - window), with a generic plan and
// with a custom one; ranges wholly older than the window are never executed.
func TestProbePrunesRangesOutsideTheWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupSpan(t, time.Minute)
	// Ten past ranges, 12 to 3 minutes ago, each holding rows; the window
	// is 120 s.
	pastRanges(t, s, 10*time.Minute)
	pastRanges(t, s, 7*time.Minute)
	pastRanges(t, s, 4*time.Minute)
	configure(t, s, "pr", `{"dedupWindowSeconds":120}`)
	pid := partition(t, s, "pr", "p")
	commitEach(t, s, pid, "pr", "p", "young")
	_, err := s.pool.Exec(ctx, `INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
		SELECT $1, md5(g::text)::uuid, g, g, clock_timestamp() - make_interval(mins => 4 + g % 8) FROM generate_series(1, 2000) g`, pid)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `ANALYZE queen.log_txn_hashes`)
	require.NoError(t, err)
	var now time.Time
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now))
	var old, inWindow []string
	for _, r := range ranges(t, s) {
		switch {
		case r.Hi.Before(now.Add(-150 * time.Second)):
			old = append(old, r.Name)
		case r.Hi.After(now):
			inWindow = append(inWindow, r.Name)
		}
	}
	require.GreaterOrEqual(t, len(old), 5)
	require.NotEmpty(t, inWindow)

	conn, err := s.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	young := queen.HashTxn("young")
	// As pushes run it (probe_plan_begin).
	_, err = conn.Exec(ctx, `SET enable_seqscan = off`)
	require.NoError(t, err)
	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		_, err = conn.Exec(ctx, `SET plan_cache_mode = `+mode)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `PREPARE probe_`+mode+`(uuid[], uuid[], bigint[], int[], int[], boolean[], bigint[], timestamptz[], timestamptz[], text[], text[]) AS `+sqlBundleProbe)
		require.NoError(t, err)
		probe := fmt.Sprintf(`EXECUTE probe_`+mode+`('{%s}', ARRAY['%s'::uuid, md5('3')::uuid], '{-1}', '{1}', '{2}', '{f,f}', '{0}', '{-infinity,-infinity}', '{infinity,infinity}', '{pr}', '{pr}')`, pid, uuid.UUID(young))
		rows, err := conn.Query(ctx, probe)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int, error) { return 1, nil })
		require.NoError(t, err)
		require.Len(t, got, 2, "%s: the window row and young (md5('3') is older than the window)", mode)

		rows, err = conn.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF) `+probe)
		require.NoError(t, err)
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		text := strings.Join(plan, "\n")
		scans := map[string]string{}
		for _, line := range plan {
			if m := regexp.MustCompile(` on (log_txn_hashes_\d{8}_\d{6}) `).FindStringSubmatch(line); m != nil {
				scans[m[1]] = line
			}
		}
		for _, name := range old {
			if line, ok := scans[name]; ok {
				require.Contains(t, line, "(never executed)", "%s: %s is outside the window\n%s", mode, name, text)
			}
		}
		for _, name := range inWindow {
			require.Contains(t, scans, name, "%s\n%s", mode, text)
			require.NotContains(t, scans[name], "(never executed)", "%s: %s is inside the window\n%s", mode, name, text)
			require.Contains(t, scans[name], "Index Scan using log_txn_hashes_", "%s: %s\n%s", mode, name, text)
		}
		// A hit is self-contained (migration 0017): no other row is read
		// to count it.
		require.NotContains(t, text, "Join Filter: (x.segment = t.first_offset)", text)
		t.Logf("%s:\n%s", mode, text)
	}
}

// TestProbePrunesRangesOutsideASuspectsSpan: with the cache's knowledge
// (a watermark), a suspect is looked up only in the time ranges that
// overlap its span (the created_at of the cache generations that may hold
// it), pruned at run time per hash, with a generic plan and a custom one;
// the span is applied (a row outside it is not found), and a wider window
// than the cache assumed voids the spans.
func TestProbePrunesRangesOutsideASuspectsSpan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupSpan(t, time.Minute)
	pastRanges(t, s, 10*time.Minute)
	pastRanges(t, s, 7*time.Minute)
	pastRanges(t, s, 4*time.Minute)
	configure(t, s, "ps", `{"dedupWindowSeconds":900}`)
	pid := partition(t, s, "ps", "p")
	commitEach(t, s, pid, "ps", "p", "young")
	// The "old" row: a segment 6 minutes back, inside the window.
	// One stamp for both tables, as a push writes them.
	var back time.Time
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT clock_timestamp() - interval '6 minutes'`).Scan(&back))
	for _, q := range []string{
		`UPDATE queen.segments SET created_at = $2 WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1)`,
		`UPDATE queen.log_txn_hashes SET created_at = $2 WHERE partition_id = $1`,
	} {
		_, err := s.pool.Exec(ctx, q, pid, back)
		require.NoError(t, err)
	}
	var err error
	commitEach(t, s, pid, "ps", "p", "new")
	_, err = s.pool.Exec(ctx, `ANALYZE queen.log_txn_hashes`)
	require.NoError(t, err)
	var now time.Time
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now))
	var older []string
	for _, r := range ranges(t, s) {
		if r.Hi.Before(now.Add(-90 * time.Second)) {
			older = append(older, r.Name)
		}
	}
	require.GreaterOrEqual(t, len(older), 5)

	conn, err := s.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET enable_seqscan = off`)
	require.NoError(t, err)
	young, fresh := queen.HashTxn("young"), queen.HashTxn("new")
	span := func(from, to time.Time) string {
		return "'" + from.UTC().Format(time.RFC3339Nano) + "'::timestamptz, '" + to.UTC().Format(time.RFC3339Nano) + "'::timestamptz"
	}
	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		_, err = conn.Exec(ctx, `SET plan_cache_mode = `+mode)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `PREPARE span_`+mode+`(uuid[], uuid[], bigint[], int[], int[], boolean[], bigint[], timestamptz[], timestamptz[], text[], text[]) AS `+sqlBundleProbe)
		require.NoError(t, err)
		run := func(hash queen.Hash, assumed int, from, to time.Time) ([]string, int) {
			q := fmt.Sprintf(`EXECUTE span_%s('{%s}', ARRAY['%s'::uuid], '{1}', '{1}', '{1}', '{t}', '{%d}', ARRAY[%s], ARRAY[%s], '{ps}', '{ps}')`,
				mode, pid, uuid.UUID(hash), assumed,
				strings.Split(span(from, to), ", ")[0], strings.Split(span(from, to), ", ")[1])
			rows, err := conn.Query(ctx, q)
			require.NoError(t, err)
			got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int, error) { return 1, nil })
			require.NoError(t, err)
			rows, err = conn.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF) `+q)
			require.NoError(t, err)
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			return plan, len(got)
		}
		// "new" suspected in the last minute: found, and the older ranges
		// are never descended.
		plan, n := run(fresh, 900, now.Add(-time.Minute), now)
		text := strings.Join(plan, "\n")
		require.Equal(t, 2, n, "%s: the window row and the hit\n%s", mode, text)
		for _, line := range plan {
			if m := regexp.MustCompile(` on (log_txn_hashes_\d{8}_\d{6}) `).FindStringSubmatch(line); m != nil && slices.Contains(older, m[1]) {
				require.Contains(t, line, "(never executed)", "%s: %s is outside the span\n%s", mode, m[1], text)
			}
		}
		// "young" (6 minutes back) suspected only in the last minute: the
		// probe believes the span (the cache never gives a span that
		// misses an in-window row; TestCacheWatermarkIsAPromise).
		_, n = run(young, 900, now.Add(-time.Minute), now)
		require.Equal(t, 1, n, "%s: the span is applied", mode)
		// The right span finds it.
		_, n = run(young, 900, now.Add(-7*time.Minute), now.Add(-5*time.Minute))
		require.Equal(t, 2, n, "%s: found within its span", mode)
		// A window wider than the cache assumed: spans are void.
		_, n = run(young, 60, now.Add(-time.Minute), now)
		require.Equal(t, 2, n, "%s: a wider window voids the span", mode)
	}
}

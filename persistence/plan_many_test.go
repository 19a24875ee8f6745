package persistence

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// fillMany inserts partitions p<from>..p<to> of queue q (ids md5 of their
// names), each with a consumer row of group g at cursor 4 and five old
// two-message segments (offsets 0..9) with their hashes.
func fillMany(t *testing.T, conn *pgx.Conn, from, to int) {
	t.Helper()
	ctx := context.Background()
	_, err := conn.Exec(ctx, `INSERT INTO queen.partitions (id, queue_id, name)
		SELECT md5('p' || g)::uuid, q.id, 'p' || g FROM generate_series($1::int, $2::int) g, queen.queues q`, from, to)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO queen.partition_ends (partition_id, num, last_offset)
		SELECT p.id, p.num, 9 FROM generate_series($1::int, $2::int) g JOIN queen.partitions p ON p.id = md5('p' || g)::uuid`, from, to)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO queen.consumers (partition_id, consumer_group, queue_id, "cursor")
		SELECT md5('p' || g)::uuid, 'g', q.id, 4 FROM generate_series($1::int, $2::int) g, queen.queues q`, from, to)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO queen.segments (partition_num, first_offset, last_offset, created_at, legacy_ids, frames, hashes)
		SELECT p.num, o, o + 1, clock_timestamp() - interval '1 hour', ''::bytea, ''::bytea, decode(repeat('cd', 32), 'hex')
		  FROM generate_series($1::int, $2::int) g JOIN queen.partitions p ON p.id = md5('p' || g)::uuid CROSS JOIN generate_series(0, 8, 2) o`, from, to)
	require.NoError(t, err)
}

// spanArgsSQL is consume_segments_many's arguments as SQL literals for an
// EXECUTE (whose parameters cannot be subqueries): what a pop passes from
// consumer_lock (the partition's number, the cursor and its segment's
// time), read now from the consumer rows of group 'g' of the partitions
// arr (a uuid[] expression), no delayedProcessing or windowBuffer, and
// batch.
func spanArgsSQL(t *testing.T, conn *pgx.Conn, arr string, batch int) string {
	t.Helper()
	var nums, cursors, since string
	var n int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT COALESCE(array_agg(p.num ORDER BY u.i), '{}')::text,
		       COALESCE(array_agg(c."cursor" ORDER BY u.i), '{}')::text,
		       COALESCE(array_agg(CASE WHEN c.cursor_at_of = c."cursor" THEN COALESCE(c.cursor_at, '-infinity') ELSE '-infinity'::timestamptz END ORDER BY u.i), '{}')::text,
		       count(*)
		  FROM unnest(`+arr+`) WITH ORDINALITY AS u (id, i) JOIN queen.partitions p ON p.id = u.id
		  JOIN queen.consumers c ON c.partition_id = u.id AND c.consumer_group = 'g'`).Scan(&nums, &cursors, &since, &n))
	return fmt.Sprintf(`'%s'::bigint[], '%s'::bigint[], '%s'::timestamptz[], array_fill(0::bigint, ARRAY[%d]), array_fill(0::bigint, ARRAY[%d]), %d`,
		nums, cursors, since, n, n, batch)
}

// spanArgTypes is consume_segments_many's parameter types, for a PREPARE.
const spanArgTypes = "bigint[], bigint[], timestamptz[], bigint[], bigint[], int"

// TestManyPlansStayIndexed: the consumer statements of pops, acks and
// transactions (consumer_lock and its SKIP LOCKED form,
// consume_segments_many, consume_update_many releasing or taking a lease,
// consume_hash_at), run as they run them (after consume_plan_begin), keep one keyed lookup
// per partition with a generic plan cached while the tables were tiny and
// used once they hold 10,000 partitions: no scan of queen.consumers,
// queen.partitions or queen.segments, no hash join, a bounded number of
// buffers for 32 partitions.
func TestManyPlansStayIndexed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := manyDB(t)
	var err error
	execAll(t, conn, `ANALYZE queen.consumers, queen.partitions, queen.segments_kept`,
		`SET plan_cache_mode = force_generic_plan`, `BEGIN`, sqlConsumePlanBegin)
	ids := make([]string, 32)
	for i := range ids {
		ids[i] = fmt.Sprintf("md5('p%d')::uuid", i*300)
	}
	arr := "ARRAY[" + strings.Join(ids, ",") + "]"
	cases := []struct{ name, sql, args, exec string }{
		{"lock", sqlConsumerLock, "uuid[], text[]", arr + ", array_fill('g'::text, ARRAY[32])"},
		{"lock_skip", sqlConsumerLockSkip, "uuid[], text[]", arr + ", array_fill('g'::text, ARRAY[32])"},
		{"segments_many", sqlConsumeSegsMany, spanArgTypes, spanArgsSQL(t, conn, arr, 100)},
		{"hash_at", sqlConsumeHashAt, "uuid[], bigint[], text[]", arr + ", array_fill(7::bigint, ARRAY[32]), array_fill('g'::text, ARRAY[32])"},
		{"update_many", sqlConsumeUpdateMany, "uuid[], text, bigint[], uuid[], float8[], bigint[], jsonb[], jsonb[]",
			arr + ", 'g', array_fill(5::bigint, ARRAY[32]), array_fill(NULL::uuid, ARRAY[32]), array_fill(NULL::float8, ARRAY[32])," +
				" array_fill(NULL::bigint, ARRAY[32]), array_fill('{}'::jsonb, ARRAY[32]), array_fill(NULL::jsonb, ARRAY[32])"},
		// A pop's write: every row takes the lease, recorded in
		// consumer_leases by the same statement.
		{"update_many_lease", sqlConsumeUpdateMany, "uuid[], text, bigint[], uuid[], float8[], bigint[], jsonb[], jsonb[]",
			arr + ", 'g', array_fill(4::bigint, ARRAY[32]), array_fill(md5('lease')::uuid, ARRAY[32]), array_fill(30::float8, ARRAY[32])," +
				" array_fill(9::bigint, ARRAY[32]), array_fill('{}'::jsonb, ARRAY[32]), array_fill(NULL::jsonb, ARRAY[32])"},
	}
	for _, c := range cases {
		_, err = conn.Exec(ctx, `PREPARE `+c.name+`(`+c.args+`) AS `+c.sql)
		require.NoError(t, err, c.name)
		_, err = conn.Exec(ctx, `EXECUTE `+c.name+`(`+c.exec+`)`) // the generic plan, on tiny tables
		require.NoError(t, err, c.name)
	}
	_, err = conn.Exec(ctx, `COMMIT`)
	require.NoError(t, err)
	fillMany(t, conn, 4, 10_000)
	_, err = conn.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, sqlConsumePlanBegin)
	require.NoError(t, err)
	for i := range cases {
		if cases[i].sql == sqlConsumeSegsMany { // the rows the fill made
			cases[i].exec = spanArgsSQL(t, conn, arr, 100)
		}
	}
	for _, c := range cases {
		text, buffers := explainBuffers(t, conn, c.name, c.exec)
		require.NotContains(t, text, "Seq Scan", "%s\n%s", c.name, text)
		if c.name != "hash_at" { // hash_at joins its arrays' rows with its (partition, group) rows, both in memory
			require.NotContains(t, text, "Hash Join", "%s\n%s", c.name, text)
		}
		require.NotContains(t, text, "Merge Join", "%s\n%s", c.name, text)
		require.Contains(t, text, "rows=32 loops=1", "%s: a row per partition\n%s", c.name, text)
		// A few index descents per partition: tens of buffers each; a scan
		// of a 10,000-row table per partition is thousands.
		require.Less(t, buffers, 32*40, "%s\n%s", c.name, text)
		t.Logf("%s:\n%s", c.name, text)
	}
	_, err = conn.Exec(ctx, `ROLLBACK`)
	require.NoError(t, err)
}

// TestHashAtReadsEachConsumerOnce: consume_hash_at reads a consumer row
// and a partition's number once per (partition, group) named, not once per
// offset: an ack of ten offsets in each of 32 partitions (a pop's batch, as
// dense traffic lands) costs a segment descent per offset and little more,
// with every offset's hash found. Read per offset, it cost about 10 buffers
// an offset (3 consumer, 3 partition, 3-4 segment).
func TestHashAtReadsEachConsumerOnce(t *testing.T) {
	t.Parallel()
	conn := manyDB(t)
	fillMany(t, conn, 4, 10_000)
	execAll(t, conn, `ANALYZE queen.consumers, queen.partitions, queen.segments_kept`,
		`SET plan_cache_mode = force_generic_plan`, `BEGIN`, sqlConsumePlanBegin,
		`PREPARE hash_at(uuid[], bigint[], text[]) AS `+sqlConsumeHashAt)
	const parts, per = 32, 10
	var ids, offs []string
	for p := range parts {
		for o := range per {
			ids, offs = append(ids, fmt.Sprintf("md5('p%d')::uuid", p*300)), append(offs, strconv.Itoa(o))
		}
	}
	exec := "ARRAY[" + strings.Join(ids, ",") + "], ARRAY[" + strings.Join(offs, ",") + "]::bigint[], array_fill('g'::text, ARRAY[" + strconv.Itoa(parts*per) + "])"
	text, buffers := explainBuffers(t, conn, "hash_at", exec)
	require.NotContains(t, text, "Seq Scan", text)
	require.Contains(t, text, fmt.Sprintf("rows=%d loops=1", parts*per), "a row per offset\n%s", text)
	require.Less(t, buffers, parts*per*6, text)
	t.Logf("%d buffers for %d offsets:\n%s", buffers, parts*per, text)
	requireHashesAt(t, conn, exec, parts*per, 0xcd)
	execAll(t, conn, `ROLLBACK`)
}

// requireHashesAt runs the prepared hash_at with arguments exec and
// requires n rows, each hash 16 bytes of b (as fillMany and the tests
// store them).
func requireHashesAt(t *testing.T, conn *pgx.Conn, exec string, n int, b byte) {
	t.Helper()
	rows, err := conn.Query(context.Background(), `EXECUTE hash_at(`+exec+`)`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]byte, error) {
		var i int64
		var h []byte
		return h, r.Scan(&i, &h)
	})
	require.NoError(t, err)
	require.Len(t, got, n)
	for _, h := range got {
		require.Equal(t, strings.Repeat(string([]byte{b}), 16), string(h))
	}
}

// execAll runs each statement on conn, in order, and fails the test at the
// first error.
func execAll(t *testing.T, conn *pgx.Conn, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		_, err := conn.Exec(context.Background(), q)
		require.NoError(t, err, q)
	}
}

// manyDB returns a connection to a fresh migrated database holding queue
// q and fillMany's partitions 0-3, closed at the test's end.
func manyDB(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `INSERT INTO queen.queues (name) VALUES ('q')`)
	require.NoError(t, err)
	fillMany(t, conn, 0, 3)
	return conn
}

// explainBuffers runs the prepared statement name with arguments exec under
// EXPLAIN (ANALYZE, BUFFERS) and returns the plan's text and its shared
// buffers hit.
func explainBuffers(t *testing.T, conn *pgx.Conn, name, exec string) (string, int) {
	t.Helper()
	rows, err := conn.Query(context.Background(), `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE `+name+`(`+exec+`)`)
	require.NoError(t, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	text := strings.Join(plan, "\n")
	m := regexp.MustCompile(`Buffers: shared hit=(\d+)`).FindStringSubmatch(text)
	require.NotNil(t, m, text)
	buffers, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return text, buffers
}

// TestPopPlanSkipsTheTimeIndex: with a long consumed history in
// queen.segments_kept (created_at rising with the offset, the BRIN index
// on created_at summarised by a VACUUM, as autovacuum does), a pop's
// consume_segments_many reads from each partition's cursor through
// segments_offset: no bitmap of the BRIN index, whose pages cover the
// whole table newer than the cursor's segment, so its cost grew with the
// table (a 64-partition run with consumers and no retention: 6.8 ms a
// call after two minutes, 27.7 ms after six, the push rate falling with
// it). The buffers stay those of a few index descents per partition. The
// audit's incremental read (audit_segments), bounded in time the same way,
// goes through segments_offset too.
func TestPopPlanSkipsTheTimeIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := manyDB(t)
	fillMany(t, conn, 4, 63)
	const segs = 2_000 // per partition, two messages each, as 64 partitions' traffic lands
	_, err := conn.Exec(ctx, `DELETE FROM queen.segments`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO queen.segments (partition_num, first_offset, last_offset, created_at, legacy_ids, frames, hashes)
		SELECT p.num, 2 * o, 2 * o + 1, timestamptz '2026-01-01' + o * interval '10 ms', ''::bytea, $2::bytea, decode(repeat('cd', 32), 'hex')
		  FROM generate_series(0, $1::int - 1) o CROSS JOIN generate_series(0, 63) g JOIN queen.partitions p ON p.id = md5('p' || g)::uuid
		 ORDER BY o, p.num`, segs, make([]byte, 1000))
	require.NoError(t, err)
	// Every cursor 10 segments before its partition's end, at its
	// segment's time.
	cursor := 2*segs - 20
	_, err = conn.Exec(ctx, `UPDATE queen.partition_ends SET last_offset = $1::bigint * 2 - 1`, segs)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `UPDATE queen.consumers SET "cursor" = $1::bigint, cursor_at_of = $1::bigint,
		cursor_at = timestamptz '2026-01-01' + ($1::bigint / 2) * interval '10 ms'`, cursor)
	require.NoError(t, err)
	execAll(t, conn, `VACUUM ANALYZE queen.segments_kept, queen.consumers, queen.partitions`,
		`SET plan_cache_mode = force_generic_plan`, `BEGIN`, sqlConsumePlanBegin,
		`PREPARE segments_long(`+spanArgTypes+`) AS `+sqlConsumeSegsMany)
	exec := spanArgsSQL(t, conn, `ARRAY[md5('p0')::uuid, md5('p1')::uuid, md5('p2')::uuid, md5('p3')::uuid]`, 100)
	requireKeyedRead(t, conn, "segments_long", exec, 40, 4*40) // ten segments a partition

	// The audit's incremental read of the same partitions above the same
	// bounds, bounded in time from the bound's segment on (the time
	// ranges before it pruned), in the audit's transaction
	// (audit_plan_begin): through segments_offset too, no bitmap.
	var queue string
	require.NoError(t, conn.QueryRow(ctx, `SELECT name FROM queen.queues LIMIT 1`).Scan(&queue))
	execAll(t, conn, `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`, sqlAuditPlanBegin,
		`PREPARE audit_after(text[], text[], bigint[], boolean, timestamptz[]) AS `+sqlAuditSegments)
	since := fmt.Sprintf(`timestamptz '2026-01-01' + %d * interval '10 ms'`, cursor/2)
	exec = fmt.Sprintf(`ARRAY['%s'], ARRAY['p0', 'p1', 'p2', 'p3'], array_fill(%d::bigint, ARRAY[4]), true, array_fill(%s, ARRAY[4])`, queue, cursor, since)
	requireKeyedRead(t, conn, "audit_after", exec, 36, 4*60) // nine segments a partition above its bound
}

// requireKeyedRead runs the prepared statement name(exec) under EXPLAIN
// ANALYZE in the transaction conn holds, requires no bitmap scan, rows
// rows returned and fewer than most buffers, and rolls the transaction
// back.
func requireKeyedRead(t *testing.T, conn *pgx.Conn, name, exec string, rows, most int) {
	t.Helper()
	text, buffers := explainBuffers(t, conn, name, exec)
	t.Logf("%s", text)
	require.NotContains(t, text, "Bitmap", "%s", text)
	require.Contains(t, text, fmt.Sprintf("rows=%d loops=1", rows), "%s", text)
	require.Less(t, buffers, most, "%s", text)
	_, err := conn.Exec(context.Background(), `ROLLBACK`)
	require.NoError(t, err)
}

// TestConsumerReadsSkipRangesAhead: a queue with a retention stores its
// segments in time ranges, and the broker makes five or more of them ahead
// of now (segmentLead), empty until their time comes. A backward descent
// of segments_offset through the partitioned table (ORDER BY first_offset
// DESC LIMIT 1) starts every range it does not prune: each empty range
// ahead cost two buffers per offset in an ack's consume_hash_at (about 70 %
// of the statement at 64 partitions and a 10-minute retention), per moved
// cursor in consume_update_many and per partition in a pop's
// consume_segments_many. Every segment a statement sees was stamped before
// the statement read the clock, so the ranges that start later are pruned:
// none of them is executed, and the answers stay those of the segments
// stored.
func TestConsumerReadsSkipRangesAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := manyDB(t)
	execAll(t, conn, `UPDATE queen.queues SET options = options || '{"retentionSeconds": 600}'`)
	_, err := ensureSegmentRanges(ctx, conn)
	require.NoError(t, err)
	ranges, _, err := readSegmentRanges(ctx, conn)
	require.NoError(t, err)
	var now time.Time
	require.NoError(t, conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now))
	ahead := map[string]bool{}
	for _, r := range ranges {
		if r.lo.After(now.Add(time.Minute)) { // later than this test can run into
			ahead[r.name] = true
		}
	}
	require.GreaterOrEqual(t, len(ahead), 4, "ranges made ahead: %v", ranges)
	// Partitions p0..p3: five more two-message segments each (offsets
	// 10..19), stored now, so in the range of now; every cursor at 11,
	// with its segment's time.
	execAll(t, conn,
		`INSERT INTO queen.segments (partition_num, first_offset, last_offset, created_at, legacy_ids, frames, hashes, timed)
		 SELECT p.num, o, o + 1, clock_timestamp(), ''::bytea, ''::bytea, decode(repeat('ef', 32), 'hex'), true
		   FROM queen.partitions p CROSS JOIN generate_series(10, 18, 2) o`,
		`UPDATE queen.partition_ends SET last_offset = 19`,
		`UPDATE queen.consumers c SET "cursor" = 11, cursor_at_of = 11,
		        cursor_at = (SELECT s.created_at FROM queen.segments s JOIN queen.partitions p ON p.num = s.partition_num
		                      WHERE p.id = c.partition_id AND s.first_offset = 10)`,
		`ANALYZE queen.consumers, queen.partitions`,
		`BEGIN`, sqlConsumePlanBegin,
		`PREPARE hash_at(uuid[], bigint[], text[]) AS `+sqlConsumeHashAt,
		`PREPARE segments_many(`+spanArgTypes+`) AS `+sqlConsumeSegsMany,
		`PREPARE update_many(uuid[], text, bigint[], uuid[], float8[], bigint[], jsonb[], jsonb[]) AS `+sqlConsumeUpdateMany)
	arr := `ARRAY[md5('p0')::uuid, md5('p1')::uuid, md5('p2')::uuid, md5('p3')::uuid]`
	var ackIDs, ackOffs []string
	for p := range 4 {
		for o := 12; o <= 15; o++ {
			ackIDs, ackOffs = append(ackIDs, fmt.Sprintf("md5('p%d')::uuid", p)), append(ackOffs, strconv.Itoa(o))
		}
	}
	cases := []struct{ name, exec string }{
		// An ack of offsets 12..15 of each partition, naming their transactionIds.
		{"hash_at", "ARRAY[" + strings.Join(ackIDs, ",") + "], ARRAY[" + strings.Join(ackOffs, ",") + "]::bigint[], array_fill('g'::text, ARRAY[16])"},
		{"segments_many", spanArgsSQL(t, conn, arr, 100)},
		// The cursors move to 15.
		{"update_many", arr + `, 'g', array_fill(15::bigint, ARRAY[4]), array_fill(NULL::uuid, ARRAY[4]), array_fill(NULL::float8, ARRAY[4]),
			array_fill(NULL::bigint, ARRAY[4]), array_fill('{}'::jsonb, ARRAY[4]), array_fill(NULL::jsonb, ARRAY[4])`},
	}
	scanned := regexp.MustCompile(` on (segments_\w+) `)
	for _, c := range cases {
		text, _ := explainBuffers(t, conn, c.name, c.exec)
		t.Logf("%s:\n%s", c.name, text)
		seen := 0
		for _, line := range strings.Split(text, "\n") {
			m := scanned.FindStringSubmatch(line)
			if m == nil || !ahead[m[1]] {
				continue
			}
			seen++
			require.Contains(t, line, "never executed", "%s: a range ahead of now was read\n%s", c.name, text)
		}
		require.Positive(t, seen, "%s: the plan names the ranges ahead (pruned at run time, not at planning)\n%s", c.name, text)
	}
	// The answers: every offset's hash, each partition's segments above
	// the cursor (10..19), and the cursors' times.
	requireHashesAt(t, conn, cases[0].exec, 16, 0xef)
	// update_many ran under EXPLAIN ANALYZE: the cursors are at 15, at
	// their segment's time, found in the range of now.
	var moved int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM queen.consumers c JOIN queen.partitions p ON p.id = c.partition_id
		JOIN queen.segments s ON s.partition_num = p.num AND s.first_offset = 14
		WHERE c."cursor" = 15 AND c.cursor_at_of = 15 AND c.cursor_at = s.created_at`).Scan(&moved))
	require.Equal(t, 4, moved)
	rows, err := conn.Query(ctx, `EXECUTE segments_many(`+spanArgsSQL(t, conn, arr, 100)+`)`)
	require.NoError(t, err)
	firsts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
		var i, first, last int64
		var at time.Time
		var ids, frames []byte
		var sub *string
		return first, r.Scan(&i, &first, &last, &at, &ids, &frames, &sub)
	})
	require.NoError(t, err)
	require.Equal(t, []int64{16, 18, 16, 18, 16, 18, 16, 18}, firsts, "the segments above each cursor")
	execAll(t, conn, `ROLLBACK`)
}

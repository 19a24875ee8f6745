package persistence

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

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
		_, err = conn.Exec(ctx, `INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, message_ids, frames)
			SELECT $1, g, g + 99, clock_timestamp(), decode(repeat('ab', 1600), 'hex'), ''::bytea
			  FROM generate_series($2::int, $3::int, 100) g`, pid, from, to)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `INSERT INTO queen.log_txns (partition_id, first_offset, last_offset, created_at, hashes)
			SELECT $1, g, g + 99, clock_timestamp(), decode(repeat('cd', 1600), 'hex')
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
	_, err = conn.Exec(ctx, `PREPARE probe(uuid[], uuid[], bigint[], int[], int[], boolean[], bigint[]) AS `+sqlBundleProbe)
	require.NoError(t, err)
	fill(200, 199_999)
	var hashes []string
	for i := 0; i < 50; i++ {
		hashes = append(hashes, fmt.Sprintf("'00000000-0000-0000-0000-%012d'::uuid", i))
	}
	hashes = append(hashes, hits...)
	probe := `EXECUTE probe('{` + pid + `}', ARRAY[` + strings.Join(hashes, ",") + `], '{-1}', '{1}', '{100}', array_fill(false, ARRAY[100]), '{0}')`
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
	require.Regexp(t, `Index Cond: \(\(partition_id = w(_1)?\.partition_id\) AND \(hash = h\.hash\)\)`, text, text)
	// 100 descents of a 200k-entry index and 50 segment lookups touch a few
	// hundred buffers; a scan of the partition touches thousands.
	m := regexp.MustCompile(`Buffers: shared hit=(\d+)`).FindStringSubmatch(text)
	require.NotNil(t, m, text)
	buffers, _ := strconv.Atoi(m[1])
	require.Less(t, buffers, 1000, text)

	// A warm cache's watermark (the last offset): the probe reads the
	// log_txns rows after it through the primary key (none here) and looks
	// nothing up by hash.
	narrowed := `EXECUTE probe('{` + pid + `}', ARRAY[` + strings.Join(hashes, ",") + `], '{199999}', '{1}', '{100}', array_fill(false, ARRAY[100]), '{3600}')`
	rows, err = conn.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) `+narrowed)
	require.NoError(t, err)
	plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	text = strings.Join(plan, "\n")
	require.Contains(t, text, "Index Scan using log_txns_pkey", text)
	require.NotContains(t, text, "Seq Scan on log_txns", text)
	require.NotContains(t, text, "Seq Scan on partitions", text)
	m = regexp.MustCompile(`Buffers: shared hit=(\d+)`).FindStringSubmatch(text)
	require.NotNil(t, m, text)
	buffers, _ = strconv.Atoi(m[1])
	require.Less(t, buffers, 50, text)
}

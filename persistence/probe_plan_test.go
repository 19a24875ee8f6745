package persistence

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// TestProbePlanCachedOnAnEmptyTableStaysIndexed: a broker prepares the probe
// while log_txn_hashes is empty; the plan it caches must still look each hash
// up by (partition_id, hash) once the window holds many rows, not scan the
// partition (which made the probe grow with the window).
func TestProbePlanCachedOnAnEmptyTableStaysIndexed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `PREPARE probe(uuid[], uuid[], bigint[], int[], int[]) AS `+sqlBundleProbe)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO queen.log_txn_hashes
		SELECT '01a22cb6-e34c-7283-bd05-8abc3fa7ac10', md5(g::text)::uuid, g, clock_timestamp() FROM generate_series(0, 49999) g`)
	require.NoError(t, err)
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE probe('{01a22cb6-e34c-7283-bd05-8abc3fa7ac10}', '{01a22cb6-e34c-7283-bd05-8abc3fa7ac11}', '{-1}', '{1}', '{1}')`)
	require.NoError(t, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	text := strings.Join(plan, "\n")
	require.Contains(t, text, "log_txn_hashes_lookup", text)
	require.Regexp(t, `Index Cond: \(\(partition_id = i\.partition_id\) AND \(hash = ANY`, text, text)
}

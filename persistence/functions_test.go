package persistence

import (
	"context"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// functionDefs returns pg_get_functiondef of every function of schema queen,
// by name.
func functionDefs(t *testing.T, conn *pgx.Conn) map[string]string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		SELECT p.proname, pg_get_functiondef(p.oid)
		  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		 WHERE n.nspname = 'queen'`)
	require.NoError(t, err)
	defs := map[string]string{}
	for rows.Next() {
		var name, def string
		require.NoError(t, rows.Scan(&name, &def))
		defs[name] = def
	}
	require.NoError(t, rows.Err())
	return defs
}

// evolved lists the functions whose bodies changed after the move of
// migration 0016, and why: the files define them anew, the migrations keep
// the definitions they applied, as history.
var evolved = map[string]string{
	"sidecar_find":          "migration 0017: level 1 self-contained, no log_txns; 0023: one descent per level-1 table; 0024: packed entries; 0027: a closed table's merged index; 0.6.9: an open table read from the range holding the span's start",
	"sidecar_compact":       "migration 0017: self-contained blocks, built from the segments after a crash; 0023: ranges share level-1 tables; 0024: packed entries; 0027: a merged table takes no more ranges",
	"sidecar_refill":        "migration 0017: level 0 rebuilt from the segments' hashes",
	"sidecar_expire":        "migration 0017: ranges expire by time alone; 0023: a level-1 table goes with its last range; 0027: and its merged index",
	"segment_range_keepers": "migration 0017: a range is kept until the sidecar compacted its time",
	"segment_storage":       "migration 0017: hashes stored EXTERNAL",
}

// added lists the functions first defined by their files, after migration
// 0016 (no migration defines them), and why.
var added = map[string]string{
	"partition_cold_end":    "migration 0019: a partition's end from its floor and its newest segment",
	"sidecar_prints_refill": "migration 0021: a compacted range's fingerprints from its level-1 blocks",
	"hash_entry":            "migration 0024: reads a packed level-1 entry",
	"hash_entry_pack":       "migration 0024: packs a level-1 entry",
	"sidecar_floor":         "migration 0023: the queues' largest sidecar floor, read by retention, compaction and expiry",
	"sidecar_merge":         "migration 0027: a closed level-1 table's merged index, a step at a time",
}

// TestFunctionsAsMigrated: persistence/functions holds exactly the functions
// the migrations left in the schema, and, but for those listed in evolved
// (which must differ), with the same definitions, so moving their bodies
// out of the migrations (issue 42) changed nothing: a database migrated by
// the migrations alone and the same database after the functions are
// applied define the same functions, byte for byte as PostgreSQL prints
// them.
func TestFunctionsAsMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := databaseAt(t, math.MaxInt) // the migrations alone
	before := functionDefs(t, conn)
	var names []string
	for name := range before {
		names = append(names, name)
	}
	for name := range added {
		require.NotContains(t, before, name, "%s is listed as added, but a migration defines it", name)
		names = append(names, name)
	}
	sort.Strings(names)
	var files []string
	for _, f := range embeddedFunctions {
		files = append(files, f.Name)
	}
	require.Equal(t, names, files, "one file per function the migrations define or added lists, and no other")

	applied, err := applyFunctions(ctx, conn, embeddedFunctions, functionsDigest, SchemaVersion())
	require.NoError(t, err)
	require.True(t, applied)
	after := functionDefs(t, conn)
	for _, name := range names {
		if _, ok := added[name]; ok {
			require.Contains(t, after, name)
			continue
		}
		if why, ok := evolved[name]; ok {
			require.NotEqual(t, before[name], after[name], "%s is listed as evolved (%s)", name, why)
			continue
		}
		require.Equal(t, before[name], after[name], "the file redefines %s as the migrations did", name)
	}
}

// TestFunctionsAppliedOnce: Migrate applies the functions when the database
// does not record their digest, and not again while it does (a start must
// not invalidate running brokers' plans); a changed digest (a newer binary's
// bodies) applies them again.
func TestFunctionsAppliedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := databaseAt(t, 12)
	_, err := Migrate(ctx, url)
	require.NoError(t, err)
	var digest string
	var schema int
	var at time.Time
	read := func() {
		t.Helper()
		require.NoError(t, conn.QueryRow(ctx, `SELECT digest, schema_version, applied_at FROM queen.schema_functions`).Scan(&digest, &schema, &at))
	}
	read()
	require.Equal(t, functionsDigest, digest)
	require.Equal(t, SchemaVersion(), schema)
	first := at

	_, err = Migrate(ctx, url)
	require.NoError(t, err)
	read()
	require.Equal(t, first, at, "an up-to-date database is left alone")

	_, err = conn.Exec(ctx, `UPDATE queen.schema_functions SET digest = 'older'`)
	require.NoError(t, err)
	_, err = Migrate(ctx, url)
	require.NoError(t, err)
	read()
	require.Equal(t, functionsDigest, digest, "other bodies are replaced")
	require.True(t, at.After(first))
}

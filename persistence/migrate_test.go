package persistence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// The version guard (SPEC.md §2): a schema holding migrations the binary does
// not know is refused, and a layout migration waits for the live brokers of
// older layouts to go.

// TestEmbeddedMigrationsVersions: the binary's schema version is its newest
// migration, 0015_broker_layout is among them, and its layout generation is
// the highest marker (none of the migrations up to 0015 is marked).
func TestEmbeddedMigrationsVersions(t *testing.T) {
	t.Parallel()
	all, err := Migrations()
	require.NoError(t, err)
	require.Equal(t, all[len(all)-1].Version, SchemaVersion())
	gen := 0
	var names []string
	for _, m := range all {
		gen = max(gen, m.Layout)
		names = append(names, strconv.Itoa(m.Version)+"_"+m.Name)
		if m.Version <= brokerLayoutVersion {
			require.Zero(t, m.Layout, "%04d_%s is generation 0", m.Version, m.Name)
		}
	}
	require.Contains(t, names, "15_broker_layout")
	require.Equal(t, gen, LayoutGeneration())
}

// TestLayoutMarker: the marker counts in the header comment only, names a
// whole number above 0, and generations increase with the version after
// 0015.
func TestLayoutMarker(t *testing.T) {
	t.Parallel()
	m, err := parseMigration("0021_split.sql", "-- Moves the frames.\n--\n-- queen:layout 3\n\nALTER TABLE queen.x RENAME TO y;\n")
	require.NoError(t, err)
	require.Equal(t, Migration{Version: 21, Name: "split", SQL: m.SQL, Layout: 3}, m)

	m, err = parseMigration("0022_plain.sql", "-- A comment.\nCREATE TABLE queen.t (x int);\n-- queen:layout 4\n")
	require.NoError(t, err)
	require.Zero(t, m.Layout, "a marker after the first statement is not a header")

	for _, bad := range []string{"-- queen:layout x\nSELECT 1", "-- queen:layout 0\nSELECT 1", "-- queen:layout -2\nSELECT 1", "-- queen:layout 1\n-- queen:layout 2\nSELECT 1"} {
		_, err := parseMigration("0023_bad.sql", bad)
		require.Error(t, err, "%q", bad)
	}
	_, err = parseMigration("x_bad.sql", "SELECT 1")
	require.Error(t, err)

	ok := []Migration{{Version: 20, Layout: 2}, {Version: 16, Layout: 1}, {Version: 18}}
	sorted, err := checkMigrations(ok)
	require.NoError(t, err)
	require.Equal(t, []int{16, 18, 20}, []int{sorted[0].Version, sorted[1].Version, sorted[2].Version})
	for name, ms := range map[string][]Migration{
		"not increasing":      {{Version: 16, Layout: 2}, {Version: 17, Layout: 2}},
		"decreasing":          {{Version: 16, Layout: 2}, {Version: 17, Layout: 1}},
		"before 0015":         {{Version: 14, Layout: 1}},
		"0015 itself":         {{Version: brokerLayoutVersion, Layout: 1}},
		"duplicate versions":  {{Version: 16}, {Version: 16}},
		"duplicate, one mark": {{Version: 17, Layout: 1}, {Version: 17}},
	} {
		_, err := checkMigrations(ms)
		require.Error(t, err, name)
	}
}

// appliedVersions reads queen.schema_migrations.
func appliedVersions(t *testing.T, url string) []int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT version FROM queen.schema_migrations ORDER BY version`)
	require.NoError(t, err)
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	out := make([]int, len(vs))
	for i, v := range vs {
		out[i] = int(v)
	}
	return out
}

func tableExists(t *testing.T, url, name string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var ok bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok))
	return ok
}

func versionsUpTo(last int) []int {
	var out []int
	for _, m := range embedded {
		if m.Version <= last {
			out = append(out, m.Version)
		}
	}
	return out
}

// TestMigrateRefusesUnknownVersions: a database holding a version this
// binary does not embed (an upgrade's, here 9999) is refused with
// *SchemaTooNewError naming both versions, before anything is applied: a
// database at 0012 stays at 0012.
func TestMigrateRefusesUnknownVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := databaseAt(t, 12)
	_, err := conn.Exec(ctx, `INSERT INTO queen.schema_migrations (version, name) VALUES (9999, 'from_the_future')`)
	require.NoError(t, err)

	applied, err := Migrate(ctx, url)
	require.Empty(t, applied)
	var tooNew *SchemaTooNewError
	require.True(t, errors.As(err, &tooNew), "%v", err)
	t.Log(err)
	require.Equal(t, &SchemaTooNewError{Database: 9999, Binary: SchemaVersion(), Unknown: []int{9999}}, tooNew)
	require.ErrorContains(t, err, "version 9999")
	require.ErrorContains(t, err, "schema version "+strconv.Itoa(SchemaVersion()))
	require.ErrorContains(t, err, "run a newer release")
	require.Equal(t, append(versionsUpTo(12), 9999), appliedVersions(t, url), "nothing applied")
	require.False(t, tableExists(t, url, "queen.consumer_leases"), "0014 not applied")

	// Once the unknown version is gone (a restored backup), it migrates.
	_, err = conn.Exec(ctx, `DELETE FROM queen.schema_migrations WHERE version = 9999`)
	require.NoError(t, err)
	applied, err = Migrate(ctx, url)
	require.NoError(t, err)
	require.Equal(t, versionsUpTo(math.MaxInt)[len(versionsUpTo(12)):], applied)
}

// synthetic returns the embedded migrations followed by migration 9001, a
// layout migration of generation gen that creates queen.layout_probe.
func synthetic(t *testing.T, gen int) []Migration {
	t.Helper()
	m, err := parseMigration("9001_synthetic_layout.sql",
		"-- A test's layout migration.\n"+LayoutMarker+strconv.Itoa(gen)+"\nCREATE TABLE queen.layout_probe (x int);\n")
	require.NoError(t, err)
	require.Equal(t, gen, m.Layout)
	all, err := checkMigrations(append(append([]Migration(nil), embedded...), m))
	require.NoError(t, err)
	return all
}

// TestLayoutMigrationWaitsForOlderBrokers: a layout migration of generation
// G is refused, with *LayoutBlockedError naming the live brokers of a lower
// generation, and applied once they expired or left; a live broker of
// generation G does not hold it back. An older binary then refuses the
// schema.
func TestLayoutMigrationWaitsForOlderBrokers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gen := LayoutGeneration() + 1
	for _, gone := range []string{"expired", "released"} {
		t.Run(gone, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDatabase(t)
			s, err := Open(ctx, Config{URL: url})
			require.NoError(t, err)
			t.Cleanup(s.Close)
			// Two live brokers: one a generation behind, one of the new.
			old, current := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
			for _, b := range []struct {
				id      uuid.UUID
				url     string
				release string
				layout  int
			}{{old, "http://old:6632", "", gen - 1}, {current, "http://new:6632", "9.9.9", gen}} {
				_, err := s.pool.Exec(ctx, `INSERT INTO queen.brokers (id, http_url, release, layout, expires_at) VALUES ($1, $2, $3, $4, clock_timestamp() + interval '1 minute')`,
					b.id, b.url, b.release, b.layout)
				require.NoError(t, err)
			}
			all := synthetic(t, gen)

			applied, err := migrate(ctx, MigrateConfig{URL: url}, all, math.MaxInt)
			require.Empty(t, applied)
			var blocked *LayoutBlockedError
			require.True(t, errors.As(err, &blocked), "%v", err)
			t.Log(err)
			require.Equal(t, 9001, blocked.Version)
			require.Equal(t, gen, blocked.Layout)
			require.Len(t, blocked.Brokers, 1, "only the older broker holds it back")
			require.Equal(t, old, blocked.Brokers[0].ID)
			require.Equal(t, "http://old:6632", blocked.Brokers[0].HTTPURL)
			require.Equal(t, gen-1, blocked.Brokers[0].Layout)
			for _, want := range []string{old.String(), "http://old:6632", "layout " + strconv.Itoa(gen-1), "release before 0.2.0", "generation " + strconv.Itoa(gen), "stop or upgrade them first"} {
				require.ErrorContains(t, err, want)
			}
			require.NotContains(t, appliedVersions(t, url), 9001)
			require.False(t, tableExists(t, url, "queen.layout_probe"), "the layout migration did not run")

			if gone == "expired" {
				expire(t, s, old)
			} else {
				_, err := s.ReleaseShards(ctx, old) // a clean stop
				require.NoError(t, err)
			}
			applied, err = migrate(ctx, MigrateConfig{URL: url}, all, math.MaxInt)
			require.NoError(t, err)
			require.Equal(t, []int{9001}, applied)
			require.True(t, tableExists(t, url, "queen.layout_probe"))

			// This binary, which lacks 9001, now refuses the schema.
			_, err = Migrate(ctx, url)
			var tooNew *SchemaTooNewError
			require.True(t, errors.As(err, &tooNew), "%v", err)
			require.Equal(t, 9001, tooNew.Database)
			require.Equal(t, SchemaVersion(), tooNew.Binary)
		})
	}
}

// lockedBuffer is a log destination safe for the migrating goroutine and the
// test reading it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestMigrateLogsWhileWaitingForTheLock: a migration waiting for the lock
// another session holds logs that it waits, naming the holder, and goes on
// once the lock is released.
func TestMigrateLogsWhileWaitingForTheLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	cc, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	cc.RuntimeParams["application_name"] = "guard-test-holder"
	holder, err := pgx.ConnectConfig(ctx, cc)
	require.NoError(t, err)
	defer holder.Close(ctx)
	_, err = holder.Exec(ctx, sqlMigrateLock)
	require.NoError(t, err)

	var logs lockedBuffer
	type result struct {
		applied []int
		err     error
	}
	done := make(chan result, 1)
	go func() {
		applied, err := MigrateWith(ctx, MigrateConfig{URL: url, Logger: slog.New(slog.NewTextHandler(&logs, nil)), LockWaitLog: 10 * time.Millisecond})
		done <- result{applied, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !bytes.Contains([]byte(logs.String()), []byte("waiting for the migration lock")) {
		require.True(t, time.Now().Before(deadline), "no wait logged: %s", logs.String())
		select {
		case r := <-done:
			t.Fatalf("migrated while the lock was held: %v %v", r.applied, r.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	require.Contains(t, logs.String(), "holder_application=guard-test-holder")
	_, err = holder.Exec(ctx, sqlMigrateUnlock)
	require.NoError(t, err)
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.Empty(t, r.applied)
	case <-time.After(30 * time.Second):
		t.Fatal("the migration did not go on once the lock was released")
	}
	require.Contains(t, logs.String(), "migration lock taken")
	t.Log(logs.String())
}

// TestUpgradeFromPreviousRelease (issues 38, 42): the previous release
// (0.2.0, schema 16, storage layout 0) stored messages — a segment, its
// log_txns row and its per-hash rows, as its push statement wrote them; x1
// in a closed range compacted to level 1 by its own compaction, x2 and x3
// in the open range's level 0 — and this release migrates its database in
// place (migration 0017, layout 1: the hashes move into the segments, the
// level-1 blocks are rebuilt self-contained, log_txns goes). Every verdict
// holds across the upgrade: the stored ids, repeated in their window, are
// duplicates naming the original message, new ids are queued at the next
// offsets, and the same ids in another partition are independent.
func TestUpgradeFromPreviousRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := databaseAt(t, 16)
	const pa, pb = "01a22cb6-e34c-7283-bd05-8abc3fa7ac10", "01a22cb6-e34c-7283-bd05-8abc3fa7ac11"
	ids := [3]uuid.UUID{uuid.MustParse("01a22cb6-0000-7000-8000-000000000001"), uuid.MustParse("01a22cb6-0000-7000-8000-000000000002"), uuid.MustParse("01a22cb6-0000-7000-8000-000000000003")}
	for _, q := range []string{
		`INSERT INTO queen.queues (name) VALUES ('up')`,
		`INSERT INTO queen.partitions (id, queue_id, name, last_offset) SELECT '` + pa + `', id, 'a', 2 FROM queen.queues`,
		`INSERT INTO queen.partitions (id, queue_id, name) SELECT '` + pb + `', id, 'b' FROM queen.queues`,
		// The range of three minutes ago (closed) and the open one.
		`SELECT queen.sidecar_create_range(date_trunc('minute', clock_timestamp()) - interval '3 minutes', date_trunc('minute', clock_timestamp()) - interval '2 minutes')`,
		`SELECT queen.sidecar_create_range(date_trunc('minute', clock_timestamp()), date_trunc('minute', clock_timestamp()) + interval '1 minute')`,
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	// 0.2.0's bundle_insert, one segment per call (x1 stamped in the closed
	// range, x2 and x3 now).
	write := func(first int64, at string, txns ...string) {
		var msgIDs, hashes, frames []byte
		rowHashes := make([]uuid.UUID, len(txns))
		for i, txn := range txns {
			msgIDs = append(msgIDs, ids[int(first)+i][:]...)
			h := queen.HashTxn(txn)
			hashes = append(hashes, h[:]...)
			rowHashes[i] = uuid.UUID(h)
			frames = AppendFrame(frames, txn, nil, []byte(`{}`))
		}
		_, err := conn.Exec(ctx, `
WITH t AS (SELECT `+at+` AS now),
s AS (INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, message_ids, frames)
      SELECT $1, $2, $3, t.now, $4, $5 FROM t),
l AS (INSERT INTO queen.log_txns (partition_id, first_offset, last_offset, created_at, hashes)
      SELECT $1, $2, $3, t.now, $6 FROM t)
INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
SELECT $1, h.hash, $2 + h.i - 1, $2, t.now FROM t, unnest($7::uuid[]) WITH ORDINALITY AS h (hash, i)`,
			pa, first, first+int64(len(txns))-1, msgIDs, frames, hashes, rowHashes)
		require.NoError(t, err)
	}
	write(0, `date_trunc('minute', clock_timestamp()) - interval '150 seconds'`, "x1")
	write(1, `clock_timestamp()`, "x2", "x3")
	var compacted int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT queen.sidecar_compact(lo, hi) FROM queen.sidecar_ranges WHERE hi <= clock_timestamp()`).Scan(&compacted))
	require.Equal(t, int64(1), compacted, "x1 in level 1, by 0.2.0's compaction")

	applied, err := Migrate(ctx, url)
	require.NoError(t, err)
	require.Equal(t, versionsUpTo(math.MaxInt)[len(versionsUpTo(16)):], applied)
	require.False(t, tableExists(t, url, "log_txns"), "an older broker's push fails: it writes log_txns")

	after, err := Open(ctx, Config{URL: url})
	require.NoError(t, err)
	defer after.Close()
	a, b := uuid.MustParse(pa), uuid.MustParse(pb)
	out := commit(t, after, a, items("up", "a", "x2", "n1", "x1"))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Queued, queen.Duplicate}, verdicts(out))
	require.Equal(t, ids[1], uuid.UUID(out.Results[0].MessageID), "the duplicate names the original (level 0)")
	require.Equal(t, ids[0], uuid.UUID(out.Results[2].MessageID), "from the rebuilt level 1")
	require.Equal(t, int64(3), out.FirstOffset, "the new id takes the next offset")
	other := commit(t, after, b, items("up", "b", "x1"))
	require.Equal(t, []queen.Verdict{queen.Queued}, verdicts(other), "another partition is independent")
	// The hashes moved into the segments: an ack by offset checks them.
	require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, after, ackTxn(a, g, "x3", queen.AckCompleted, nil)))
}

// TestMigrationPacksLevel1Entries (migration 0024): a level-1 table of
// 0.5.1's shape (four parallel arrays) is rewritten with packed entries: each
// hash keeps its position, its entry reads back the partition's number, the
// segment's first offset, the index and created_at to the microsecond, the
// entries of a partition deleted before the upgrade are left out (a row
// holding only those goes), and the table keeps its name, key and place in
// queen.hash_blocks.
func TestMigrationPacksLevel1Entries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := databaseAt(t, 23)
	const pa, pb, gone = "01a22cb6-e34c-7283-bd05-8abc3fa7ac21", "01a22cb6-e34c-7283-bd05-8abc3fa7ac22", "01a22cb6-e34c-7283-bd05-8abc3fa7ac23"
	h := func(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }
	const lo, stamp = "2026-12-06 03:00:00+00", "2026-12-06 03:00:07.123457+00"
	for _, q := range []string{
		`INSERT INTO queen.queues (name) VALUES ('up')`,
		`INSERT INTO queen.partitions (id, queue_id, name) SELECT '` + pa + `', id, 'a' FROM queen.queues`,
		`INSERT INTO queen.partitions (id, queue_id, name) SELECT '` + pb + `', id, 'b' FROM queen.queues`,
		`INSERT INTO queen.sidecar_ranges (lo, hi, bits, compacted_at, wide) VALUES ('` + lo + `', '` + lo + `'::timestamptz + interval '1 minute', 1, now(), '` + lo + `')`,
		`INSERT INTO queen.sidecar_tables (wide, lo, hi, bits, ranges) VALUES ('` + lo + `', '` + lo + `', '` + lo + `'::timestamptz + interval '1 minute', 1, 1)`,
		`CREATE TABLE queen.hash_blocks_20261206_030000 (LIKE queen.hash_blocks)`,
		// Bucket 0: a's, the deleted partition's and b's; bucket 1: the
		// deleted partition's alone.
		`INSERT INTO queen.hash_blocks_20261206_030000 (lo, bucket, hashes, firsts, idxs, parts, stamps, wide) VALUES
		   ('` + lo + `', 0, ARRAY['` + h(1) + `', '` + h(2) + `', '` + h(3) + `']::uuid[], ARRAY[40, 7, 9000000000], ARRAY[2, 0, 70000],
		    ARRAY['` + pa + `', '` + gone + `', '` + pb + `']::uuid[], ARRAY['` + stamp + `', '` + stamp + `', '` + lo + `']::timestamptz[], '` + lo + `'),
		   ('` + lo + `', 1, ARRAY['` + h(4) + `']::uuid[], ARRAY[1], ARRAY[0], ARRAY['` + gone + `']::uuid[], ARRAY['` + stamp + `']::timestamptz[], '` + lo + `')`,
		`ALTER TABLE queen.hash_blocks_20261206_030000 ADD PRIMARY KEY (wide, bucket, lo)`,
		`ALTER TABLE queen.hash_blocks ATTACH PARTITION queen.hash_blocks_20261206_030000 FOR VALUES IN ('` + lo + `')`,
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}

	applied, err := Migrate(ctx, url)
	require.NoError(t, err)
	require.Equal(t, versionsUpTo(math.MaxInt)[len(versionsUpTo(23)):], applied)

	type entry struct {
		Bucket, First int64
		Hash, Part    string
		Idx           int32
		Stamp         string
	}
	rows, err := conn.Query(ctx, `
SELECT k.bucket, k.hashes[i]::text, n.id::text, e.first, e.idx, to_char(e.stamp AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')
  FROM queen.hash_blocks k
 CROSS JOIN LATERAL generate_subscripts(k.hashes, 1) AS i
 CROSS JOIN LATERAL queen.hash_entry(k.entries, i) e
  JOIN queen.partitions n ON n.num = e.num
 ORDER BY k.bucket, i`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (entry, error) {
		var e entry
		return e, r.Scan(&e.Bucket, &e.Hash, &e.Part, &e.First, &e.Idx, &e.Stamp)
	})
	require.NoError(t, err)
	require.Equal(t, []entry{
		{Bucket: 0, Hash: h(1), Part: pa, First: 40, Idx: 2, Stamp: "2026-12-06 03:00:07.123457"},
		{Bucket: 0, Hash: h(3), Part: pb, First: 9000000000, Idx: 70000, Stamp: "2026-12-06 03:00:00.000000"},
	}, got, "every entry of a live partition, in order, exact; none of the deleted one's")
	var blocks, attached int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM queen.hash_blocks`).Scan(&blocks))
	require.Equal(t, 1, blocks, "a row holding only a deleted partition's entries goes")
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'queen.hash_blocks'::regclass AND inhrelid = 'queen.hash_blocks_20261206_030000'::regclass`).Scan(&attached))
	require.Equal(t, 1, attached, "the table keeps its name and its place")
	require.False(t, tableExists(t, url, "hash_blocks_0023"), "the old parent is gone")

	// The lookup reads them: a's hash in a's partition, not in b's.
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM queen.sidecar_find($1, $2, '-infinity', '-infinity', 'infinity', true)`, pa, h(1)).Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM queen.sidecar_find($1, $2, '-infinity', '-infinity', 'infinity', true)`, pb, h(1)).Scan(&n))
	require.Equal(t, 0, n)
}

// TestMigrationNumbersSegments (issue 42, layout 4): migration 0025 rewrites
// every segment of 0.5.2's shape with its partition's number in place of its
// id, in segments_kept, in an attached range and in a range detached and
// awaiting its drop (left detached, in the new shape, so
// segment_drop_detached drops or attaches it as before), bytes for bytes;
// the rows of a range attached by hand but not listed go to segments_kept,
// untimed; the segments of a deleted partition and its allocator row go; every
// allocator row learns its partition's number; a push of the release
// before (which names partition_id) fails.
func TestMigrationNumbersSegments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := databaseAt(t, 24)
	const pa, pb, gone = "01a22cb6-e34c-7283-bd05-8abc3fa7ac31", "01a22cb6-e34c-7283-bd05-8abc3fa7ac32", "01a22cb6-e34c-7283-bd05-8abc3fa7ac33"
	const lo = "2026-12-06 03:00:00+00"
	const r1, r2, r3 = "segments_20261206_0300_1m", "segments_20261206_0301_1m", "segments_20261206_0302_1m"
	seg := func(pid string, first, last int64, at, frames string, timed bool, sub string) string {
		return fmt.Sprintf(`INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, frames, timed, hashes, producer_sub)
		   VALUES ('%s', %d, %d, '%s', '%s'::bytea, %t, decode(repeat('ab', %d), 'hex'), %s)`, pid, first, last, at, frames, timed, 16*min(last-first+1, 3), sub)
	}
	for _, q := range []string{
		`INSERT INTO queen.queues (name) VALUES ('up')`,
		`INSERT INTO queen.partitions (id, queue_id, name) SELECT '` + pa + `', id, 'a' FROM queen.queues`,
		`INSERT INTO queen.partitions (id, queue_id, name) SELECT '` + pb + `', id, 'b' FROM queen.queues`,
		`INSERT INTO queen.partition_ends (partition_id, last_offset) VALUES ('` + pa + `', 9000000001), ('` + pb + `', 3), ('` + gone + `', 0)`,
		`CREATE TABLE queen.` + r1 + ` (LIKE queen.segments INCLUDING DEFAULTS)`,
		`ALTER TABLE queen.` + r1 + ` ADD CONSTRAINT ` + r1 + `_bounds CHECK (timed AND created_at >= '` + lo + `' AND created_at < '` + lo + `'::timestamptz + interval '1 minute')`,
		`ALTER TABLE queen.segments_timed ATTACH PARTITION queen.` + r1 + ` FOR VALUES FROM ('` + lo + `') TO ('` + lo + `'::timestamptz + interval '1 minute')`,
		`CREATE TABLE queen.` + r2 + ` (LIKE queen.segments INCLUDING DEFAULTS)`,
		`INSERT INTO queen.segment_ranges (name, lo, hi) VALUES
		   ('` + r1 + `', '` + lo + `', '` + lo + `'::timestamptz + interval '1 minute'),
		   ('` + r2 + `', '` + lo + `'::timestamptz + interval '1 minute', '` + lo + `'::timestamptz + interval '2 minutes')`,
		// r3: attached, never listed.
		`CREATE TABLE queen.` + r3 + ` (LIKE queen.segments INCLUDING DEFAULTS)`,
		`ALTER TABLE queen.segments_timed ATTACH PARTITION queen.` + r3 + ` FOR VALUES FROM ('` + lo + `'::timestamptz + interval '2 minutes') TO ('` + lo + `'::timestamptz + interval '3 minutes')`,
		seg(pb, 3, 3, "2026-12-06 03:02:30+00", "b-unlisted", true, "''"),
		seg(pa, 0, 2, "2026-12-06 02:59:00.000001+00", "a-kept", false, "'alice'"),
		seg(pb, 0, 2, "2026-12-06 02:59:01+00", "b-kept", false, "''"),
		seg(gone, 0, 0, "2026-12-06 02:59:02+00", "gone", false, "''"),
		seg(pa, 3, 9000000000, "2026-12-06 03:00:07.123457+00", "a-timed", true, "NULL"),
		// The detached range holds a row of its own (inserted directly: it
		// is no partition).
		`INSERT INTO queen.` + r2 + ` (partition_id, first_offset, last_offset, created_at, frames, timed, hashes)
		   VALUES ('` + pa + `', 9000000001, 9000000001, '2026-12-06 03:01:30+00', 'a-detached', true, decode(repeat('cd', 16), 'hex'))`,
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}

	applied, err := Migrate(ctx, url)
	require.NoError(t, err)
	require.Equal(t, versionsUpTo(math.MaxInt)[len(versionsUpTo(24)):], applied)

	type segment struct {
		Table, Part, At, Frames, Sub string
		First, Last, Hashes          int64
		Timed                        bool
	}
	rows, err := conn.Query(ctx, `
SELECT s.tableoid::regclass::text, n.id::text, s.first_offset, s.last_offset,
       to_char(s.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), convert_from(s.frames, 'UTF8'), s.timed,
       length(s.hashes), COALESCE(s.producer_sub, '<null>')
  FROM queen.segments s
  JOIN queen.partitions n ON n.num = s.partition_num
 ORDER BY s.created_at`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (segment, error) {
		var s segment
		return s, r.Scan(&s.Table, &s.Part, &s.First, &s.Last, &s.At, &s.Frames, &s.Timed, &s.Hashes, &s.Sub)
	})
	require.NoError(t, err)
	require.Equal(t, []segment{
		{Table: "queen.segments_kept", Part: pa, First: 0, Last: 2, At: "2026-12-06 02:59:00.000001", Frames: "a-kept", Hashes: 48, Sub: "alice"},
		{Table: "queen.segments_kept", Part: pb, First: 0, Last: 2, At: "2026-12-06 02:59:01.000000", Frames: "b-kept", Hashes: 48, Sub: ""},
		{Table: "queen." + r1, Part: pa, First: 3, Last: 9000000000, At: "2026-12-06 03:00:07.123457", Frames: "a-timed", Timed: true, Hashes: 48, Sub: "<null>"},
		{Table: "queen.segments_kept", Part: pb, First: 3, Last: 3, At: "2026-12-06 03:02:30.000000", Frames: "b-unlisted", Hashes: 16, Sub: ""},
	}, got, "every segment of a live partition, exact, in its table; none of the deleted partition's")
	var total int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM queen.segments`).Scan(&total))
	require.Equal(t, 4, total)
	var detached segment
	require.NoError(t, conn.QueryRow(ctx, `
SELECT n.id::text, s.first_offset, s.last_offset, to_char(s.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'),
       convert_from(s.frames, 'UTF8'), s.timed, length(s.hashes), COALESCE(s.producer_sub, '<null>')
  FROM queen.`+r2+` s JOIN queen.partitions n ON n.num = s.partition_num`).Scan(
		&detached.Part, &detached.First, &detached.Last, &detached.At, &detached.Frames, &detached.Timed, &detached.Hashes, &detached.Sub))
	require.Equal(t, segment{Part: pa, First: 9000000001, Last: 9000000001, At: "2026-12-06 03:01:30.000000", Frames: "a-detached", Timed: true, Hashes: 16, Sub: ""},
		detached, "the detached range's row, rewritten")
	require.False(t, tableExists(t, url, r3), "the unlisted range went with the old tree")

	for _, r := range []string{r1, r2} {
		var attached, checks int
		var storage string
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'queen.segments_timed'::regclass AND inhrelid = $1::regclass`, "queen."+r).Scan(&attached))
		require.Equal(t, map[string]int{r1: 1, r2: 0}[r], attached, "%s: attached as it was", r)
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE conname = $1`, r+"_bounds").Scan(&checks))
		require.Equal(t, 1, checks, "%s keeps its bounds check", r)
		require.NoError(t, conn.QueryRow(ctx, `SELECT string_agg(attstorage::text, '' ORDER BY attname) FROM pg_attribute WHERE attrelid = $1::regclass AND attname IN ('frames', 'hashes', 'legacy_ids')`, "queen."+r).Scan(&storage))
		require.Equal(t, "eee", storage, "%s stores frames, hashes and legacy ids EXTERNAL", r)
	}
	for _, old := range []string{"segments_0024", "segments_kept_0024", "segments_timed_0024", r1 + "_0024", r2 + "_0024"} {
		require.False(t, tableExists(t, url, old), "%s is gone", old)
	}
	var key string
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_get_indexdef('queen.segments_offset'::regclass)`).Scan(&key))
	require.Contains(t, key, "(partition_num, first_offset)")

	type end struct {
		Part      string
		Last, Num int64
	}
	rows, err = conn.Query(ctx, `SELECT e.partition_id::text, e.last_offset, e.num - n.num FROM queen.partition_ends e JOIN queen.partitions n ON n.id = e.partition_id ORDER BY n.name`)
	require.NoError(t, err)
	ends, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (end, error) {
		var e end
		return e, r.Scan(&e.Part, &e.Last, &e.Num)
	})
	require.NoError(t, err)
	require.Equal(t, []end{{Part: pa, Last: 9000000001}, {Part: pb, Last: 3}}, ends, "each allocator row names its partition's number; the deleted partition's goes")
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM queen.partition_ends`).Scan(&total))
	require.Equal(t, 2, total)

	// The end a crash's rebuild reads, through the numbers.
	var cold int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT queen.partition_cold_end($1, -1)`, pb).Scan(&cold))
	require.Equal(t, int64(3), cold, "b's newest segment, the unlisted range's")

	// A push of the release before names partition_id: it fails.
	_, err = conn.Exec(ctx, `INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, frames) VALUES ($1, 3, 3, now(), '')`, pb)
	require.ErrorContains(t, err, "partition_id")
}

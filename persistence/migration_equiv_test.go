package persistence

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// databaseAt makes an empty database on the test server migrated up to
// migration last, and returns its URL and a connection to it (both dropped
// after the test).
func databaseAt(t *testing.T, last int) (string, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.ServerURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	name := fmt.Sprintf("queen_m%d_%d", last, time.Now().UnixNano())
	_, err = admin.Exec(ctx, `CREATE DATABASE `+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`)
	})
	cfg, err := pgx.ParseConfig(pgtest.ServerURL())
	require.NoError(t, err)
	url := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
	_, err = migrateTo(ctx, url, last)
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return url, conn
}

// TestMigrationEquivalence (SPEC.md §3, issue 27): a seeded model-based run
// across the upgrade to the two-level sidecar (migration 0011). Before it,
// segments are written as 0010's bundle_insert wrote them (logged per-hash
// rows in minute ranges: three closed ones and the current one); then the
// database is migrated and a seeded sequence of pushes (repeats of the old
// ids, new ids, repeats of those, in-request repeats) runs through the store,
// first while every range is level 0, then after the closed ranges are
// compacted to level 1. Every verdict and offset must equal the model's: a
// transactionId already in its partition is a duplicate naming the first
// offset, any other is queued at the partition's next offset. Seeds:
// QUEEN_MIGRATION_SEEDS (default 3) from QUEEN_MIGRATION_SEED.
func TestMigrationEquivalence(t *testing.T) {
	seeds := 3
	if v := os.Getenv("QUEEN_MIGRATION_SEEDS"); v != "" {
		seeds, _ = strconv.Atoi(v)
	}
	base := int64(20261203)
	if v := os.Getenv("QUEEN_MIGRATION_SEED"); v != "" {
		base, _ = strconv.ParseInt(v, 10, 64)
	}
	for s := 0; s < seeds; s++ {
		seed := base + int64(s)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			migrationRun(t, seed)
		})
	}
}

func migrationRun(t *testing.T, seed int64) {
	ctx := context.Background()
	r := rand.New(rand.NewSource(seed))
	url, conn := databaseAt(t, 10)

	// The model: per partition, the first offset of each transactionId and
	// the next offset.
	type part struct {
		id    uuid.UUID
		name  string
		first map[string]int64
		next  int64
	}
	parts := make([]*part, 3)
	_, err := conn.Exec(ctx, `INSERT INTO queen.queues (name) VALUES ('m')`)
	require.NoError(t, err)
	for i := range parts {
		parts[i] = &part{id: uuid.New(), name: fmt.Sprintf("p%d", i), first: map[string]int64{}}
		_, err := conn.Exec(ctx, `INSERT INTO queen.partitions (id, queue_id, name) SELECT $1, id, $2 FROM queen.queues`, parts[i].id, parts[i].name)
		require.NoError(t, err)
	}
	txn := func() string { return "t" + strconv.Itoa(r.Intn(60)) }

	// Before the upgrade: 0010's layout, in the current minute's range and
	// the three before it (logged ranges, per-hash rows).
	var now time.Time
	require.NoError(t, conn.QueryRow(ctx, `SELECT date_trunc('minute', clock_timestamp())`).Scan(&now))
	for m := 3; m >= 0; m-- {
		lo := now.Add(-time.Duration(m) * time.Minute)
		_, err := conn.Exec(ctx, `SELECT queen.sidecar_create_range($1, $2)`, lo, lo.Add(time.Minute))
		require.NoError(t, err)
		for k := 0; k < 8; k++ {
			p := parts[r.Intn(len(parts))]
			var txns []string
			seen := map[string]bool{}
			for n := 1 + r.Intn(5); len(txns) < n; {
				x := txn()
				if _, old := p.first[x]; old || seen[x] {
					n-- // the old writer stored no duplicate
					continue
				}
				seen[x] = true
				txns = append(txns, x)
			}
			if len(txns) == 0 {
				continue
			}
			var hashes, ids, frames []byte
			for i, x := range txns {
				h := queen.HashTxn(x)
				hashes = append(hashes, h[:]...)
				id := uuid.New()
				ids = append(ids, id[:]...)
				frames = AppendFrame(frames, x, nil, []byte(`{}`))
				p.first[x] = p.next + int64(i)
			}
			// Past ranges get a stamp inside them; the current one now.
			at := lo.Add(time.Duration(k+1) * time.Second)
			_, err := conn.Exec(ctx, `
WITH t AS (SELECT CASE WHEN $7 THEN clock_timestamp() ELSE $6::timestamptz END AS now),
s AS (INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, message_ids, frames)
      SELECT $1, $2, $3, t.now, $4, $5 FROM t),
l AS (INSERT INTO queen.log_txns (partition_id, first_offset, last_offset, created_at, hashes)
      SELECT $1, $2, $3, t.now, $8 FROM t),
u AS (UPDATE queen.partitions SET last_offset = $3 WHERE id = $1)
INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
SELECT $1, encode(substring($8::bytea FROM g.i * 16 + 1 FOR 16), 'hex')::uuid, $2 + g.i, $2, t.now
  FROM t, generate_series(0, length($8::bytea) / 16 - 1) AS g (i)`,
				p.id, p.next, p.next+int64(len(txns))-1, ids, frames, at, m == 0, hashes)
			require.NoError(t, err)
			p.next += int64(len(txns))
		}
	}

	applied, err := Migrate(ctx, url)
	require.NoError(t, err)
	require.Contains(t, applied, 11)
	s, err := Open(ctx, Config{URL: url, SidecarRange: time.Minute})
	require.NoError(t, err)
	defer s.Close()

	pushes := func(phase string, n int) {
		for k := 0; k < n; k++ {
			p := parts[r.Intn(len(parts))]
			var txns []string
			for i := 1 + r.Intn(5); i > 0; i-- {
				if len(txns) > 0 && r.Intn(4) == 0 {
					txns = append(txns, txns[r.Intn(len(txns))]) // an in-request repeat
				} else {
					txns = append(txns, txn())
				}
			}
			out := commit(t, s, p.id, items("m", p.name, txns...))
			for i, x := range txns {
				want, dup := p.first[x]
				if !dup {
					want = p.next
					p.first[x] = want
					p.next++
				}
				got := out.Results[i]
				require.Equal(t, map[bool]queen.Verdict{true: queen.Duplicate, false: queen.Queued}[dup], got.Verdict,
					"seed %d, %s, push %d item %d (%s in %s)", seed, phase, k, i, x, p.name)
				require.Equal(t, want, got.Offset, "seed %d, %s, push %d item %d (%s in %s)", seed, phase, k, i, x, p.name)
			}
		}
	}
	pushes("level 0 after the upgrade", 40)
	// The three closed ranges (and any other closed since) to level 1.
	r0, err := compactSidecarRanges(ctx, s.pool, 0)
	require.NoError(t, err)
	require.GreaterOrEqual(t, r0.Compacted, 3, "the old closed ranges compacted")
	pushes("level 1 after the upgrade", 40)
}

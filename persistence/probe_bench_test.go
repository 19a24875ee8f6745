package persistence

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	queen "github.com/queen-mq/queen-go"
)

// fillWindow puts n in-window hashes into the partition's segments, 100 per
// segment as a push of 100 items would, with the GIN index rebuilt afterwards
// (a bulk build is much faster than n index inserts).
func fillWindow(b *testing.B, s *Store, pid uuid.UUID, n int) {
	b.Helper()
	ctx := context.Background()
	rows := n / 100
	stmts := []string{
		`DROP INDEX queen.log_txn_hashes_lookup`,
		fmt.Sprintf(`INSERT INTO queen.segments (partition_num, first_offset, last_offset, created_at, legacy_ids, frames, hashes)
		 SELECT (SELECT num FROM queen.partitions WHERE id = $1), g*100, g*100+99, clock_timestamp(), ''::bytea, ''::bytea,
		        (SELECT string_agg(decode(md5(g::text || '/' || i::text), 'hex'), ''::bytea ORDER BY i) FROM generate_series(0, 99) i)
		   FROM generate_series(0, %d) g`, rows-1),
		`INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
		 SELECT p.id, encode(substring(l.hashes FROM i*16+1 FOR 16), 'hex')::uuid, l.first_offset + i, l.first_offset, l.created_at
		   FROM queen.segments l JOIN queen.partitions p ON p.num = l.partition_num CROSS JOIN generate_series(0, 99) i WHERE p.id = $1`,
		fmt.Sprintf(`UPDATE queen.partition_ends SET last_offset = %d WHERE partition_id = $1`, rows*100-1),
		`CREATE INDEX log_txn_hashes_lookup ON queen.log_txn_hashes (hash)`,
		`VACUUM ANALYZE queen.segments`,
		`VACUUM ANALYZE queen.log_txn_hashes`,
	}
	for _, q := range stmts {
		var err error
		if len(q) > 0 && (q[0] == 'I' || q[0] == 'U') {
			_, err = s.pool.Exec(ctx, q, pid)
		} else {
			_, err = s.pool.Exec(ctx, q)
		}
		if err != nil {
			b.Fatalf("%s: %v", q[:30], err)
		}
	}
}

// fillCompacted puts n in-window hashes into the partition's segments as
// fillWindow does, but stamped over the r closed one-minute ranges that end
// a minute ago, and compacts those ranges into level 1 (migration 0011) from
// the segments' hashes: a cold lookup then reads one level-1 row per range,
// found by one descent per level-1 table (migration 0023: up to 15
// contiguous ranges a table under the default one-hour window).
func fillCompacted(b *testing.B, s *Store, pid uuid.UUID, n, r int) {
	b.Helper()
	ctx := context.Background()
	rows := n / 100
	stmts := []string{
		fmt.Sprintf(`SELECT queen.sidecar_create_range(to_timestamp((m - k) * 60), to_timestamp((m - k + 1) * 60))
		   FROM (SELECT floor(extract(epoch FROM clock_timestamp()) / 60)::bigint - 2 AS m) x, generate_series(0, %d) k`, r-1),
		`DELETE FROM queen.sidecar_alive WHERE lo < to_timestamp((floor(extract(epoch FROM clock_timestamp()) / 60)::bigint - 1) * 60)`,
		fmt.Sprintf(`INSERT INTO queen.segments (partition_num, first_offset, last_offset, created_at, legacy_ids, frames, hashes)
		 SELECT (SELECT num FROM queen.partitions WHERE id = $1), g*100, g*100+99,
		        to_timestamp((floor(extract(epoch FROM clock_timestamp()) / 60)::bigint - 2 - g %% %d) * 60 + 30), ''::bytea, ''::bytea,
		        (SELECT string_agg(decode(md5(g::text || '/' || i::text), 'hex'), ''::bytea ORDER BY i) FROM generate_series(0, 99) i)
		   FROM generate_series(0, %d) g`, r, rows-1),
		fmt.Sprintf(`UPDATE queen.partition_ends SET last_offset = %d WHERE partition_id = $1`, rows*100-1),
		`SELECT queen.sidecar_compact(r.lo, r.hi) FROM queen.sidecar_ranges r
		  WHERE r.hi <= to_timestamp((floor(extract(epoch FROM clock_timestamp()) / 60)::bigint - 1) * 60) AND r.bits IS NULL ORDER BY r.lo`,
		// The closed level-1 tables' merged indexes (migration 0027), as
		// the upkeep writes them.
		`SELECT m.* FROM queen.sidecar_tables t CROSS JOIN LATERAL queen.sidecar_merge(t.wide, (1::bigint << 40)) m`,
		`VACUUM ANALYZE queen.segments`,
	}
	for _, q := range stmts {
		var err error
		if len(q) > 0 && (q[0] == 'I' || q[0] == 'U') {
			_, err = s.pool.Exec(ctx, q, pid)
		} else {
			_, err = s.pool.Exec(ctx, q)
		}
		if err != nil {
			b.Fatalf("%s: %v", q[:30], err)
		}
	}
}

// benchProbe runs the window probe (bundle_probe) with args as a push does:
// in a transaction, after probe_plan_begin (no sequential scan of a level-0
// range or a level-1 table, whatever their statistics say). Returns the rows.
func benchProbe(ctx context.Context, s *Store, args ...any) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlProbePlanBegin); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, sqlBundleProbe, args...)
		if err != nil {
			return err
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int, error) { return 1, nil })
		n = len(got)
		return err
	})
	return n, err
}

// BenchmarkColdProbe measures the window probe of one push of 100 new ids
// with watermark -1 (a cold cache), with 1,000 and 1,000,000 hashes of the
// partition in the window. The bar: the 1M figure within 2x of the 1k
// one. "level=0" keeps them in the open range's per-hash index, "level=1"
// in ten or sixty compacted one-minute ranges (an hour's window). "probe" is the probe statement alone
// (as a push runs it: benchProbe); "push" is a whole push
// transaction (lock, probe, segment insert, durable commit). The
// "-narrowed" variants send a warm cache's watermark (SPEC.md §8).
func BenchmarkColdProbe(b *testing.B) {
	type shape struct{ level, ranges int }
	for _, sh := range []shape{{0, 0}, {1, 10}, {1, 60}} {
		for _, n := range []int{1_000, 1_000_000} {
			name := fmt.Sprintf("level=%d/hashes=%d", sh.level, n)
			if sh.level == 1 {
				name = fmt.Sprintf("level=1/ranges=%d/hashes=%d", sh.ranges, n)
			}
			b.Run(name, func(b *testing.B) {
				s := setup(b)
				ctx := context.Background()
				pid, err := s.EnsurePartition(ctx, "bench", "p")
				if err != nil {
					b.Fatal(err)
				}
				if sh.level == 0 {
					fillWindow(b, s, pid, n)
				} else {
					fillCompacted(b, s, pid, n, sh.ranges)
				}
				seq := 0
				fresh := func() []*queen.Item {
					its := make([]*queen.Item, 100)
					for i := range its {
						seq++
						t := fmt.Sprintf("new-%d", seq)
						its[i] = &queen.Item{Queue: "bench", Partition: "p", TransactionID: t, Payload: []byte(`{}`), Hash: queen.HashTxn(t)}
					}
					return its
				}
				b.Run("probe", func(b *testing.B) {
					for b.Loop() {
						its := fresh()
						hs := distinctLeaders(&queen.PushBatch{Items: its})
						got, err := benchProbe(ctx, s, [][16]byte{pid}, hs, []int64{-1}, []int32{1}, []int32{int32(len(hs))}, make([]bool, len(hs)), []int64{0}, unbounded(len(hs), pgSince(queen.Span{})), unbounded(len(hs), pgUntil(queen.Span{})), []string{"bench"}, []string{"bench"})
						if err != nil || got != 1 { // the partition's window row, no hit
							b.Fatalf("probe: %v, %d rows", err, got)
						}
					}
				})
				// With a warm cache's watermark (the partition's last offset):
				// the probe reads the sidecar rows after it, which are none.
				last := int64(n/100*100 - 1)
				b.Run("probe-narrowed", func(b *testing.B) {
					for b.Loop() {
						its := fresh()
						hs := distinctLeaders(&queen.PushBatch{Items: its})
						got, err := benchProbe(ctx, s, [][16]byte{pid}, hs, []int64{last}, []int32{1}, []int32{int32(len(hs))}, make([]bool, len(hs)), []int64{3600}, unbounded(len(hs), pgSince(queen.Span{})), unbounded(len(hs), pgUntil(queen.Span{})), []string{"bench"}, []string{"bench"})
						if err != nil || got != 1 {
							b.Fatalf("probe: %v, %d rows", err, got)
						}
					}
				})
				b.Run("push", func(b *testing.B) {
					for b.Loop() {
						out, err := s.Commit(ctx, &queen.PushBatch{PartitionID: pid, Items: fresh(), Watermark: -1})
						if err != nil || out.Results[0].Verdict != queen.Queued {
							b.Fatalf("commit: %v", err)
						}
						last = out.LastOffset
					}
				})
				b.Run("push-narrowed", func(b *testing.B) {
					for b.Loop() {
						out, err := s.Commit(ctx, &queen.PushBatch{PartitionID: pid, Items: fresh(), Watermark: last, AssumedWindow: 3600})
						if err != nil || out.Results[0].Verdict != queen.Queued {
							b.Fatalf("commit: %v", err)
						}
						last = out.LastOffset
					}
				})
			})
		}
	}
}

// unbounded returns n copies of end, the probe's span bounds for hashes
// looked up in the whole window.
func unbounded(n int, end pgtype.Timestamptz) []pgtype.Timestamptz {
	out := make([]pgtype.Timestamptz, n)
	for i := range out {
		out[i] = end
	}
	return out
}

package persistence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	queen "github.com/queen-mq/queen-go"
)

// BenchmarkReadPartition measures the read amplification of one partition
// (SPEC.md §2: reading one partition stays bounded, a number of pages per
// message that does not grow with the partition count): the pages a peek of
// a partition's 100 oldest messages touches (shared buffers hit or read, as
// EXPLAIN (ANALYZE, BUFFERS) counts them, with the TOAST pages of the frames
// and message ids read) and its executor time, per message read. Two
// shapes of the same 100 messages per partition, 200-byte random payloads:
//
//   - dense: 64 partitions, each commit 64 partitions x 100 messages (one
//     segment holds a partition's 100);
//   - spread: 2,000 partitions, each commit 200 partitions x 1 message, so a
//     partition's 100 messages lie in 100 commits among 19,900 others'.
//
// Each op peeks a different partition. The pages are the layout's cost, not
// the cache's: they count the same warm or cold.
//
//	go test -run '^$' -bench ReadPartition -benchtime 200x ./persistence/
func BenchmarkReadPartition(b *testing.B) {
	b.Run("dense", func(b *testing.B) { benchReadPartition(b, 64, 64, 100) })
	b.Run("spread", func(b *testing.B) { benchReadPartition(b, 2000, 200, 1) })
}

// benchReadPartition fills parts partitions with 100 messages each, per
// commits of width partitions x per messages, then peeks them.
func benchReadPartition(b *testing.B, parts, width, per int) {
	s := setup(b)
	ctx := context.Background()
	pids := make([]uuid.UUID, parts)
	for i := range pids {
		var err error
		if pids[i], err = s.EnsurePartition(ctx, "read", fmt.Sprintf("p%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	payload := func() json.RawMessage {
		r := make([]byte, 99)
		_, _ = rand.Read(r)
		return json.RawMessage(`"` + hex.EncodeToString(r)[:198] + `"`)
	}
	const total = 100
	for round := 0; round < total/per; round++ {
		for lo := 0; lo < parts; lo += width {
			var bs []*queen.PushBatch
			for i := lo; i < lo+width && i < parts; i++ {
				its := make([]*queen.Item, per)
				for j := range its {
					t := fmt.Sprintf("r%d-%d-%d", round, i, j)
					its[j] = &queen.Item{Queue: "read", Partition: fmt.Sprintf("p%d", i), TransactionID: t, Payload: payload(), Hash: queen.HashTxn(t)}
				}
				bs = append(bs, &queen.PushBatch{PartitionID: pids[i], Items: its, LeaderOf: leadersOf(its), Watermark: -1})
			}
			commitAll(b, s, bs)
		}
	}
	if _, err := s.pool.Exec(ctx, "ANALYZE"); err != nil {
		b.Fatal(err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	// The peek's rows are hashed where they are read, so the pages of their
	// out-of-line (TOAST) values are counted too.
	wrapped := "PREPARE peek(text, text, bigint, int) AS WITH r AS (" + sqlPeekMessages +
		") SELECT count(md5(r.frames)) + count(md5(r.legacy_ids)) FROM r"
	if _, err := conn.Exec(ctx, wrapped); err != nil {
		b.Fatal(err)
	}
	defer conn.Exec(ctx, "DEALLOCATE peek") //nolint:errcheck // the connection goes back to a pool closed with the store
	bufRe := regexp.MustCompile(`Buffers: shared hit=(\d+)(?: read=(\d+))?`)
	timeRe := regexp.MustCompile(`Execution Time: ([0-9.]+) ms`)
	var pages, msgs int
	var exec time.Duration
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		rows, err := conn.Query(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE peek('read', 'p%d', -1, %d)`, n%parts, total))
		if err != nil {
			b.Fatal(err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			b.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		m := bufRe.FindStringSubmatch(text)
		t := timeRe.FindStringSubmatch(text)
		if m == nil || t == nil {
			b.Fatalf("no buffers or time in the plan:\n%s", text)
		}
		hit, _ := strconv.Atoi(m[1])
		read, _ := strconv.Atoi(m[2])
		ms, _ := strconv.ParseFloat(t[1], 64)
		pages += hit + read
		exec += time.Duration(ms * float64(time.Millisecond))
		msgs += total
	}
	b.StopTimer()
	b.ReportMetric(float64(pages)/float64(msgs), "pages/msg")
	b.ReportMetric(float64(exec.Microseconds())/float64(msgs), "exec-µs/msg")
}

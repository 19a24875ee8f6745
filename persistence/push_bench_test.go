package persistence

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
)

// BenchmarkCommitBundle measures the common push path: one bundle of 8
// partitions x 16 new items per op (row locks, probe, insert, commit), with
// no lock contention. Run before/after changes to the lock statement:
//
//	go test -run '^$' -bench CommitBundle -benchtime 2000x ./persistence/
func BenchmarkCommitBundle(b *testing.B) {
	s := setup(b)
	ctx := context.Background()
	const parts, per = 8, 16
	pids := make([]uuid.UUID, parts)
	for i := range pids {
		var err error
		if pids[i], err = s.EnsurePartition(ctx, "bench", fmt.Sprintf("p%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		bs := make([]*queen.PushBatch, parts)
		for i, pid := range pids {
			txns := make([]string, per)
			for j := range txns {
				txns[j] = fmt.Sprintf("t-%d-%d-%d", n, i, j)
			}
			its := items("bench", fmt.Sprintf("p%d", i), txns...)
			bs[i] = &queen.PushBatch{PartitionID: pid, Items: its, LeaderOf: leadersOf(its), Watermark: -1}
		}
		if _, err := s.CommitBundle(ctx, bs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*parts*per)/b.Elapsed().Seconds(), "items/s")
}

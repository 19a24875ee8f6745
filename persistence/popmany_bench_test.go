package persistence

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
)

// BenchmarkDrainPopAck measures the drain (issue 28): each op is one pop of
// per partitions holding 3 messages each (their consumer rows exist and are
// known, as in a running group; per = 1 is a one-partition pop) and the ack
// of its messages by offset and transactionId, as the load test's
// consumers do. It reports pg-µs/partition: the CPU time of the PostgreSQL
// server (postmaster and backends, from /proc) over the timed loop per
// partition drained, less sensitive to a busy machine than the wall time.
//
//	go test -run '^$' -bench DrainPopAck -benchtime 100x ./persistence/
func BenchmarkDrainPopAck(b *testing.B) {
	for _, per := range []int{1, 32} {
		b.Run(fmt.Sprintf("partitions=%d", per), func(b *testing.B) { benchDrain(b, per) })
	}
}

func benchDrain(b *testing.B, per int) {
	s := setup(b)
	ctx := context.Background()
	parts := b.N * per
	pids := make([]uuid.UUID, parts)
	for i := range pids {
		name := fmt.Sprintf("p%d", i)
		pid, err := s.EnsurePartition(ctx, fmt.Sprintf("drain%d", per), name)
		if err != nil {
			b.Fatal(err)
		}
		its := items(fmt.Sprintf("drain%d", per), name, name+"-0", name+"-1", name+"-2", name+"-3")
		if _, err := s.Commit(ctx, &queen.PushBatch{PartitionID: pid, Items: its, LeaderOf: leadersOf(its), Watermark: -1}); err != nil {
			b.Fatal(err)
		}
		// The group's row exists (one message consumed), as in a running group.
		if _, _, err := popOne(ctx, s, queen.PopSpec{PartitionID: pid, Group: "g", Batch: 1, AutoAck: true}); err != nil {
			b.Fatal(err)
		}
		pids[i] = pid
	}
	drained := 0
	b.ResetTimer()
	cpuSince := serverCPU(b, s)
	for n := 0; n < b.N; n++ {
		res, _, err := s.PopPartitions(ctx, queen.PopSpec{Group: "g", Batch: 100, SkipLocked: true}, pids[n*per:(n+1)*per], per)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Messages) != 3*per {
			b.Fatalf("popped %d messages, want %d", len(res.Messages), 3*per)
		}
		lease := uuid.MustParse(*res.LeaseID)
		acks := make([]queen.AckItem, len(res.Messages))
		for i, m := range res.Messages {
			acks[i] = queen.AckItem{PartitionID: uuid.MustParse(m.PartitionID), Offset: m.Offset, TransactionID: m.TransactionID,
				Status: queen.AckCompleted, ConsumerGroup: "g", LeaseID: &lease}
		}
		out, err := s.Ack(ctx, acks)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range out {
			if r.Result != queen.Acked {
				b.Fatalf("ack: %s %s", r.Result, r.Error)
			}
		}
		drained += per
	}
	cpu := cpuSince()
	b.StopTimer()
	b.ReportMetric(cpu*1e6/float64(drained), "pg-µs/partition")
}

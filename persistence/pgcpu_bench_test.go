package persistence

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/queen-mq/queen-go"
)

// BenchmarkCommitSmallSegments measures what PostgreSQL spends per stored
// message in the shape of many synchronous single-item producers: each op
// is one bundle of 32 partitions x 1, 2, 4 or 8 items, narrowed by the cache (the
// watermark at the partition's last segment, AssumedWindow = the window),
// with one item in ten a repeat of an earlier one passed as a suspect. It
// reports pg-µs/msg: the CPU time (user + system) of the PostgreSQL server's
// postmaster and its backends over the timed loop, divided by the
// messages stored (read from /proc; 0 where /proc is missing).
//
//	go test -run '^$' -bench CommitSmallSegments -benchtime 3000x ./persistence/
func BenchmarkCommitSmallSegments(b *testing.B) {
	for _, per := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("32x%d", per), func(b *testing.B) { benchSmallSegments(b, 32, per) })
	}
}

func benchSmallSegments(b *testing.B, parts, per int) {
	s := setup(b)
	ctx := context.Background()
	pids := make([]uuid.UUID, parts)
	last := make([]int64, parts)
	for i := range pids {
		var err error
		if pids[i], err = s.EnsurePartition(ctx, "bench", fmt.Sprintf("p%d", i)); err != nil {
			b.Fatal(err)
		}
		last[i] = -1
	}
	stored := 0
	b.ResetTimer()
	cpuSince := serverCPU(b, s)
	walSince := serverWAL(b, s)
	for n := 0; n < b.N; n++ {
		bs := make([]*queen.PushBatch, parts)
		for i, pid := range pids {
			txns := make([]string, per)
			sus := map[queen.Hash]queen.Span{}
			for j := range txns {
				if (n*parts*per+i*per+j)%10 == 9 && n > 0 {
					txns[j] = fmt.Sprintf("t-%d-%d-%d", n-1, i, j)
				} else {
					txns[j] = fmt.Sprintf("t-%d-%d-%d", n, i, j)
				}
			}
			its := items("bench", fmt.Sprintf("p%d", i), txns...)
			for j, it := range its {
				if strings.HasPrefix(txns[j], fmt.Sprintf("t-%d-", n-1)) {
					sus[it.Hash] = queen.Span{}
				}
			}
			bs[i] = &queen.PushBatch{PartitionID: pid, Items: its, LeaderOf: leadersOf(its), Watermark: last[i], Suspects: sus, AssumedWindow: 3600}
		}
		for i, o := range commitAll(b, s, bs) {
			if o.LastOffset >= 0 {
				stored += int(o.LastOffset - o.FirstOffset + 1)
				last[i] = o.LastOffset
			}
		}
	}
	reportPGCPU(b, cpuSince(), stored)
	reportWAL(b, walSince(), stored)
}

// commitAll commits bs (Store.CommitBundle) and fails b on any error.
func commitAll(b *testing.B, s *Store, bs []*queen.PushBatch) []queen.PushOutcome {
	b.Helper()
	outs, err := s.CommitBundle(context.Background(), bs)
	if err != nil {
		b.Fatal(err)
	}
	for _, o := range outs {
		if o.Err != nil {
			b.Fatal(o.Err)
		}
	}
	return outs
}

// reportPGCPU stops b's timer and reports pg-µs/msg (cpu seconds of the
// server over stored messages) and msgs/op.
func reportPGCPU(b *testing.B, cpu float64, stored int) {
	b.StopTimer()
	if stored > 0 && cpu > 0 {
		b.ReportMetric(cpu*1e6/float64(stored), "pg-µs/msg")
	}
	b.ReportMetric(float64(stored)/float64(b.N), "msgs/op")
}

// serverCPU starts measuring the CPU time of the PostgreSQL server behind
// s (clusterCPU of its data_directory); the returned func gives the
// seconds spent since.
func serverCPU(tb testing.TB, s *Store) func() float64 {
	tb.Helper()
	var dataDir string
	if err := s.pool.QueryRow(context.Background(), "SHOW data_directory").Scan(&dataDir); err != nil {
		tb.Fatal(err)
	}
	start := clusterCPU(dataDir)
	return func() float64 { return clusterCPU(dataDir) - start }
}

// clusterCPU is the CPU seconds (user + system, with reaped children) of
// the PostgreSQL cluster in dataDir: its postmaster and every child.
func clusterCPU(dataDir string) float64 {
	raw, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pm := strings.SplitN(string(raw), "\n", 2)[0]
	pids := []string{pm}
	if kids, err := os.ReadFile(filepath.Join("/proc", pm, "task", pm, "children")); err == nil {
		pids = append(pids, strings.Fields(string(kids))...)
	}
	var ticks float64
	for _, p := range pids {
		st, err := os.ReadFile(filepath.Join("/proc", p, "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+2:]))
		for _, k := range []int{11, 12, 13, 14} { // utime stime cutime cstime
			v, _ := strconv.ParseFloat(f[k], 64)
			ticks += v
		}
	}
	return ticks / 100
}

// BenchmarkCommitSpread measures what PostgreSQL spends per stored message
// when traffic is spread thin (issue 42): each op is one bundle of 450
// partitions drawn at random from 10,000, one item each, narrowed by the
// cache as in BenchmarkCommitSmallSegments (one item in ten a repeat of the
// partition's last transactionId, passed as a suspect). It reports
// pg-µs/msg as that benchmark does.
//
//	go test -run '^$' -bench CommitSpread -benchtime 1500x ./persistence/
func BenchmarkCommitSpread(b *testing.B) {
	const total, per = 10000, 450
	s := setup(b)
	ctx := context.Background()
	keys := make([]queen.PartitionKey, total)
	for i := range keys {
		keys[i] = queen.PartitionKey{Queue: "bench", Partition: fmt.Sprintf("p%d", i)}
	}
	pids, err := s.EnsurePartitions(ctx, keys)
	if err != nil {
		b.Fatal(err)
	}
	last := make([]int64, total)
	prev := make([]string, total) // each partition's last stored transactionId
	for i := range last {
		last[i] = -1
	}
	rng := rand.New(rand.NewPCG(1, 2))
	stored := 0
	b.ResetTimer()
	cpuSince := serverCPU(b, s)
	walSince := serverWAL(b, s)
	for n := 0; n < b.N; n++ {
		picked := map[int]bool{}
		bs := make([]*queen.PushBatch, 0, per)
		idx := make([]int, 0, per)
		for len(bs) < per {
			i := rng.IntN(total)
			if picked[i] {
				continue
			}
			picked[i] = true
			txn := fmt.Sprintf("t-%d-%d", n, i)
			repeat := prev[i] != "" && len(bs)%10 == 9
			if repeat {
				txn = prev[i]
			}
			its := items("bench", fmt.Sprintf("p%d", i), txn)
			sus := map[queen.Hash]queen.Span{}
			if repeat {
				sus[its[0].Hash] = queen.Span{}
			}
			bs = append(bs, &queen.PushBatch{PartitionID: pids[i], Items: its, LeaderOf: leadersOf(its), Watermark: last[i], Suspects: sus, AssumedWindow: 3600})
			idx = append(idx, i)
		}
		for k, o := range commitAll(b, s, bs) {
			if o.LastOffset >= 0 {
				stored += int(o.LastOffset - o.FirstOffset + 1)
				last[idx[k]] = o.LastOffset
				prev[idx[k]] = fmt.Sprintf("t-%d-%d", n, idx[k])
			}
		}
	}
	reportPGCPU(b, cpuSince(), stored)
	reportWAL(b, walSince(), stored)
}

// serverWAL starts measuring the WAL the PostgreSQL server behind s writes;
// the returned func gives the bytes written since.
func serverWAL(tb testing.TB, s *Store) func() float64 {
	tb.Helper()
	var lsn string
	if err := s.pool.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		tb.Fatal(err)
	}
	return func() float64 {
		var n float64
		if err := s.pool.QueryRow(context.Background(), "SELECT pg_current_wal_lsn() - $1::pg_lsn", lsn).Scan(&n); err != nil {
			tb.Fatal(err)
		}
		return n
	}
}

// reportWAL reports wal-B/msg: the WAL bytes written over stored messages.
func reportWAL(b *testing.B, wal float64, stored int) {
	if stored > 0 {
		b.ReportMetric(wal/float64(stored), "wal-B/msg")
	}
}

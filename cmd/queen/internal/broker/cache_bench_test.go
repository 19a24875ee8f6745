package broker

// Benchmarks of the broker-side dedup cache (SPEC.md §8) with 1,000,000
// hashes in one partition's window:
//
//	go test -run '^$' -bench DedupCache -benchtime 200x ./cmd/queen/internal/broker/
//
// BenchmarkDedupCacheWindow1M pushes new ids through two partition actors
// side by side, one with the cache warm and one with it off, alternating
// rounds, and reports both rates and their ratio. BenchmarkDedupCacheEvicting
// runs a budget smaller than the partition's window (so the cache evicts and
// re-hydrates constantly) and reports the process's peak resident memory
// against the budget.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/actors"
	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

const windowHashes = 1_000_000

// fillWindow stores n in-window hashes in partition (queue, name) as 1,000
// segments of 1,000 frames: per-hash rows and segments (with their hashes).
func fillWindow(b *testing.B, store *persistence.Store, url, queue, name string, n int) uuid.UUID {
	b.Helper()
	ctx := context.Background()
	pid, err := store.EnsurePartition(ctx, queue, name)
	if err != nil {
		b.Fatal(err)
	}
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	stmts := []string{
		`INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
		 SELECT $1, md5($2 || i::text)::uuid, i, (i / 1000) * 1000, clock_timestamp() FROM generate_series(0, $3 - 1) i`,
		`INSERT INTO queen.segments (partition_num, first_offset, last_offset, created_at, legacy_ids, frames, hashes)
		 SELECT (SELECT num FROM queen.partitions WHERE id = $1), g * 1000, g * 1000 + 999, clock_timestamp(), string_agg(decode(md5('m' || $2 || i::text), 'hex'), ''::bytea ORDER BY i), ''::bytea,
		        string_agg(decode(md5($2 || i::text), 'hex'), ''::bytea ORDER BY i)
		 FROM generate_series(0, $3 - 1) i, LATERAL (SELECT i / 1000 AS g) x GROUP BY g`,
		`UPDATE queen.partition_ends SET last_offset = $3 - 1 WHERE partition_id = $1 AND $2 <> ''`,
	}
	for _, s := range stmts {
		if _, err := db.Exec(ctx, s, pid, name, n); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := db.Exec(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	return pid
}

// pushRound pushes conc requests of per new ids at once to one partition
// and returns how long they took.
func pushRound(b *testing.B, h *actors.Host, queue, name string, conc, per int, seq *int) time.Duration {
	b.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < conc; c++ {
		its := make([]*queen.Item, per)
		for i := range its {
			*seq++
			txn := fmt.Sprintf("bench-%s-%d", name, *seq)
			its[i] = &queen.Item{Queue: queue, Partition: name, TransactionID: txn, Payload: []byte(`{}`), Hash: queen.HashTxn(txn)}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.Push(context.Background(), queue, name, its)
			if err != nil {
				b.Error(err)
				return
			}
			for _, r := range res {
				if r.Verdict != queen.Queued {
					b.Errorf("verdict %s", r.Verdict)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

func openBenchStore(b *testing.B) (*persistence.Store, string) {
	b.Helper()
	url := pgtest.NewDatabase(b)
	if _, err := persistence.Migrate(context.Background(), url); err != nil {
		b.Fatal(err)
	}
	store, err := persistence.Open(context.Background(), persistence.Config{URL: url})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(store.Close)
	return store, url
}

func BenchmarkDedupCacheWindow1M(b *testing.B) {
	store, url := openBenchStore(b)
	fillWindow(b, store, url, "bench", "warm", windowHashes)
	fillWindow(b, store, url, "bench", "off", windowHashes)
	cache := actors.NewCache(actors.CacheConfig{Source: store, Logger: quietLogger()})
	warm := startBenchHost(b, actors.Config{Store: store, NewCache: cache.New, Logger: quietLogger()})
	off := startBenchHost(b, actors.Config{Store: store, Logger: quietLogger()})
	b.Cleanup(func() {
		warm.Stop(context.Background()) //nolint:errcheck
		off.Stop(context.Background())  //nolint:errcheck
	})
	const conc, per = 8, 100
	seq := 0
	// Warm up: the cache hydrates the 1M hashes, then narrows the probes.
	deadline := time.Now().Add(2 * time.Minute)
	for cache.Stats().NarrowedProbes == 0 {
		if time.Now().After(deadline) {
			b.Fatalf("the cache never warmed: %+v", cache.Stats())
		}
		pushRound(b, warm, "bench", "warm", 1, 1, &seq)
	}
	pushRound(b, off, "bench", "off", conc, per, &seq)
	b.ResetTimer()
	var tWarm, tOff time.Duration
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			tWarm += pushRound(b, warm, "bench", "warm", conc, per, &seq)
			tOff += pushRound(b, off, "bench", "off", conc, per, &seq)
		} else {
			tOff += pushRound(b, off, "bench", "off", conc, per, &seq)
			tWarm += pushRound(b, warm, "bench", "warm", conc, per, &seq)
		}
	}
	b.StopTimer()
	items := float64(b.N * conc * per)
	b.ReportMetric(items/tWarm.Seconds(), "warm_items/s")
	b.ReportMetric(items/tOff.Seconds(), "off_items/s")
	b.ReportMetric(tOff.Seconds()/tWarm.Seconds(), "warm/off")
	st := cache.Stats()
	b.ReportMetric(float64(st.Bytes)/(1<<20), "cache_MB")
	if st.FullProbes > st.NarrowedProbes/10+5 {
		b.Logf("many full probes while warm: %+v", st)
	}
}

// rssMB reads the process's resident memory from /proc (0 where there is none).
func rssMB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func BenchmarkDedupCacheEvicting(b *testing.B) {
	store, url := openBenchStore(b)
	fillWindow(b, store, url, "bench", "big", windowHashes)
	const budget = 32 << 20 // the window needs about 80 MB of cache
	cache := actors.NewCache(actors.CacheConfig{BudgetBytes: budget, Source: store, Logger: quietLogger()})
	h := startBenchHost(b, actors.Config{Store: store, NewCache: cache.New, Logger: quietLogger()})
	b.Cleanup(func() { h.Stop(context.Background()) }) //nolint:errcheck
	base := rssMB()
	var peak float64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				peak = max(peak, rssMB())
			}
		}
	}()
	seq := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pushRound(b, h, "bench", "big", 8, 100, &seq)
	}
	b.StopTimer()
	close(stop)
	<-done
	st := cache.Stats()
	b.ReportMetric(peak, "rss_peak_MB")
	b.ReportMetric(base, "rss_before_MB")
	b.ReportMetric(float64(budget>>20)+100, "limit_MB")
	b.ReportMetric(float64(st.Evictions), "evictions")
	if st.Evictions == 0 {
		b.Logf("no eviction happened: %+v", st)
	}
}

// startBenchHost starts a partition host; the caller stops it.
func startBenchHost(b *testing.B, cfg actors.Config) *actors.Host {
	h, err := actors.NewHost(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	return h
}

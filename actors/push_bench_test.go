package actors

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/internal/storetest"
)

// BenchmarkPushSpread measures the broker's own work per pushed item
// through a real host (the parent, the partition actors, their caches, the
// bundler) over a store that keeps nothing: 32 producers, each with 100
// single-item pushes in flight to partitions drawn at random, as `queen
// loadtest --spread random` sends them. At 10,000 partitions a push is
// about its partition's whole share of a commit, so the per-(partition,
// commit) costs of the actors show (issue 42); at 64 they are shared by
// ~50 items. ns/op is wall time per item with every core busy; cpu-ns/op
// is the process's CPU time (user and system) per item, which a busy or
// shared machine disturbs less.
//
//	go test -run '^$' -bench PushSpread -benchtime 300000x ./actors/
func BenchmarkPushSpread(b *testing.B) {
	for _, n := range []int{64, 10000} {
		b.Run(fmt.Sprintf("partitions=%d", n), func(b *testing.B) {
			st := storetest.NewMem()
			st.Stateless = true
			cache := NewCache(CacheConfig{Source: emptySidecar{}, Logger: quiet()})
			h := startHost(b, Config{Store: st, NewCache: cache.New, Logger: quiet()})
			defer h.Stop(context.Background()) //nolint:errcheck
			names := make([]string, n)
			for i := range names {
				names[i] = "p" + strconv.Itoa(i)
				pushOne(b, h, names[i])
			}
			payload := []byte(`{"k":"` + string(make([]byte, 190)) + `"}`)
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 32)
			cpu0 := cpuTime(b)
			b.ResetTimer()
			for w := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 42))
					pend := make([]*Pending, 0, 100)
					for {
						start := next.Add(100) - 100
						if start >= int64(b.N) {
							return
						}
						pend = pend[:0]
						for k := start; k < min(start+100, int64(b.N)); k++ {
							p := names[rng.IntN(n)]
							txn := "t" + strconv.FormatInt(k, 10)
							it := &queen.Item{Queue: "q", Partition: p, TransactionID: txn, Payload: payload, Hash: queen.HashTxn(txn)}
							pd, err := h.Enqueue("q", p, []*queen.Item{it})
							if err != nil {
								errs <- err
								return
							}
							pend = append(pend, pd)
						}
						for _, pd := range pend {
							if _, err := pd.Wait(context.Background()); err != nil {
								errs <- err
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
		})
	}
}

// cpuTime is the process's CPU time so far (user and system).
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

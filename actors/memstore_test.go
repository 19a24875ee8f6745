package actors

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/internal/storetest"
)

// emptySidecar hydrates nothing (storetest.MemStore keeps no sidecar).
type emptySidecar struct{}

func (emptySidecar) SidecarRange(context.Context, uuid.UUID, int64, int64, int64) ([]queen.SidecarSegment, error) {
	return nil, nil
}

func (emptySidecar) SidecarPrints(context.Context, uuid.UUID, int64) (queen.SidecarPrints, error) {
	return queen.SidecarPrints{}, nil
}

func liveHeap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkPartitionMemory reports the Go heap one active partition holds
// (its actor, mailbox, process registry entry, the parent's map entry and
// its dedup cache holding one hash), measured by pushing one item to each of
// 20,000 partitions through a real host; the store keeps nothing.
//
//	go test -run '^$' -bench BenchmarkPartitionMemory -benchtime 1x ./actors/
//
// With QUEEN_BENCH_HEAP_PROFILE=path it writes the heap profile taken while
// the partitions are active (go tool pprof -sample_index=inuse_space).
func BenchmarkPartitionMemory(b *testing.B) {
	const n = 20000
	for range b.N {
		st := storetest.NewMem()
		st.Stateless = true
		cache := NewCache(CacheConfig{Source: emptySidecar{}, Logger: quiet()})
		h := startHost(b, Config{Store: st, NewCache: cache.New, Logger: quiet()})
		// One partition first, so the actor system's one-time costs are
		// not counted.
		pushOne(b, h, "warm")
		before := liveHeap()
		pend := make([]*Pending, n)
		for i := range pend {
			p, err := h.Enqueue("q", fmt.Sprintf("p%d", i), []*queen.Item{benchItem(i)})
			if err != nil {
				b.Fatal(err)
			}
			pend[i] = p
		}
		for _, p := range pend {
			if _, err := p.Wait(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		pend = nil //nolint:ineffassign // for the reader: the active heap is measured without the Pendings (the compiler already treats pend as dead here)
		active := liveHeap()
		if path := os.Getenv("QUEEN_BENCH_HEAP_PROFILE"); path != "" {
			writeHeapProfile(b, path)
		}
		b.ReportMetric(float64(active-before)/n, "B/active-partition")
		passivateUntil(b, h, 0, func() bool { return h.PartitionStats().Active == 0 })
		passive := liveHeap()
		b.ReportMetric(float64(passive-before)/n, "B/passivated-partition")
		h.Stop(context.Background()) //nolint:errcheck
		runtime.KeepAlive(cache)
	}
}

// writeHeapProfile writes the live heap (pprof format) to path: what the
// active partitions hold, by allocation site.
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

func pushOne(tb testing.TB, h *Host, partition string) {
	tb.Helper()
	if _, err := h.Push(context.Background(), "q", partition, []*queen.Item{benchItem(-1)}); err != nil {
		tb.Fatal(err)
	}
}

func benchItem(i int) *queen.Item {
	txn := fmt.Sprintf("t%d", i)
	return &queen.Item{Queue: "q", Partition: fmt.Sprintf("p%d", i), TransactionID: txn, Payload: []byte(`{}`), Hash: queen.HashTxn(txn)}
}

// waitFor polls cond every millisecond for up to 20 s.
func waitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not met within 20 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// passivateUntil asks the host to passivate the partitions idle for idle
// until cond holds (for up to 20 s): an actor that has just answered a push
// may not have seen its commitDone yet, and refuses until it has (the idle
// sweep asks again at its next tick).
func passivateUntil(tb testing.TB, h *Host, idle time.Duration, cond func() bool) {
	tb.Helper()
	waitFor(tb, func() bool {
		if cond() {
			return true
		}
		h.Passivate(idle)
		return false
	})
}

//go:build unix

package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/client"
)

// instantPusher answers every item queued at once, with a fresh UUIDv7 and
// offset: no actors, no PostgreSQL.
type instantPusher struct {
	partition uuid.UUID
	offset    atomic.Int64
}

func (p *instantPusher) Push(_ context.Context, items []*queen.Item) []queen.Result {
	out := make([]queen.Result, len(items))
	for i := range items {
		out[i] = queen.Result{Verdict: queen.Queued, MessageID: uuid.Must(uuid.NewV7()), PartitionID: p.partition, Offset: p.offset.Add(1)}
	}
	return out
}

// BenchmarkSyncPushCeiling measures the transport's ceiling for synchronous
// single-item producers (issue 11's "256 producers, batch 1" shape): each
// producer has its own TCP connection to an embedded NATS server and one
// push of one item in flight (transport/client's Client.Push, as the load test's
// producers), and the broker's front door answers on an in-process
// connection (decode, validation, reply encoding, micro stats; the same
// Service and NATSService the broker runs) with an instantPusher behind
// it. Whatever a real broker does behind the front door (actors, commits,
// PostgreSQL) can only lower this rate. It reports pushes/s and the
// process's CPU microseconds per push (user + system, client and server
// side together, as on a machine that runs the load test beside the
// broker).
//
//	go test -run '^$' -bench SyncPushCeiling -benchtime 100000x ./transport/
func BenchmarkSyncPushCeiling(b *testing.B) {
	for _, producers := range []int{8, 256} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) { benchCeiling(b, producers) })
	}
}

func benchCeiling(b *testing.B, producers int) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true})
	if err != nil {
		b.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		b.Fatal("the NATS server did not start")
	}
	bc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		b.Fatal(err)
	}
	defer bc.Close()
	ns, err := NewService(Config{Pusher: &instantPusher{partition: uuid.New()}}).NewNATS(NATSConfig{Conn: bc, Version: "0.0.0"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := ns.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer ns.Stop(ctx) //nolint:errcheck
	clients := make([]*client.Client, producers)
	for i := range clients {
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		clients[i] = client.NewNATS(nc)
	}
	payload := json.RawMessage(`{"n":1,"s":"a small message of the load test"}`)
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	before := cpuTime()
	b.ResetTimer()
	start := time.Now()
	for p, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			item := []client.PushItem{{Queue: "ceiling", Partition: fmt.Sprintf("p%d", p%64), Payload: payload}}
			for next.Add(1) <= int64(b.N) {
				item[0].TransactionID = uuid.NewString()
				out, err := c.Push(ctx, item)
				if err != nil || len(out) != 1 || out[0].Status != queen.Queued {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d pushes were not answered queued", n, b.N)
	}
	b.ReportMetric(float64(b.N)/took.Seconds(), "pushes/s")
	b.ReportMetric(float64((cpuTime()-before).Microseconds())/float64(b.N), "cpu-µs/push")
}

// cpuTime is the process's CPU time so far (user + system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package loadtest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/target"
	"github.com/queen-mq/queen-go/loadtest/txnid"
	"github.com/queen-mq/queen-go/transport/client"
)

// fakeBroker answers like a broker with an exact dedup per partition, and
// fails every item of every third request (code overloaded) and some whole
// requests (timeout), to exercise the retries.
type fakeBroker struct {
	mu       sync.Mutex
	stored   map[string]uuid.UUID // partition/txn -> original id
	requests int
	sends    map[string]int
}

func (f *fakeBroker) Send(_ context.Context, items []client.PushItem, out []target.Result) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	if f.requests%7 == 0 {
		return queen.ErrTimeout.With("lost")
	}
	for i, it := range items {
		k := it.Partition + "/" + it.TransactionID
		f.sends[k]++
		if f.requests%3 == 0 {
			out[i] = target.Result{Status: queen.Failed, Code: "overloaded"}
			continue
		}
		if id, ok := f.stored[k]; ok {
			out[i] = target.Result{Status: queen.Duplicate, ID: id}
			continue
		}
		id := uuid.Must(uuid.NewV7())
		f.stored[k] = id
		out[i] = target.Result{Status: queen.Queued, ID: id}
	}
	return nil
}

func (f *fakeBroker) Close() {}

func TestProducerRepeatsAndRetries(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Queue, cfg.Partitions, cfg.Batch, cfg.DupRatio, cfg.Producers = "q", 4, 20, 0.3, 1
	parts := txnid.PartitionNames(cfg.Partitions)
	fb := &fakeBroker{stored: map[string]uuid.UUID{}, sends: map[string]int{}}
	c := &counters{}
	led := newLedger(0, cfg.Queue, parts)
	p := newProducer(0, &cfg, parts, fb, led, c)
	// Requests, not time, bound the run: the deadline passes once 60
	// requests went out; the drain then resolves what failed.
	for fb.requests < 60 {
		p.fill(true)
		err := fb.Send(context.Background(), p.items, p.results[:len(p.slots)])
		p.handle(err)
	}
	p.run(context.Background(), time.Now(), time.Now().Add(time.Minute))

	require.Zero(t, len(p.retries), "the drain resolved every failed item")
	require.Zero(t, c.gaveUp.Load())
	require.Positive(t, c.retries.Load())
	require.Positive(t, c.failed.Load())
	require.Positive(t, c.requestErrors.Load())
	ratio := float64(c.repeats.Load()) / float64(c.repeats.Load()+c.fresh.Load())
	require.InDelta(t, cfg.DupRatio, ratio, 0.1, "repeats are about dup-ratio of the new items")

	// Every id went to one partition only, and each one sent was answered
	// queued once at most; the ledger agrees with the fake's store.
	found := report.NewFindings()
	for name, id := range fb.stored {
		part, txn, ok := strings.Cut(name, "/")
		require.True(t, ok)
		prod, seq, ok := txnid.ParseTxn(txn)
		require.True(t, ok, txn)
		require.Equal(t, 0, prod)
		require.Equal(t, parts[txnid.PartOf(0, seq, len(parts))], part, "transaction id %d went to its partition only", seq)
		require.True(t, led.store(seq, id, 0, false, found))
	}
	tot := led.check(found)
	require.Equal(t, int64(len(fb.stored)), tot.ids)
	require.Equal(t, tot.ids, tot.answered)
	require.Zero(t, found.Total(), "%v", found.Examples())
	require.Zero(t, led.issues.Total(), "%v", led.issues.Examples())
	require.Zero(t, led.pending(), "every answered id met its stored frame")
}

func TestProducerGivesUp(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Queue, cfg.Partitions, cfg.Batch, cfg.MaxAttempts = "q", 2, 5, 3
	parts := txnid.PartitionNames(cfg.Partitions)
	c := &counters{}
	p := newProducer(0, &cfg, parts, failing{}, newLedger(0, "q", parts), c)
	p.fill(true)
	sent := append([]client.PushItem(nil), p.items...)
	p.handle(p.snd.Send(context.Background(), p.items, p.results[:len(p.slots)]))
	// Retries carry the same transaction ids and partitions.
	p.fill(false)
	require.Equal(t, sent, p.items)
	p.handle(p.snd.Send(context.Background(), p.items, p.results[:len(p.slots)]))
	p.fill(false)
	p.handle(p.snd.Send(context.Background(), p.items, p.results[:len(p.slots)]))
	require.Empty(t, p.retries)
	require.Equal(t, int64(5), c.gaveUp.Load(), "three sends, then the producer gives up")
	require.Equal(t, int64(15), c.failed.Load())
}

type failing struct{}

func (failing) Send(_ context.Context, _ []client.PushItem, out []target.Result) error {
	for i := range out {
		out[i] = target.Result{Status: queen.Failed, Code: "unavailable"}
	}
	return nil
}
func (failing) Close() {}

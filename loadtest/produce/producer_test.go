package produce

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
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

// bookedID is what a recordLedger holds of one sequence number.
type bookedID struct {
	sent                bool
	queued, dup, failed int
	queuedID            uuid.UUID
	dupIDs              []uuid.UUID
}

// recordLedger records what a producer books (the producers' ledger): the
// audit's own ledger is tested in loadtest/audit.
type recordLedger struct {
	ids   map[uint64]*bookedID
	wrong []string
}

func newRecordLedger() *recordLedger { return &recordLedger{ids: map[uint64]*bookedID{}} }

func (r *recordLedger) id(seq uint64) *bookedID {
	b := r.ids[seq]
	if b == nil {
		b = &bookedID{}
		r.ids[seq] = b
	}
	return b
}

func (r *recordLedger) Sent(seq uint64) { r.id(seq).sent = true }
func (r *recordLedger) Queued(seq uint64, id uuid.UUID) {
	b := r.id(seq)
	b.queued++
	b.queuedID = id
}
func (r *recordLedger) Duplicate(seq uint64, id uuid.UUID, _ *[16]byte) {
	b := r.id(seq)
	b.dup++
	b.dupIDs = append(b.dupIDs, id)
}
func (r *recordLedger) Failed(seq uint64)     { r.id(seq).failed++ }
func (r *recordLedger) WrongReply(bad string) { r.wrong = append(r.wrong, bad) }

// testConfig is `queen loadtest`'s defaults for queue q.
func testConfig() Config {
	return Config{Load: Load{Batch: 100, PayloadBytes: 200, DupRatio: 0.1, MaxAttempts: 8,
		Linger: client.DefaultLinger, MaxBatch: 100, InFlight: 1000},
		Queue: "q", RequestTimeout: 30 * time.Second, Window: time.Hour}
}

func TestProducerRepeatsAndRetries(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Batch, cfg.DupRatio = 20, 0.3
	parts := txnid.PartitionNames(4)
	fb := &fakeBroker{stored: map[string]uuid.UUID{}, sends: map[string]int{}}
	c := &Counters{}
	led := newRecordLedger()
	p := New(0, &cfg, parts, fb, led, c)
	// Requests, not time, bound the run: the deadline passes once 60
	// requests went out; the drain then resolves what failed.
	for fb.requests < 60 {
		p.fill(true)
		err := fb.Send(context.Background(), p.items, p.results[:len(p.slots)])
		p.handle(err)
	}
	p.Run(context.Background(), time.Now(), time.Now().Add(time.Minute))

	require.Zero(t, len(p.retries), "the drain resolved every failed item")
	require.Zero(t, c.GaveUp.Load())
	require.Positive(t, c.Retries.Load())
	require.Positive(t, c.Failed.Load())
	require.Positive(t, c.RequestErrors.Load())
	ratio := float64(c.Repeats.Load()) / float64(c.Repeats.Load()+c.Fresh.Load())
	require.InDelta(t, cfg.DupRatio, ratio, 0.1, "repeats are about dup-ratio of the new items")

	// Every id went to one partition only, and each one sent was answered
	// queued once at most; the ledger agrees with the fake's store: every
	// id booked sent is stored, answered queued or duplicate, with the
	// stored message id.
	for name, id := range fb.stored {
		part, txn, ok := strings.Cut(name, "/")
		require.True(t, ok)
		prod, seq, ok := txnid.ParseTxn(txn)
		require.True(t, ok, txn)
		require.Equal(t, 0, prod)
		require.Equal(t, parts[txnid.PartOf(0, seq, len(parts))], part, "transaction id %d went to its partition only", seq)
		b := led.ids[seq]
		require.NotNil(t, b, "stored id %d was booked", seq)
		require.True(t, b.sent)
		require.LessOrEqual(t, b.queued, 1, "id %d answered queued once at most", seq)
		require.Positive(t, b.queued+b.dup, "id %d was answered", seq)
		if b.queued == 1 {
			require.Equal(t, id, b.queuedID)
		}
		for _, d := range b.dupIDs {
			require.Equal(t, id, d, "id %d's duplicate answers carry the original's id", seq)
		}
	}
	require.Len(t, led.ids, len(fb.stored), "every id booked was stored")
	require.Empty(t, led.wrong)
}

func TestProducerGivesUp(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Batch, cfg.MaxAttempts = 5, 3
	parts := txnid.PartitionNames(2)
	c := &Counters{}
	p := New(0, &cfg, parts, failing{}, newRecordLedger(), c)
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
	require.Equal(t, int64(5), c.GaveUp.Load(), "three sends, then the producer gives up")
	require.Equal(t, int64(15), c.Failed.Load())
}

type failing struct{}

func (failing) Send(_ context.Context, _ []client.PushItem, out []target.Result) error {
	for i := range out {
		out[i] = target.Result{Status: queen.Failed, Code: "unavailable"}
	}
	return nil
}
func (failing) Close() {}

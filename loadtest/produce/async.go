package produce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/loadtest/txnid"
	"github.com/queen-mq/queen-go/transport/client"
	"github.com/queen-mq/queen-go/transport/wire"
)

// slabBytes is the size of the buffers the async producers carve payloads
// and transactionIds from (an item keeps its bytes until it resolves).
const slabBytes = 64 << 10

// Async publishes single items through a client.Producer until the run's
// deadline, books each item's result in the ledger and the counters from
// the producer's callbacks, then flushes until the drain deadline. The
// ledger and the audit are the sync mode's.
type Async struct {
	idx   int
	cfg   *Config
	parts []string
	led   Ledger
	c     *Counters
	rng   *rand.Rand
	prod  *client.Producer
	close func()
	// interrupted is set when the run's context ended before the drain
	// finished: unresolved items then count as outcome unknown.
	interrupted bool

	// mu guards what the callbacks share with the publishing loop: the
	// ring of recent ids, the codes and the last error.
	mu        sync.Mutex
	seq       uint64
	recent    []recentID
	next      int
	guard     int64
	codes     map[string]int64
	lastError string

	slab []byte
}

// NewAsync makes async producer idx of a run over parts, pushing through
// push (target.AsyncPush), closing its connection with closeFn once done,
// booking into led (not nil) and counting into c. Its client.Producer
// buffers Config.InFlight items, batches up to Config.MaxBatch after
// Config.Linger, and retries an item under its transactionId while its
// original is younger than a quarter of Config.Window.
func NewAsync(idx int, cfg *Config, parts []string, push client.PushFunc, closeFn func(), led Ledger, c *Counters) *Async {
	a := &Async{
		idx: idx, cfg: cfg, parts: parts, led: led, c: c, close: closeFn,
		rng:    rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(idx)+1)),
		recent: make([]recentID, 0, recentSize),
		guard:  int64(cfg.Window / 2),
		codes:  map[string]int64{},
	}
	a.prod = client.NewProducerFunc(push, client.ProducerOptions{
		Linger:         cfg.Linger,
		MaxBatchItems:  cfg.MaxBatch,
		BufferItems:    cfg.InFlight,
		RequestTimeout: cfg.RequestTimeout,
		// Sent only while the original is younger than half the window, as
		// with the sync producers, so a second queued answer is a violation,
		// never the window closing: a repeat is published while its
		// original is younger than a quarter of it, and is then sent for at
		// most another quarter.
		DeliveryTimeout: time.Duration(a.guard / 2),
		MaxAttempts:     cfg.MaxAttempts,
		RetryBackoff:    20 * time.Millisecond,
		MaxRetryBackoff: 2 * time.Second,
	})
	return a
}

// alloc returns n bytes carved from the producer's slab.
func (a *Async) alloc(n int) []byte {
	if cap(a.slab)-len(a.slab) < n {
		a.slab = make([]byte, 0, max(slabBytes, n))
	}
	start := len(a.slab)
	a.slab = a.slab[:start+n]
	return a.slab[start : start+n : start+n]
}

// Run publishes until deadline, then waits for the outstanding items until
// drainBy; ctx ending (an interrupt) stops both at once.
func (a *Async) Run(ctx context.Context, deadline, drainBy time.Time) {
	defer a.close()
	var txn, payload []byte
	for ctx.Err() == nil && time.Now().Before(deadline) {
		now := time.Now()
		s := a.nextSlot(now.UnixNano())
		txn = txnid.AppendTxn(txn[:0], a.idx, s.seq)
		payload = txnid.AppendPayload(payload[:0], a.idx, s.seq, a.cfg.PayloadBytes)
		b := a.alloc(len(txn) + len(payload))
		copy(b, txn)
		copy(b[len(txn):], payload)
		item := client.PushItem{
			Queue:         a.cfg.Queue,
			Partition:     a.parts[txnid.PartIn(a.cfg.Sequential, a.idx, s.seq, len(a.parts))],
			TransactionID: string(b[:len(txn)]),
			Payload:       json.RawMessage(b[len(txn):]),
		}
		a.led.Sent(s.seq)
		a.c.Sent.Add(1)
		if err := a.prod.PublishFunc(ctx, item, func(r wire.PushReply, err error) { a.book(s, item, now, r, err) }); err != nil {
			// The run was interrupted while the buffer was full: the item
			// was not sent.
			a.c.GaveUp.Add(1)
			break
		}
	}
	dctx, cancel := context.WithDeadline(ctx, drainBy)
	err := a.prod.Flush(dctx)
	cancel()
	a.mu.Lock()
	a.interrupted = ctx.Err() != nil
	a.mu.Unlock()
	cctx := context.Background()
	if err != nil {
		// Out of time (or interrupted): what is left is abandoned at once.
		var c context.CancelFunc
		cctx, c = context.WithCancel(cctx)
		c()
	}
	_ = a.prod.Close(cctx)
	st := a.prod.Stats()
	a.c.Requests.Add(st.Requests)
	a.c.RequestErrors.Add(st.RequestErrors)
	a.c.Retries.Add(st.Retries)
	a.c.Sent.Add(st.Retries)
	a.c.Failed.Add(st.Failed)
}

// nextSlot is the next item: a repeat of a recent id young enough that its
// window is surely open (DupRatio of the time), else a new id.
func (a *Async) nextSlot(now int64) slot {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.recent) > 0 && a.cfg.DupRatio > 0 && a.rng.Float64() < a.cfg.DupRatio {
		r := &a.recent[a.rng.IntN(len(a.recent))]
		if now-r.first < a.guard/2 {
			a.c.Repeats.Add(1)
			return slot{seq: r.seq, first: r.first, ring: -1, want: r.id, hasWant: r.hasID}
		}
	}
	seq := a.seq
	a.seq++
	idx := remember(&a.recent, &a.next, recentID{seq: seq, first: now})
	a.c.Fresh.Add(1)
	return slot{seq: seq, first: now, ring: int32(idx)}
}

// book records one item's result (called from the async producer's
// goroutines).
func (a *Async) book(s slot, it client.PushItem, published time.Time, r wire.PushReply, err error) {
	a.c.mark(txnid.PartIn(a.cfg.Sequential, a.idx, s.seq, len(a.parts)))
	if err != nil {
		a.bookError(s, err)
		return
	}
	a.c.Lat.Record(time.Since(published))
	id, perr := uuid.Parse(r.MessageID)
	bad := ""
	switch {
	case r.TransactionID != it.TransactionID || r.Partition != it.Partition || r.QueueName != it.Queue:
		bad = fmt.Sprintf("reply {queue %q, partition %q, transaction_id %q} for item {queue %q, partition %q, transactionId %q}",
			r.QueueName, r.Partition, r.TransactionID, it.Queue, it.Partition, it.TransactionID)
	case perr != nil:
		bad = fmt.Sprintf("reply (%s) for %s has message_id %q", r.Status, it.TransactionID, r.MessageID)
	}
	if bad != "" {
		a.led.WrongReply(bad)
		a.led.Failed(s.seq)
		a.c.GaveUp.Add(1)
		return
	}
	a.c.Touch(txnid.PartIn(a.cfg.Sequential, a.idx, s.seq, len(a.parts)))
	switch r.Status {
	case queen.Queued:
		a.c.Queued.Add(1)
		a.led.Queued(s.seq, id)
		a.learn(&s, id)
	case queen.Duplicate:
		a.c.Duplicate.Add(1)
		var want *[16]byte
		if s.hasWant {
			want = &s.want
		}
		a.led.Duplicate(s.seq, id, want)
		if id != uuid.Nil {
			a.learn(&s, id)
		}
	}
}

func (a *Async) bookError(s slot, err error) {
	var ue *client.UndeliveredError
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastError = err.Error()
	switch {
	case errors.As(err, &ue):
		// Sent, no verdict: at most once stored.
		a.led.Failed(s.seq)
		switch {
		case errors.Is(ue.Cause, client.ErrDeliveryTimeout):
			a.c.GaveUp.Add(1)
			a.c.WindowGuard.Add(1)
		case a.interrupted || errors.Is(ue.Cause, context.Canceled):
			a.c.UnknownOutcome.Add(1)
		default:
			a.c.GaveUp.Add(1)
			a.codes["gave_up:"+queen.AsError(ue.Last).Code]++
		}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, client.ErrProducerClosed):
		// Never sent.
		a.c.GaveUp.Add(1)
	default:
		qe := queen.AsError(err)
		a.codes["request:"+qe.Code]++
		a.c.Rejected.Add(1)
	}
}

// learn records the message id an answer gave for s's original in the ring.
func (a *Async) learn(s *slot, id uuid.UUID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s.ring >= 0 && int(s.ring) < len(a.recent) {
		if r := &a.recent[s.ring]; r.seq == s.seq && !r.hasID {
			r.id, r.hasID = id, true
		}
	}
}

// Codes counts the error codes the producer met ("request:<code>" for an
// item refused, "gave_up:<code>" for one given up on); read it after Run.
func (a *Async) Codes() map[string]int64 { return a.codes }

// LastError is the last error an item resolved with ("" when none); read
// it after Run.
func (a *Async) LastError() string { return a.lastError }

// Abandon closes the producer at once, dropping whatever it still holds,
// and its connection: after Run a no-op on the producer; before (the run
// failed to start) nothing was published.
func (a *Async) Abandon() {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	_ = a.prod.Close(ended)
	a.close()
}

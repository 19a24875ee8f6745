package broker

// The async producer of the Go client (client.Producer) against a real
// broker: verdicts, per-partition order, retries with the same
// transactionId after a lost reply, a failed verdict and a held row lock,
// refusals, a full buffer, Close and context cancellation.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/client"
	"github.com/queen-mq/queen-go/transport/wire"
)

// gatedPush is a PushFunc over c that waits for its gate before each
// request (or for the request's context to end) and says when it entered.
type gatedPush struct {
	c       *client.Client
	gate    chan struct{}
	entered chan struct{}
}

func newGatedPush(c *client.Client) *gatedPush {
	return &gatedPush{c: c, gate: make(chan struct{}), entered: make(chan struct{}, 64)}
}

func (g *gatedPush) push(ctx context.Context, items []client.PushItem) ([]wire.PushReply, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, queen.ErrTimeout.With("gated: %v", ctx.Err())
	}
	return g.c.Push(ctx, items)
}

// waitAll waits for every future and returns the results in order.
func waitAll(t *testing.T, pds []*client.Pending) ([]wire.PushReply, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs := make([]wire.PushReply, len(pds))
	errs := make([]error, len(pds))
	for i, pd := range pds {
		rs[i], errs[i] = pd.Wait(ctx)
		if errors.Is(errs[i], context.DeadlineExceeded) && ctx.Err() != nil {
			t.Fatalf("item %d: no result within a minute", i)
		}
	}
	return rs, errs
}

func flushOrFail(t *testing.T, p *client.Producer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

func closeProducer(t *testing.T, p *client.Producer) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
}

func TestAsyncProducer(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.LockTimeout = 300 * time.Millisecond })
	c := client.NewNATS(e.nc)
	ctx := context.Background()

	// Every item gets its verdict; per partition the stored order is the
	// publish order; futures and callbacks alike; a repeat is duplicate
	// with the original's id; an item without a transactionId gets one.
	t.Run("verdicts and order", func(t *testing.T) {
		p := client.NewProducer(c, client.ProducerOptions{Linger: 2 * time.Millisecond, MaxBatchItems: 16, MaxInFlight: 4, BufferItems: 64})
		closeProducer(t, p)
		const n, parts = 400, 8
		type res struct {
			r   wire.PushReply
			err error
		}
		var mu sync.Mutex
		byCallback := map[int]res{}
		pds := map[int]*client.Pending{}
		sent := make([]client.PushItem, n)
		for i := range n {
			item := client.PushItem{Queue: "ap-order", Partition: fmt.Sprintf("p%d", i%parts), TransactionID: fmt.Sprintf("o-%d", i), Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))}
			if i%50 == 7 {
				item.TransactionID = ""
			}
			sent[i] = item
			if i%2 == 0 {
				pd, err := p.Publish(ctx, item)
				if err != nil {
					t.Fatalf("Publish %d: %v", i, err)
				}
				pds[i] = pd
				continue
			}
			err := p.PublishFunc(ctx, item, func(r wire.PushReply, err error) {
				mu.Lock()
				byCallback[i] = res{r, err}
				mu.Unlock()
			})
			if err != nil {
				t.Fatalf("PublishFunc %d: %v", i, err)
			}
		}
		flushOrFail(t, p)
		replies := make([]wire.PushReply, n)
		for i := range n {
			var r wire.PushReply
			var err error
			if pd, ok := pds[i]; ok {
				select {
				case <-pd.Done():
				default:
					t.Fatalf("item %d: Flush returned before its future was done", i)
				}
				r, err = pd.Result()
			} else {
				mu.Lock()
				got, ok := byCallback[i]
				mu.Unlock()
				if !ok {
					t.Fatalf("item %d: Flush returned before its callback ran", i)
				}
				r, err = got.r, got.err
			}
			if err != nil || r.Status != queen.Queued {
				t.Fatalf("item %d: %+v, %v; want queued", i, r, err)
			}
			if r.Partition != sent[i].Partition || r.QueueName != "ap-order" {
				t.Fatalf("item %d: reply for %s/%s, want %s/%s", i, r.QueueName, r.Partition, "ap-order", sent[i].Partition)
			}
			if sent[i].TransactionID == "" {
				mustV7(t, r.TransactionID, "generated transactionId")
			} else {
				eq(t, sent[i].TransactionID, r.TransactionID, "item %d transactionId", i)
			}
			replies[i] = r
		}
		st := p.Stats()
		if st.Published != n || st.Queued != n || st.Undelivered != 0 || st.Requests < n/16 {
			t.Fatalf("stats %+v: want %d published and queued in at least %d requests", st, n, n/16)
		}

		// The stored order per partition is the publish order.
		fs := e.frames(t, "ap-order", "")
		eq(t, n, len(fs), "stored messages")
		next := map[string]int{} // partition → index of the next publish expected
		for _, f := range fs {
			i := next[f.Partition]
			for i < n && sent[i].Partition != f.Partition {
				i++
			}
			if i >= n {
				t.Fatalf("%s offset %d (%s): more messages than published", f.Partition, f.Offset, f.TransactionID)
			}
			if f.TransactionID != replies[i].TransactionID || f.MessageID.String() != replies[i].MessageID {
				t.Fatalf("%s offset %d holds %s/%s, want publish %d (%s/%s) next", f.Partition, f.Offset, f.TransactionID, f.MessageID, i, replies[i].TransactionID, replies[i].MessageID)
			}
			next[f.Partition] = i + 1
		}

		// Repeats are duplicates carrying the original's message id.
		var again []*client.Pending
		for i := 0; i < n; i += 20 {
			item := sent[i]
			item.TransactionID = replies[i].TransactionID
			pd, err := p.Publish(ctx, item)
			if err != nil {
				t.Fatal(err)
			}
			again = append(again, pd)
		}
		rs, errs := waitAll(t, again)
		for k, r := range rs {
			i := k * 20
			if errs[k] != nil || r.Status != queen.Duplicate || r.MessageID != replies[i].MessageID {
				t.Fatalf("repeat of item %d: %+v, %v; want duplicate of %s", i, r, errs[k], replies[i].MessageID)
			}
		}
		eq(t, int64(n), e.stats(t, "ap-order").Messages, "stored messages after the repeats")
	})

	// A request whose reply is lost (timeout), and items answered failed
	// after their commit (the outcome lost): the items are sent again with
	// the same transactionIds and answered duplicate with the original ids;
	// nothing is stored twice.
	t.Run("lost outcomes are retried and answered duplicate", func(t *testing.T) {
		for _, mode := range []string{"timeout", "failed"} {
			var calls atomic.Int32
			var mu sync.Mutex
			orig := map[string]string{} // transactionId → message id of the lost reply
			push := func(ctx context.Context, items []client.PushItem) ([]wire.PushReply, error) {
				rs, err := c.Push(ctx, items)
				if calls.Add(1) > 1 || err != nil {
					return rs, err
				}
				mu.Lock()
				for _, r := range rs {
					orig[r.TransactionID] = r.MessageID
				}
				mu.Unlock()
				if mode == "timeout" {
					return nil, queen.ErrTimeout.With("the reply was lost")
				}
				for i := range rs {
					rs[i].Status, rs[i].Code, rs[i].Error, rs[i].MessageID = queen.Failed, "commit_unknown", "the outcome of the commit is unknown", ""
				}
				return rs, queen.ErrUnavailable.With("every item failed")
			}
			p := client.NewProducerFunc(push, client.ProducerOptions{Linger: time.Hour, RetryBackoff: time.Millisecond})
			closeProducer(t, p)
			queue := "ap-lost-" + mode
			var pds []*client.Pending
			for i := range 10 {
				pd, err := p.Publish(ctx, client.PushItem{Queue: queue, Partition: fmt.Sprintf("p%d", i%2), TransactionID: fmt.Sprintf("l-%d", i)})
				if err != nil {
					t.Fatal(err)
				}
				pds = append(pds, pd)
			}
			flushOrFail(t, p)
			rs, errs := waitAll(t, pds)
			for i, r := range rs {
				mu.Lock()
				want := orig[fmt.Sprintf("l-%d", i)]
				mu.Unlock()
				if errs[i] != nil || r.Status != queen.Duplicate || want == "" || r.MessageID != want {
					t.Fatalf("%s: item %d: %+v, %v; want duplicate of %q", mode, i, r, errs[i], want)
				}
			}
			for txn, k := range txnCounts(e.frames(t, queue, "")) {
				eq(t, 1, k, "%s: stored copies of %s", mode, txn)
			}
			eq(t, int64(10), e.stats(t, queue).Messages, "%s: stored messages", mode)
			st := p.Stats()
			if st.Retries != 10 || st.Duplicate != 10 || st.Requests < 2 {
				t.Fatalf("%s: stats %+v: want 10 retries answered duplicate", mode, st)
			}
			if mode == "failed" && st.Failed != 10 {
				t.Fatalf("failed: stats %+v: want 10 failed verdicts", st)
			}
		}
	})

	// A partition whose row lock another session holds answers failed
	// (lock_timeout); the producer retries with backoff, the other
	// partition's items are queued meanwhile, and once the lock is released
	// the stuck items are queued once each, in publish order.
	t.Run("failed verdicts are retried until queued", func(t *testing.T) {
		e.pushOK(t, "nats", items(it("ap-lock", "stuck", "warm")), 1)
		tx, err := e.db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		tag, err := tx.Exec(ctx, `SELECT 1 FROM queen.partition_ends e JOIN queen.partitions p ON p.id = e.partition_id JOIN queen.queues q ON q.id = p.queue_id
			WHERE q.name = 'ap-lock' AND p.name = 'stuck' FOR UPDATE OF e`)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("hold the partition's write lock: %v", err)
		}
		p := client.NewProducer(c, client.ProducerOptions{Linger: time.Millisecond, RetryBackoff: 5 * time.Millisecond, MaxRetryBackoff: 50 * time.Millisecond})
		closeProducer(t, p)
		var stuck, free []*client.Pending
		for i := range 6 {
			pd, err := p.Publish(ctx, client.PushItem{Queue: "ap-lock", Partition: "stuck", TransactionID: fmt.Sprintf("s-%d", i)})
			if err != nil {
				t.Fatal(err)
			}
			stuck = append(stuck, pd)
			if pd, err = p.Publish(ctx, client.PushItem{Queue: "ap-lock", Partition: "free", TransactionID: fmt.Sprintf("f-%d", i)}); err != nil {
				t.Fatal(err)
			}
			free = append(free, pd)
		}
		rs, errs := waitAll(t, free)
		for i := range rs {
			if errs[i] != nil || rs[i].Status != queen.Queued {
				t.Fatalf("free item %d while the other partition is stuck: %+v, %v", i, rs[i], errs[i])
			}
		}
		eventually(t, 60*time.Second, 10*time.Millisecond, "a failed verdict for the stuck partition", func() (bool, string) {
			st := p.Stats()
			return st.Failed > 0, fmt.Sprintf("%+v", st)
		})
		for _, pd := range stuck {
			select {
			case <-pd.Done():
				r, err := pd.Result()
				t.Fatalf("a stuck item resolved while the lock is held: %+v, %v", r, err)
			default:
			}
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		rs, errs = waitAll(t, stuck)
		for i := range rs {
			if errs[i] != nil || rs[i].Status != queen.Queued {
				t.Fatalf("stuck item %d after the lock was released: %+v, %v", i, rs[i], errs[i])
			}
		}
		fs := e.frames(t, "ap-lock", "stuck")
		got := make([]string, len(fs))
		for i, f := range fs {
			got[i] = f.TransactionID
		}
		eq(t, []string{"warm", "s-0", "s-1", "s-2", "s-3", "s-4", "s-5"}, got, "stored order of the stuck partition")
		if st := p.Stats(); st.Retries == 0 || st.Undelivered != 0 {
			t.Fatalf("stats %+v: want retries and nothing undelivered", st)
		}
	})

	// An item the broker refuses (4xx) resolves with the refusal; the
	// other items of its request are sent again and queued.
	t.Run("a refused item does not sink its request", func(t *testing.T) {
		p := client.NewProducer(c, client.ProducerOptions{Linger: time.Hour})
		closeProducer(t, p)
		// Text the broker would refuse never gets this far: Publish
		// refuses it at once (issue 29).
		if _, err := p.Publish(ctx, client.PushItem{Queue: "ap-\x01-bad"}); err == nil {
			t.Fatal("Publish took a queue name with a control character")
		}
		var pds []*client.Pending
		for i := range 5 {
			item := client.PushItem{Queue: "ap-refuse", TransactionID: fmt.Sprintf("r-%d", i)}
			if i == 2 {
				item.Payload = []byte(`{"not":`) // only the broker checks payloads
			}
			pd, err := p.Publish(ctx, item)
			if err != nil {
				t.Fatal(err)
			}
			pds = append(pds, pd)
		}
		flushOrFail(t, p)
		rs, errs := waitAll(t, pds)
		for i := range rs {
			if i == 2 {
				var qe *queen.Error
				if !errors.As(errs[i], &qe) || qe.Retryable || qe.Status/100 != 4 {
					t.Fatalf("the bad item: %+v, %v; want a 4xx refusal", rs[i], errs[i])
				}
				continue
			}
			if errs[i] != nil || rs[i].Status != queen.Queued {
				t.Fatalf("item %d: %+v, %v; want queued", i, rs[i], errs[i])
			}
		}
		eq(t, int64(4), e.stats(t, "ap-refuse").Messages, "stored messages")
	})

	// A full buffer blocks Publish (or, with ErrorOnFull, refuses it); a
	// blocked Publish whose context ends returns its error and the item is
	// never sent; the blocked one goes once there is room.
	t.Run("a full buffer blocks or errors, never drops", func(t *testing.T) {
		g := newGatedPush(c)
		p := client.NewProducerFunc(g.push, client.ProducerOptions{Linger: -1, BufferItems: 2})
		closeProducer(t, p)
		pe := client.NewProducerFunc(g.push, client.ProducerOptions{Linger: -1, BufferItems: 1, ErrorOnFull: true})
		closeProducer(t, pe)
		item := func(txn string) client.PushItem {
			return client.PushItem{Queue: "ap-full", TransactionID: txn}
		}
		a, err := p.Publish(ctx, item("a"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := p.Publish(ctx, item("b"))
		if err != nil {
			t.Fatal(err)
		}
		x, err := pe.Publish(ctx, item("x"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pe.Publish(ctx, item("y")); !errors.Is(err, client.ErrBufferFull) {
			t.Fatalf("Publish on a full buffer with ErrorOnFull: %v, want ErrBufferFull", err)
		}
		type out struct {
			pd  *client.Pending
			err error
		}
		cDone := make(chan out, 1)
		go func() {
			pd, err := p.Publish(ctx, item("c"))
			cDone <- out{pd, err}
		}()
		dctx, cancel := context.WithCancel(ctx)
		dDone := make(chan error, 1)
		go func() {
			_, err := p.Publish(dctx, item("d"))
			dDone <- err
		}()
		cancel()
		if err := <-dDone; !errors.Is(err, context.Canceled) {
			t.Fatalf("a blocked Publish whose context ended: %v, want context.Canceled", err)
		}
		select {
		case o := <-cDone:
			t.Fatalf("Publish returned on a full buffer: %v", o.err)
		default:
		}
		close(g.gate)
		o := <-cDone
		if o.err != nil {
			t.Fatalf("the blocked Publish after room was made: %v", o.err)
		}
		rs, errs := waitAll(t, []*client.Pending{a, b, o.pd, x})
		for i := range rs {
			if errs[i] != nil || rs[i].Status != queen.Queued {
				t.Fatalf("item %d: %+v, %v", i, rs[i], errs[i])
			}
		}
		counts := txnCounts(e.frames(t, "ap-full", ""))
		eq(t, map[string]int{"a": 1, "b": 1, "c": 1, "x": 1}, counts, "stored transactionIds")
	})

	// Close sends what lingers, waits for every verdict and then refuses new
	// items.
	t.Run("close drains", func(t *testing.T) {
		p := client.NewProducer(c, client.ProducerOptions{Linger: time.Hour, MaxBatchItems: 1000})
		var got atomic.Int64
		for i := range 50 {
			err := p.PublishFunc(ctx, client.PushItem{Queue: "ap-close", Partition: fmt.Sprintf("p%d", i%5), TransactionID: fmt.Sprintf("c-%d", i)},
				func(r wire.PushReply, err error) {
					if err == nil && r.Status == queen.Queued {
						got.Add(1)
					}
				})
			if err != nil {
				t.Fatal(err)
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if err := p.Close(cctx); err != nil {
			t.Fatalf("Close: %v", err)
		}
		eq(t, int64(50), got.Load(), "items answered queued when Close returned")
		if _, err := p.Publish(ctx, client.PushItem{Queue: "ap-close"}); !errors.Is(err, client.ErrProducerClosed) {
			t.Fatalf("Publish after Close: %v, want ErrProducerClosed", err)
		}
		eq(t, int64(50), e.stats(t, "ap-close").Messages, "stored messages")
	})

	// A Publish whose context ends before the item is sent: the item
	// resolves with the context's error and is never stored. Close whose
	// context ends abandons the request in flight: its item resolves with
	// an UndeliveredError (outcome unknown).
	t.Run("context cancellation", func(t *testing.T) {
		p := client.NewProducer(c, client.ProducerOptions{Linger: time.Hour})
		closeProducer(t, p)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := p.Publish(cctx, client.PushItem{Queue: "ap-cancel", TransactionID: "early"}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Publish with an ended context: %v", err)
		}
		cctx, cancel = context.WithCancel(ctx)
		gone, err := p.Publish(cctx, client.PushItem{Queue: "ap-cancel", TransactionID: "gone"})
		if err != nil {
			t.Fatal(err)
		}
		kept, err := p.Publish(ctx, client.PushItem{Queue: "ap-cancel", TransactionID: "kept"})
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		flushOrFail(t, p)
		rs, errs := waitAll(t, []*client.Pending{gone, kept})
		if !errors.Is(errs[0], context.Canceled) {
			t.Fatalf("an item whose context ended before it was sent: %+v, %v; want context.Canceled", rs[0], errs[0])
		}
		if errs[1] != nil || rs[1].Status != queen.Queued {
			t.Fatalf("the other item: %+v, %v", rs[1], errs[1])
		}
		eq(t, map[string]int{"kept": 1}, txnCounts(e.frames(t, "ap-cancel", "")), "stored transactionIds")

		g := newGatedPush(c)
		pg := client.NewProducerFunc(g.push, client.ProducerOptions{Linger: -1})
		stuck, err := pg.Publish(ctx, client.PushItem{Queue: "ap-cancel", TransactionID: "stuck"})
		if err != nil {
			t.Fatal(err)
		}
		<-g.entered
		ended, cancel := context.WithCancel(ctx)
		cancel()
		if err := pg.Close(ended); !errors.Is(err, context.Canceled) {
			t.Fatalf("Close with an ended context and a request in flight: %v", err)
		}
		_, err = stuck.Result()
		var ue *client.UndeliveredError
		if !errors.As(err, &ue) || ue.Attempts != 1 || !errors.Is(err, client.ErrProducerClosed) || ue.TransactionID != "stuck" {
			t.Fatalf("the abandoned item: %v; want an UndeliveredError after 1 send, cause ErrProducerClosed", err)
		}
	})
}

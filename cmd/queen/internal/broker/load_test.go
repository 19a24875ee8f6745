package broker

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
)

// TestFusion: concurrent pushes to one partition are fused into fewer
// commits than requests, and every one is answered queued and stored once
// (SPEC.md §1: fused requests follow mailbox arrival order).
func TestFusion(t *testing.T) {
	e := startEnv(t, nil)
	const n = 200
	for _, via := range transports {
		t.Run(via, func(t *testing.T) {
			q := "fuse-" + via
			// Create the partition first so the burst measures fusion only.
			e.pushOK(t, via, items(it(q, "p", "warm-up")), 1)
			results := make([]result, n)
			errs := make([]error, n)
			gate := make(chan struct{})
			var wg sync.WaitGroup
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					<-gate
					results[i], errs[i] = e.tryPush(ctx, via, items(it(q, "p", fmt.Sprintf("f-%03d", i))))
				}(i)
			}
			before := e.b.Commits()
			close(gate)
			wg.Wait()
			commits := e.b.Commits() - before
			ids := map[string]bool{}
			for i := range results {
				if errs[i] != nil {
					t.Fatalf("push %d: %v", i, errs[i])
				}
				r := results[i]
				if r.Status != http.StatusCreated || len(r.Items) != 1 || r.Items[0].Status != "queued" {
					t.Fatalf("push %d: status %d %s", i, r.Status, clip(r.Raw))
				}
				ids[r.Items[0].MessageID] = true
			}
			eq(t, n, len(ids), "distinct message ids")
			if commits >= n || commits == 0 {
				t.Fatalf("%d pushes ran %d commits; want 1..%d (fusion)", n, commits, n-1)
			}
			t.Logf("%s: %d pushes in %d commits", via, n, commits)
			fs := e.frames(t, q, "p")
			eq(t, n+1, len(fs), "stored messages")
			counts := txnCounts(fs)
			for i := 0; i < n; i++ {
				eq(t, 1, counts[fmt.Sprintf("f-%03d", i)], "copies of f-%03d", i)
			}
			for i, f := range fs {
				eq(t, int64(i), f.Offset, "offsets are dense")
				if !ids[f.MessageID.String()] && f.TransactionID != "warm-up" {
					t.Fatalf("stored message %s was never answered", f.MessageID)
				}
			}
			eq(t, int64(n+1), e.stats(t, q).LastOffsets, "allocator")
		})
	}
}

// TestOverload: a partition whose mailbox is full refuses pushes fast with
// code overloaded (503 + Retry-After when every item failed); what was
// answered queued is stored exactly once and the refused ids can be retried.
func TestOverload(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.MaxPendingItems = 10 })
	const reqs, per = 60, 5
	for _, via := range transports {
		t.Run(via, func(t *testing.T) {
			q := "overload-" + via
			e.pushOK(t, via, items(it(q, "p", "warm-up")), 1)
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			status := map[string]string{} // txn → last verdict
			queuedOnce := map[string]int{}
			var overloaded, refused503 int
			var slowest time.Duration
			for round := 0; overloaded == 0; round++ {
				if round == 5 || ctx.Err() != nil {
					t.Fatalf("no overloaded reply after %d rounds of %d concurrent %d-item pushes with MaxPendingItems 10", round, reqs, per)
				}
				results := make([]result, reqs)
				errs := make([]error, reqs)
				bodies := make([][]byte, reqs)
				for i := range bodies {
					var its []item
					for j := 0; j < per; j++ {
						its = append(its, it(q, "p", fmt.Sprintf("o-%d-%d-%d", round, i, j)))
					}
					bodies[i] = items(its...)
				}
				gate := make(chan struct{})
				var wg sync.WaitGroup
				for i := 0; i < reqs; i++ {
					wg.Add(1)
					go func(i int) {
						defer wg.Done()
						<-gate
						results[i], errs[i] = e.tryPush(ctx, via, bodies[i])
					}(i)
				}
				close(gate)
				wg.Wait()
				for i, r := range results {
					if errs[i] != nil {
						t.Fatalf("push %d: %v (the broker must answer, not hang)", i, errs[i])
					}
					checkTransportContract(t, via, r)
					if len(r.Items) != per {
						t.Fatalf("push %d: status %d, %d replies: %s", i, r.Status, len(r.Items), clip(r.Raw))
					}
					failed := 0
					for j, rep := range r.Items {
						eq(t, j, rep.Index, "index")
						status[rep.TransactionID] = rep.Status
						switch rep.Status {
						case "queued":
							queuedOnce[rep.TransactionID]++
						case "failed":
							failed++
							if rep.Code == "" || rep.Error == "" {
								t.Fatalf("failed item without code/error: %+v", rep)
							}
							if rep.Code == "overloaded" {
								overloaded++
								if r.Elapsed > 10*time.Second {
									t.Fatalf("an overloaded reply took %v", r.Elapsed)
								}
								if r.Elapsed > slowest {
									slowest = r.Elapsed
								}
							}
						default:
							t.Fatalf("unexpected verdict %+v", rep)
						}
					}
					switch {
					case failed == per:
						eq(t, http.StatusServiceUnavailable, r.Status, "status when every item failed")
						if via == "http" && r.Header.Get("Retry-After") == "" {
							t.Fatalf("503 without Retry-After")
						}
						refused503++
					default:
						eq(t, http.StatusCreated, r.Status, "status when some item got a verdict")
					}
				}
			}
			t.Logf("%s: %d overloaded items, %d requests answered 503, slowest overloaded reply %v", via, overloaded, refused503, slowest)
			if refused503 == 0 {
				t.Fatalf("overloaded items but no 503 reply")
			}

			// Every item answered queued is stored exactly once; nothing is stored twice.
			counts := txnCounts(e.frames(t, q, "p"))
			for txn, c := range counts {
				if c != 1 {
					t.Fatalf("%s stored %d times", txn, c)
				}
			}
			for txn := range queuedOnce {
				eq(t, 1, counts[txn], "copies of queued %s", txn)
			}

			// Retrying the failed ids one request at a time: queued or duplicate, never failed.
			var retry []item
			for txn, st := range status {
				if st == "failed" {
					retry = append(retry, it(q, "p", txn))
				}
			}
			for start := 0; start < len(retry); start += per {
				end := min(start+per, len(retry))
				rs := e.pushOK(t, via, items(retry[start:end]...), end-start)
				for _, r := range rs {
					if r.Status != "queued" && r.Status != "duplicate" {
						t.Fatalf("retry of %s: %+v", r.TransactionID, r)
					}
				}
			}
			counts = txnCounts(e.frames(t, q, "p"))
			for txn := range status {
				eq(t, 1, counts[txn], "copies of %s after the retries", txn)
			}
		})
	}
}

// TestDrain: Stop while producers push through NATS; afterwards every
// transactionId answered queued is in the database exactly once.
func TestDrain(t *testing.T) {
	e := startEnv(t, nil)
	const workers, per = 4, 4
	nc, err := nats.Connect(e.b.NATSURL(), nats.MaxReconnects(0), nats.Name("drain-load"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl := &env{nc: nc}
	// Wait until the broker answers over NATS (TestNATSReadyWhenStartReturns
	// covers answering at once).
	eventually(t, 10*time.Second, 20*time.Millisecond, "broker answers over NATS", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := cl.tryPush(ctx, "nats", items(it("drain", "p0", "warm-up")))
		if err != nil {
			return false, err.Error()
		}
		return r.Status == http.StatusCreated, fmt.Sprintf("status %d", r.Status)
	})

	var mu sync.Mutex
	answered := map[string]string{} // txn → verdict
	var queuedN atomic.Int64
	stop := make(chan struct{})
	var stopOnce sync.Once
	var wg sync.WaitGroup
	stopLoad := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	var afterStopErrs atomic.Int64
	type failure struct {
		sent time.Time
		err  error
		txns []string
	}
	var failures []failure
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for r := 0; ; r++ {
				select {
				case <-stop:
					return
				default:
				}
				var its []item
				for i := 0; i < per; i++ {
					// Two partitions per request: a bundled push.
					its = append(its, it("drain", fmt.Sprintf("p%d", i%2), fmt.Sprintf("w%d-r%d-i%d", w, r, i)))
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				sent := time.Now()
				res, err := cl.tryPush(ctx, "nats", items(its...))
				cancel()
				if err != nil {
					// The broker is going away (no responders, closed
					// connection, timeout): this producer is done.
					afterStopErrs.Add(1)
					f := failure{sent: sent, err: err}
					for _, x := range its {
						f.txns = append(f.txns, x["transactionId"].(string))
					}
					mu.Lock()
					failures = append(failures, f)
					mu.Unlock()
					return
				}
				mu.Lock()
				for _, rep := range res.Items {
					answered[rep.TransactionID] = rep.Status
					if rep.Status == "queued" {
						queuedN.Add(1)
					}
				}
				mu.Unlock()
			}
		}(w)
	}
	defer stopLoad()

	eventually(t, 20*time.Second, 20*time.Millisecond, "load running", func() (bool, string) {
		n := queuedN.Load()
		mu.Lock()
		defer mu.Unlock()
		if len(failures) > 0 {
			// Before Stop every request must be answered.
			t.Fatalf("a push failed before Stop was called (%d queued so far): %v", n, failures[0].err)
		}
		return n >= 100, fmt.Sprintf("%d queued", n)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stopStart := time.Now()
	if err := e.b.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
	t.Logf("Stop took %v with %d items queued before", time.Since(stopStart), queuedN.Load())

	// Wait for the producers: their requests end once NATS is gone.
	done := make(chan struct{})
	go func() { stopLoad(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("producers still blocked 30 s after Stop")
	}

	// The broker's pool is closed: read with a fresh one.
	pool, err := pgxpool.New(context.Background(), e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	counts := txnCounts(dbFrames(t, pool, "drain", ""))
	mu.Lock()
	defer mu.Unlock()
	queued := 0
	for txn, st := range answered {
		if st == "queued" {
			queued++
			eq(t, 1, counts[txn], "copies of %s (answered queued)", txn)
		}
	}
	for txn, c := range counts {
		if c != 1 {
			t.Fatalf("%s stored %d times", txn, c)
		}
	}
	t.Logf("%d items answered queued, %d stored, %d requests failed around Stop", queued, len(counts), afterStopErrs.Load())
	for _, f := range failures {
		stored := 0
		for _, txn := range f.txns {
			stored += counts[txn]
		}
		t.Logf("request sent %v relative to Stop failed with %v; %d of its %d items are stored", f.sent.Sub(stopStart), f.err, stored, len(f.txns))
		// Stop drains: a request that was in flight when Stop began and
		// whose items were committed must have been answered.
		if stored > 0 && f.sent.Before(stopStart) {
			t.Errorf("drain: a request sent %v before Stop was committed (%d of %d items stored) but never answered (client got %v)", stopStart.Sub(f.sent), stored, len(f.txns), f.err)
		}
	}
	if queued == 0 {
		t.Fatal("no item answered queued")
	}
}

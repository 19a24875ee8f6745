package broker

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricValue reads one sample (name with its labels, as printed) from the
// broker's /metrics; -1 when absent.
func (e *env) metricValue(t testing.TB, sample string) float64 {
	t.Helper()
	resp, err := e.hc.Get(e.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("/metrics %s: %q", sample, v)
			}
			return f
		}
	}
	return -1
}

// TestStuckPartitionLock: a partition whose row lock another session holds
// (SPEC.md §3, QUEEN_LOCK_TIMEOUT) answers its items failed with the
// retryable code lock_timeout, a request bundling it with another partition
// gets the other partition's items queued, the lock timeouts are counted in
// /metrics, and once the lock is released the retry is queued for the stuck
// partition and duplicate for the item that was stored.
func TestStuckPartitionLock(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.LockTimeout = 300 * time.Millisecond })
	e.pushOK(t, "http", items(it("locks", "stuck", "warm-s"), it("locks", "free", "warm-f")), 2)
	if v := e.metricValue(t, `queen_lock_timeouts_total{op="push"}`); v != 0 {
		t.Fatalf("lock timeouts before any lock was held: %v, want 0", v)
	}

	ctx := context.Background()
	tx, err := e.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	tag, err := tx.Exec(ctx, `SELECT 1 FROM queen.partition_ends e JOIN queen.partitions p ON p.id = e.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = 'locks' AND p.name = 'stuck' FOR UPDATE OF e`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("hold the partition's write lock: %v (%d rows)", err, tag.RowsAffected())
	}

	bodies := map[string][]byte{}
	for _, via := range transports {
		// Only the stuck partition: every item failed, 503.
		r := e.pushR(t, via, items(it("locks", "stuck", "alone-"+via)))
		eq(t, http.StatusServiceUnavailable, r.Status, "%s: status of a push to the stuck partition alone", via)
		if len(r.Items) != 1 || r.Items[0].Status != "failed" || r.Items[0].Code != "lock_timeout" {
			t.Fatalf("%s: push to the stuck partition: %s", via, clip(r.Raw))
		}

		// Bundled with a free partition: its items are queued.
		body := items(it("locks", "stuck", "s1-"+via), it("locks", "free", "f1-"+via), it("locks", "stuck", "s2-"+via))
		bodies[via] = body
		got := e.pushOK(t, via, body, 3)
		for _, i := range []int{0, 2} {
			if got[i].Status != "failed" || got[i].Code != "lock_timeout" {
				t.Fatalf("%s: item %d of the stuck partition: %+v, want failed/lock_timeout", via, i, got[i])
			}
		}
		eq(t, "queued", got[1].Status, "%s: the free partition's item", via)
	}
	if v := e.metricValue(t, `queen_lock_timeouts_total{op="push"}`); v < 2 {
		t.Fatalf("queen_lock_timeouts_total{op=\"push\"} = %v after the stuck pushes, want at least 2", v)
	}
	if v := e.metricValue(t, `queen_lock_wait_seconds_count{op="push"}`); v < 3 {
		t.Fatalf("queen_lock_wait_seconds_count{op=\"push\"} = %v, want at least 3", v)
	}

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, via := range transports {
		got := e.pushOK(t, via, bodies[via], 3)
		eq(t, "queued", got[0].Status, "%s: retry of the stuck partition's first item", via)
		eq(t, "queued", got[2].Status, "%s: retry of the stuck partition's second item", via)
		eq(t, "duplicate", got[1].Status, "%s: retry of the item stored while the lock was held", via)
	}
}

package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/queen-mq/queen-go/transport/client"
)

// withPayload is it() with an explicit payload.
func withPayload(queue, partition, txn string, payload any) item {
	m := it(queue, partition, txn)
	m["payload"] = payload
	return m
}

// mismatchFlags reads "payloadMismatch" of every element of a push reply:
// absent (nil), or its JSON value.
func mismatchFlags(t testing.TB, raw []byte) []any {
	t.Helper()
	var els []map[string]any
	if err := json.Unmarshal(raw, &els); err != nil {
		t.Fatalf("push reply %s: %v", clip(raw), err)
	}
	out := make([]any, len(els))
	for i, el := range els {
		out[i] = el["payloadMismatch"]
	}
	return out
}

// pushRaw pushes and requires 201 with n replies; it returns the replies and
// the raw body.
func (e *env) pushRaw(t testing.TB, via string, body []byte, n int) ([]reply, []byte) {
	t.Helper()
	r := e.pushR(t, via, body)
	if r.Status != http.StatusCreated || len(r.Items) != n {
		t.Fatalf("push via %s: status %d, %d replies (want 201, %d): %s", via, r.Status, len(r.Items), n, clip(r.Raw))
	}
	return r.Items, r.Raw
}

// TestDedupCheckPayload (SPEC.md §3, §6): with dedupCheckPayload on, a
// duplicate whose payload differs from the original's is still a duplicate
// with the original's message id, nothing is written, and its verdict
// carries "payloadMismatch":true, counted per queue in /metrics; the same
// payload, or the option off, gives no field at all. Over HTTP and NATS.
func TestDedupCheckPayload(t *testing.T) {
	e := startEnv(t, nil)
	for _, via := range transports {
		t.Run(via, func(t *testing.T) {
			on, off := "pm-on-"+via, "pm-off-"+via
			counter := fmt.Sprintf(`queen_dedup_payload_mismatch_total{queue=%q}`, on)

			// The option through configure: echoed, reported as changed,
			// visible in GET queue and in the listing.
			m := e.configureOK(t, via, marshal(map[string]any{"queue": on, "options": map[string]any{"dedupCheckPayload": true}}))
			if opts := m["options"].(map[string]any); opts["dedupCheckPayload"] != true {
				t.Fatalf("configure reply options: %v", opts)
			}
			if ch, _ := m["changed"].(map[string]any); ch["dedupCheckPayload"] == nil {
				t.Fatalf("configure reply changed: %v", m["changed"])
			}
			eq(t, true, e.queueOption(t, via, on, "dedupCheckPayload"), "GET options.dedupCheckPayload")
			st, b := e.httpDo(t, http.MethodGet, "/api/v1/resources/queues", nil)
			var list struct {
				Queues []struct {
					Name    string         `json:"name"`
					Options map[string]any `json:"options"`
				} `json:"queues"`
			}
			if err := json.Unmarshal(b, &list); st != http.StatusOK || err != nil {
				t.Fatalf("list queues: %d %s %v", st, clip(b), err)
			}
			found := false
			for _, q := range list.Queues {
				if q.Name == on {
					found = true
					eq(t, true, q.Options["dedupCheckPayload"], "listing options.dedupCheckPayload")
				}
			}
			if !found {
				t.Fatalf("queue %s not in the listing %s", on, clip(b))
			}
			e.configureOK(t, via, marshal(map[string]any{"queue": off}))
			eq(t, false, e.queueOption(t, via, off, "dedupCheckPayload"), "the default")

			for _, q := range []string{on, off} {
				orig, _ := e.pushRaw(t, via, items(withPayload(q, "p", "order-1", map[string]any{"amount": 10}), withPayload(q, "p", "order-2", "two")), 2)
				wantStatuses(t, orig, "queued", "queued")
				before := e.stats(t, q)

				// Same payload, different payload, and in one request a new
				// id repeated with another payload, then with the same.
				rs, raw := e.pushRaw(t, via, items(
					withPayload(q, "p", "order-1", map[string]any{"amount": 10}),
					withPayload(q, "p", "order-2", "TWO"),
					withPayload(q, "p", "order-3", []int{1}),
					withPayload(q, "p", "order-3", []int{2}),
					withPayload(q, "p", "order-3", []int{1}),
					withPayload(q, "p", "order-2", "two"),
				), 6)
				wantStatuses(t, rs, "duplicate", "duplicate", "queued", "duplicate", "duplicate", "duplicate")
				eq(t, orig[0].MessageID, rs[0].MessageID, "%s: duplicate answers the original id", q)
				eq(t, orig[1].MessageID, rs[1].MessageID, "%s: a mismatching duplicate answers the original id", q)
				eq(t, rs[2].MessageID, rs[3].MessageID, "%s: an in-request repeat echoes its leader", q)
				want := []any{nil, true, nil, true, nil, nil}
				if q == off {
					want = []any{nil, nil, nil, nil, nil, nil}
				}
				if got := mismatchFlags(t, raw); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%s: payloadMismatch per item = %v, want %v (reply %s)", q, got, want, clip(raw))
				}
				after := e.stats(t, q)
				eq(t, before.Messages+1, after.Messages, "%s: only order-3 was stored", q)
				eq(t, before.Segments+1, after.Segments, "%s: one new segment", q)
				if stored := txnCounts(e.frames(t, q, "p")); stored["order-1"] != 1 || stored["order-2"] != 1 || stored["order-3"] != 1 {
					t.Fatalf("%s: stored %v", q, stored)
				}
				for _, f := range e.frames(t, q, "p") {
					if f.TransactionID == "order-2" && string(f.Payload) != `"two"` {
						t.Fatalf("%s: the original's payload was replaced: %s", q, f.Payload)
					}
				}
			}
			eq(t, 2.0, e.metricValue(t, counter), "%s", counter)
			eq(t, -1.0, e.metricValue(t, fmt.Sprintf(`queen_dedup_payload_mismatch_total{queue=%q}`, off)), "no series for a queue without the option")

			// The Go client's verdict type carries it.
			c := client.NewNATS(e.nc)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got, err := c.Push(ctx, []client.PushItem{
				{Queue: on, Partition: "p", TransactionID: "order-1", Payload: json.RawMessage(`{"amount":11}`)},
				{Queue: on, Partition: "p", TransactionID: "order-1", Payload: json.RawMessage(`{"amount":10}`)},
			})
			if err != nil || len(got) != 2 {
				t.Fatalf("client push: %v %v", got, err)
			}
			if got[0].Status != "duplicate" || !got[0].PayloadMismatch || got[1].PayloadMismatch || got[0].MessageID != orig0(t, e, on) {
				t.Fatalf("client verdicts: %+v", got)
			}
			eq(t, 3.0, e.metricValue(t, counter), "%s after the client's push", counter)

			// A wrong type is refused, naming the option.
			st, _, eb := e.configure(t, via, marshal(map[string]any{"queue": on, "options": map[string]any{"dedupCheckPayload": "yes"}}))
			eq(t, http.StatusBadRequest, st, "status of a string dedupCheckPayload")
			eq(t, "invalid_option", eb.Code, "code")
			eq(t, "options.dedupCheckPayload", eb.Field, "field")
		})
	}
}

// orig0 is the message id stored for order-1 of queue q, partition p.
func orig0(t testing.TB, e *env, q string) string {
	t.Helper()
	for _, f := range e.frames(t, q, "p") {
		if f.TransactionID == "order-1" {
			return f.MessageID.String()
		}
	}
	t.Fatalf("order-1 not stored in %s", q)
	return ""
}

// TestClusterPayloadMismatchThroughAnotherBroker: the mark survives the hop
// from the entry broker to the partition's owner (SPEC.md §6, §9), and is
// counted where the push entered.
func TestClusterPayloadMismatchThroughAnotherBroker(t *testing.T) {
	t.Parallel()
	envs := startCluster(t, 2, 6*time.Second) // owners keep their shards even if a renew tick is late
	eventually(t, 30*time.Second, 20*time.Millisecond, "two brokers share the shards", func() (bool, string) { return settled(t, envs, 2) })
	const q = "pm-cluster"
	envs[0].configureOK(t, "http", marshal(map[string]any{"queue": q, "options": map[string]any{"dedupCheckPayload": true}}))
	part, _ := partitionOwnedBy(t, envs[1], q, "own")
	first := envs[0].pushOK(t, "nats", items(withPayload(q, part, "x", 1)), 1)
	wantStatuses(t, first, "queued")
	for _, via := range transports {
		rs, raw := envs[0].pushRaw(t, via, items(withPayload(q, part, "x", 2), withPayload(q, part, "x", 1)), 2)
		wantStatuses(t, rs, "duplicate", "duplicate")
		eq(t, first[0].MessageID, rs[0].MessageID, "original id through the hop")
		if got := mismatchFlags(t, raw); got[0] != true || got[1] != nil {
			t.Fatalf("via %s through the owner: payloadMismatch %v, reply %s", via, got, clip(raw))
		}
	}
	if s := envs[0].b.router.Stats(); s.Remote == 0 {
		t.Fatalf("entry broker routed %+v: want hops to the owner", s)
	}
	// Counted where each push entered (a NATS request may be served by
	// either broker of the queue group): 2 in all.
	total := 0.0
	for _, e := range envs {
		if v := e.metricValue(t, fmt.Sprintf(`queen_dedup_payload_mismatch_total{queue=%q}`, q)); v > 0 {
			total += v
		}
	}
	eq(t, 2.0, total, "mismatches counted over the entry brokers")
}

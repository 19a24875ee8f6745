package broker

// Parity with the upstream Queen SDKs and tools beyond the message plane's
// shapes (sdkwire_test.go): payload sizes and the NATS micro stats.

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/micro"

	queen "github.com/queen-mq/queen-go"
)

// natsPop pops over queen.v1.pop; nil when nothing is available.
func natsPop(t *testing.T, e *env, req map[string]any) *queen.PopResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := e.do(ctx, "nats", "", "", "queen.v1.pop", marshal(req), http.StatusOK)
	if err != nil {
		t.Fatalf("NATS pop: %v", err)
	}
	if r.Status != http.StatusOK {
		t.Fatalf("NATS pop: status %d: %s", r.Status, clip(r.Raw))
	}
	if len(r.Raw) == 0 {
		return nil
	}
	var out queen.PopResult
	if err := json.Unmarshal(r.Raw, &out); err != nil {
		t.Fatalf("NATS pop reply %s: %v", clip(r.Raw), err)
	}
	return &out
}

// TestSDKWireLargePayload: a document of 1 MiB of data, wrapped the way the
// SDKs wrap it ({"blob":"..."} as the item's payload: 1,048,587 bytes of
// JSON), is accepted with the default QUEEN_MAX_PAYLOAD_BYTES (4 MiB, SPEC
// §10) over HTTP and NATS and pops back intact over both; payloads of 3 MiB
// fill a pop reply up to the NATS max_payload and no further.
func TestSDKWireLargePayload(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	c := newSDKClient(t, e)
	blob := strings.Repeat("x", 1<<20)

	// HTTP, through the SDK's push and pop.
	push := sdkMustPush(t, c, "sdk-big", "", []any{map[string]any{"blob": blob}}, "")
	if n := len(c.lastBody()); n < 1<<20 {
		t.Fatalf("request body %d bytes", n)
	}
	msgs := sdkMustPop(t, c, sdkPop{Queue: "sdk-big"})
	if len(msgs) != 1 || msgs[0].TransactionID != push[0].TransactionID || msgs[0].Data["blob"] != blob {
		t.Fatalf("HTTP pop of the 1 MiB payload: %d message(s)", len(msgs))
	}
	sdkMustAck(t, c, msgs, true, "", "")

	// NATS, the same item body.
	txn := uuid.NewString()
	body := marshal(map[string]any{"items": []any{map[string]any{"queue": "sdk-big", "partition": "Default",
		"payload": map[string]any{"blob": blob}, "transactionId": txn}}})
	if len(body) < 1<<20 {
		t.Fatalf("body %d bytes", len(body))
	}
	items := e.pushOK(t, "nats", body, 1)
	eq(t, "queued", items[0].Status, "NATS push verdict")
	res := natsPop(t, e, map[string]any{"queue": "sdk-big"})
	if res == nil || len(res.Messages) != 1 || res.Messages[0].TransactionID != txn {
		t.Fatalf("NATS pop of the 1 MiB payload: %+v", res)
	}
	var got struct{ Blob string }
	if err := json.Unmarshal(res.Messages[0].Data, &got); err != nil || got.Blob != blob {
		t.Fatalf("NATS pop: payload of %d bytes, blob intact %v (%v)", len(res.Messages[0].Data), got.Blob == blob, err)
	}

	// Six 3 MiB payloads (two pushes, each a 9 MiB body over NATS): one pop
	// of batch 10 returns what fits below the NATS max_payload (five), the
	// next pop the sixth.
	big := strings.Repeat("y", 3<<20)
	for range 2 {
		var its []any
		for range 3 {
			its = append(its, map[string]any{"queue": "sdk-big3", "payload": map[string]any{"blob": big}})
		}
		e.pushOK(t, "nats", marshal(map[string]any{"items": its}), 3)
	}
	first := natsPop(t, e, map[string]any{"queue": "sdk-big3", "batch": 10, "autoAck": true})
	if first == nil || len(first.Messages) != 5 {
		t.Fatalf("first pop of 6 × 3 MiB: %v", first != nil && len(first.Messages) > 0)
	}
	second := natsPop(t, e, map[string]any{"queue": "sdk-big3", "batch": 10, "autoAck": true})
	if second == nil || len(second.Messages) != 1 || second.Messages[0].Offset != 5 {
		t.Fatalf("second pop: %+v", second)
	}
	for _, m := range append(first.Messages, second.Messages...) {
		if len(m.Data) < 3<<20 {
			t.Fatalf("offset %d: payload of %d bytes", m.Offset, len(m.Data))
		}
	}
}

// TestNATSMicroStatsCountErrors: `nats micro stats queen` ($SRV.STATS.queen)
// counts the requests answered with Nats-Service-Error-Code, whether the
// error is found before the request is handed to a worker (bad input) or
// after (a lease that is not live).
func TestNATSMicroStatsCountErrors(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	stats := func() map[string]*micro.EndpointStats {
		t.Helper()
		msg, err := e.nc.Request("$SRV.STATS.queen", nil, 10*time.Second)
		if err != nil {
			t.Fatalf("$SRV.STATS.queen: %v", err)
		}
		var s micro.Stats
		if err := json.Unmarshal(msg.Data, &s); err != nil {
			t.Fatalf("stats reply %s: %v", msg.Data, err)
		}
		eq(t, "queen", s.Name, "service name")
		out := map[string]*micro.EndpointStats{}
		for _, ep := range s.Endpoints {
			out[ep.Name] = ep
		}
		return out
	}
	before := stats()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// 400: a push without a queue.
	r, err := e.do(ctx, "nats", "", "", "queen.v1.push", []byte(`{"items":[{"partition":"p"}]}`), http.StatusCreated)
	if err != nil || r.Status != http.StatusBadRequest {
		t.Fatalf("bad push: %v %d", err, r.Status)
	}
	// 409: extending a lease nobody holds (found by PostgreSQL).
	r, err = e.do(ctx, "nats", "", "", "queen.v1.lease.extend", marshal(map[string]any{"leaseId": uuid.NewString()}), http.StatusOK)
	if err != nil || r.Status != http.StatusConflict {
		t.Fatalf("lease extend: %v %d %s", err, r.Status, r.Raw)
	}
	// A success is a request, not an error.
	e.pushOK(t, "nats", []byte(`{"items":[{"queue":"stats-q"}]}`), 1)
	after := stats()
	for _, c := range []struct {
		ep           string
		reqs, errors int
		last         string
	}{{"push", 2, 1, "queue"}, {"lease_extend", 1, 1, "not live"}} {
		a, b := after[c.ep], before[c.ep]
		if a == nil || b == nil {
			t.Fatalf("endpoint %q missing from the stats", c.ep)
		}
		if a.NumRequests-b.NumRequests != c.reqs || a.NumErrors-b.NumErrors != c.errors || !strings.Contains(a.LastError, c.last) {
			t.Fatalf("%s: requests %d->%d, errors %d->%d, last error %q; want +%d requests, +%d errors, last error naming %q",
				c.ep, b.NumRequests, a.NumRequests, b.NumErrors, a.NumErrors, a.LastError, c.reqs, c.errors, c.last)
		}
	}
}

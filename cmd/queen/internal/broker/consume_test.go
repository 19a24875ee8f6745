package broker

// End-to-end consumption (SPEC.md §4) over the Queen HTTP routes and the
// NATS client: pop, ack as an offset commit, leases, retries, DLQ, groups,
// subscriptions, long polls and administration.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/client"
)

type popReply struct {
	Messages []queen.Message `json:"messages"`
	LeaseID  *string         `json:"leaseId"`
}

// httpDo sends an HTTP request and returns status and body.
func (e *env) httpDo(t testing.TB, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(marshal(body))
	}
	req, err := http.NewRequest(method, e.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// popHTTP pops through GET /api/v1/pop/...; q holds the query.
func (e *env) popHTTP(t testing.TB, queue, partition string, q url.Values) popReply {
	t.Helper()
	path := "/api/v1/pop/queue/" + url.PathEscape(queue)
	if partition != "" {
		path += "/partition/" + url.PathEscape(partition)
	}
	st, b := e.httpDo(t, http.MethodGet, path+"?"+q.Encode(), nil)
	var out popReply
	switch st {
	case http.StatusNoContent:
		if len(b) != 0 {
			t.Fatalf("204 with a body: %s", b)
		}
	case http.StatusOK:
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("pop reply %s: %v", b, err)
		}
		if len(out.Messages) == 0 {
			t.Fatalf("200 without messages: %s", b)
		}
	default:
		t.Fatalf("pop: status %d: %s", st, b)
	}
	return out
}

func ackBatch(t testing.TB, e *env, group string, acks ...map[string]any) []queen.AckResult {
	t.Helper()
	st, b := e.httpDo(t, http.MethodPost, "/api/v1/ack/batch", map[string]any{"acknowledgments": acks, "consumerGroup": group})
	if st != http.StatusOK {
		t.Fatalf("ack batch: status %d: %s", st, b)
	}
	var out []queen.AckResult
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("ack reply %s: %v", b, err)
	}
	return out
}

func ackOf(m queen.Message, status string) map[string]any {
	a := map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "status": status}
	if m.LeaseID != nil {
		a["leaseId"] = *m.LeaseID
	}
	return a
}

func results(rs []queen.AckResult) []queen.AckOutcome {
	out := make([]queen.AckOutcome, len(rs))
	for i, r := range rs {
		out[i] = r.Result
	}
	return out
}

func txnsOf(ms []queen.Message) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = m.TransactionID
	}
	return strings.Join(s, ",")
}

func vals(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

func TestConsumeOffsetCommit(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	e.pushOK(t, "http", items(it("oc", "p", "m1"), it("oc", "p", "m2"), it("oc", "p", "m3")), 3)
	got := e.popHTTP(t, "oc", "p", vals("batch", "2"))
	if txnsOf(got.Messages) != "m1,m2" || got.LeaseID == nil {
		t.Fatalf("pop = %s lease %v", txnsOf(got.Messages), got.LeaseID)
	}
	m := got.Messages[0]
	if m.Offset != 0 || m.Queue != "oc" || m.Partition != "p" || m.ConsumerGroup != queen.DefaultConsumerGroup || string(m.Data) != "{}" || m.ID == "" {
		t.Fatalf("message fields: %+v", m)
	}
	// Single ack route (Queen's POST /api/v1/ack): ack the second.
	st, b := e.httpDo(t, http.MethodPost, "/api/v1/ack", ackOf(got.Messages[1], "completed"))
	var one queen.AckResult
	if st != http.StatusOK || json.Unmarshal(b, &one) != nil || one.Result != queen.Acked || !one.Success {
		t.Fatalf("ack: %d %s", st, b)
	}
	res := ackBatch(t, e, "", ackOf(got.Messages[0], "completed"))
	if res[0].Result != queen.Stale || !res[0].Success {
		t.Fatalf("the first is completed by the offset commit: %+v", res[0])
	}
	got = e.popHTTP(t, "oc", "", vals("batch", "5"))
	if txnsOf(got.Messages) != "m3" {
		t.Fatalf("pop after ack = %s", txnsOf(got.Messages))
	}
}

func TestConsumeUnresolvableAndAckByOffset(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	res := ackBatch(t, e, "", map[string]any{"transactionId": "never", "partitionId": "0190a4b6-0000-7000-8000-000000000000"})
	if res[0].Result != queen.Unresolvable || res[0].Success || res[0].Error == "" {
		t.Fatalf("never-pushed id: %+v", res[0])
	}
	e.configureOK(t, "http", []byte(`{"queue":"ur","options":{"leaseTime":1}}`))
	e.pushOK(t, "http", items(it("ur", "p", "m1")), 1)
	got := e.popHTTP(t, "ur", "p", nil)
	m := got.Messages[0]
	// Its hashes age out of the sidecar (the segment's and the per-hash
	// rows, as if past every floor).
	if _, err := e.db.Exec(context.Background(), `UPDATE queen.segments SET hashes = NULL WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1)`, m.PartitionID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec(context.Background(), `DELETE FROM queen.log_txn_hashes WHERE partition_id = $1`, m.PartitionID); err != nil {
		t.Fatal(err)
	}
	res = ackBatch(t, e, "", ackOf(m, "completed"))
	if res[0].Result != queen.Unresolvable || res[0].Success {
		t.Fatalf("aged-out id: %+v", res[0])
	}
	// Redelivered after its lease (1 s), which expired unacked: one failed
	// delivery (SPEC.md §4). A long poll sees it. The redelivery is leased
	// for 30 s (configured now; the live lease keeps its expiry), so the ack
	// below lands inside it even on a busy machine.
	e.configureOK(t, "http", []byte(`{"queue":"ur","options":{"leaseTime":30}}`))
	var again popReply
	for deadline := time.Now().Add(30 * time.Second); len(again.Messages) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the lease never expired")
		}
		again = e.popHTTP(t, "ur", "p", vals("wait", "true", "timeout", "10000"))
	}
	if txnsOf(again.Messages) != "m1" || again.Messages[0].RetryCount != 1 {
		t.Fatalf("redelivery: %+v", again.Messages)
	}
	// Ack by offset never ages out.
	res = ackBatch(t, e, "", map[string]any{"partitionId": m.PartitionID, "offset": 0, "leaseId": *again.LeaseID})
	if res[0].Result != queen.Acked {
		t.Fatalf("ack by offset: %+v", res[0])
	}
}

func TestConsumeFailedStopsTheCursor(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	e.pushOK(t, "http", items(it("fc", "p", "m1"), it("fc", "p", "m2"), it("fc", "p", "m3")), 3)
	got := e.popHTTP(t, "fc", "p", vals("batch", "3"))
	res := ackBatch(t, e, "", ackOf(got.Messages[0], "completed"), ackOf(got.Messages[1], "failed"), ackOf(got.Messages[2], "completed"))
	want := []queen.AckOutcome{queen.Acked, queen.RetryScheduled, queen.RetryScheduled}
	if g := results(res); !equalOutcomes(g, want) || res[2].Success {
		t.Fatalf("results = %v (m3 success %v), want %v", g, res[2].Success, want)
	}
	again := e.popHTTP(t, "fc", "p", vals("batch", "3"))
	if txnsOf(again.Messages) != "m2,m3" || again.Messages[0].RetryCount != 1 {
		t.Fatalf("redelivered %s (retry %d)", txnsOf(again.Messages), again.Messages[0].RetryCount)
	}
}

func equalOutcomes(a, b []queen.AckOutcome) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestConsumeLeases(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	// A 4 s lease: the three pops and the extend below must all land while
	// it is live, which a busy machine does within 4 s (2 s was too short).
	e.configureOK(t, "http", []byte(`{"queue":"ls","options":{"leaseTime":4}}`))
	e.pushOK(t, "http", items(it("ls", "p", "m1")), 1)
	first := e.popHTTP(t, "ls", "p", nil)
	if len(e.popHTTP(t, "ls", "p", nil).Messages) != 0 {
		t.Fatal("a second consumer of the group got a leased partition")
	}
	if len(e.popHTTP(t, "ls", "", nil).Messages) != 0 {
		t.Fatal("a wildcard consumer of the group got a leased partition")
	}
	if other := e.popHTTP(t, "ls", "p", vals("consumerGroup", "other")); txnsOf(other.Messages) != "m1" {
		t.Fatal("another group is blocked by the lease")
	}
	// Extend keeps it past its original expiry.
	st, b := e.httpDo(t, http.MethodPost, "/api/v1/lease/"+*first.LeaseID+"/extend", map[string]any{"seconds": 6})
	var ext struct {
		NewExpiresAt time.Time `json:"newExpiresAt"`
	}
	if st != http.StatusOK || json.Unmarshal(b, &ext) != nil {
		t.Fatalf("extend: %d %s", st, b)
	}
	orig := first.Messages[0].CreatedAt.Add(4 * time.Second)
	if !ext.NewExpiresAt.After(orig.Add(time.Second)) {
		t.Fatalf("extended to %v, original expiry about %v", ext.NewExpiresAt, orig)
	}
	// The lease expires: the message is delivered again, its expiry counted
	// once as a failed delivery (the extension counted nothing).
	deadline := time.Now().Add(30 * time.Second)
	var again popReply
	for len(again.Messages) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the lease never expired")
		}
		again = e.popHTTP(t, "ls", "p", vals("wait", "true", "timeout", "2000"))
	}
	if !time.Now().After(ext.NewExpiresAt.Add(-200*time.Millisecond)) || again.Messages[0].RetryCount != 1 {
		t.Fatalf("redelivered before the extended expiry %v, or retry count %d (want 1)", ext.NewExpiresAt, again.Messages[0].RetryCount)
	}
	// The old lease cannot be extended any more.
	st, b = e.httpDo(t, http.MethodPost, "/api/v1/lease/"+*first.LeaseID+"/extend", map[string]any{"seconds": 10})
	if st != http.StatusConflict || !strings.Contains(string(b), "lease_invalid") {
		t.Fatalf("extend of an expired lease: %d %s", st, b)
	}
	res := ackBatch(t, e, "", ackOf(first.Messages[0], "completed"))
	if res[0].Result != queen.LeaseInvalid {
		t.Fatalf("ack with the expired lease: %+v", res[0])
	}
}

func TestConsumeRetryLimitAndDLQ(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	e.configureOK(t, "http", []byte(`{"queue":"rl","options":{"retryLimit":2}}`))
	e.pushOK(t, "http", items(it("rl", "p", "poison"), it("rl", "p", "next")), 2)
	for attempt := 1; attempt <= 3; attempt++ {
		got := e.popHTTP(t, "rl", "", nil)
		if txnsOf(got.Messages) != "poison" || got.Messages[0].RetryCount != attempt-1 {
			t.Fatalf("attempt %d: %s retry %d", attempt, txnsOf(got.Messages), got.Messages[0].RetryCount)
		}
		a := ackOf(got.Messages[0], "failed")
		a["error"] = "handler exploded"
		res := ackBatch(t, e, "", a)
		want := queen.RetryScheduled
		if attempt == 3 {
			want = queen.DeadLettered
		}
		if res[0].Result != want {
			t.Fatalf("attempt %d: %+v", attempt, res[0])
		}
	}
	if got := e.popHTTP(t, "rl", "", nil); txnsOf(got.Messages) != "next" {
		t.Fatalf("after the DLQ: %s", txnsOf(got.Messages))
	}
	st, b := e.httpDo(t, http.MethodGet, "/api/v1/dlq?queue=rl&consumerGroup="+url.QueryEscape(queen.DefaultConsumerGroup), nil)
	var dlq struct {
		Messages []queen.DeadLetter `json:"messages"`
		Total    int64              `json:"total"`
	}
	if st != http.StatusOK || json.Unmarshal(b, &dlq) != nil || dlq.Total != 1 {
		t.Fatalf("dlq: %d %s", st, b)
	}
	if d := dlq.Messages[0]; d.TransactionID != "poison" || d.Error != "handler exploded" || d.Attempts != 3 || d.Offset != 0 {
		t.Fatalf("dead letter: %+v", d)
	}
}

func TestConsumeGroupsAndSubscriptions(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	e.pushOK(t, "http", items(it("gs", "a", "old1"), it("gs", "b", "old2")), 2)
	for _, g := range []string{"g1", "g2"} {
		seen := map[string]bool{}
		for len(seen) < 2 {
			got := e.popHTTP(t, "gs", "", vals("consumerGroup", g, "batch", "10", "autoAck", "true"))
			if len(got.Messages) == 0 {
				t.Fatalf("group %s saw only %v", g, seen)
			}
			for _, m := range got.Messages {
				seen[m.TransactionID] = true
			}
		}
	}
	if got := e.popHTTP(t, "gs", "", vals("consumerGroup", "fresh", "subscriptionMode", "new")); len(got.Messages) != 0 {
		t.Fatalf("subscription new got the backlog: %s", txnsOf(got.Messages))
	}
	var mid time.Time
	if err := e.db.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&mid); err != nil {
		t.Fatal(err)
	}
	e.pushOK(t, "http", items(it("gs", "a", "new1")), 1)
	if got := e.popHTTP(t, "gs", "", vals("consumerGroup", "fresh")); txnsOf(got.Messages) != "new1" {
		t.Fatalf("subscription new: %s", txnsOf(got.Messages))
	}
	if got := e.popHTTP(t, "gs", "a", vals("consumerGroup", "since", "subscriptionFrom", mid.Format(time.RFC3339Nano), "batch", "10")); txnsOf(got.Messages) != "new1" {
		t.Fatalf("subscriptionFrom: %s", txnsOf(got.Messages))
	}
}

// A parked long poll is woken by a push. The poll never re-checks on its
// own within its timeout, so a reply with the message is the wake-up's doing
// (no timing is asserted: without the wake the poll would end empty).
func TestConsumeLongPollWakes(t *testing.T) {
	t.Parallel()
	e := startEnv(t, func(c *Config) { c.PollRecheck = time.Hour })
	e.pushOK(t, "http", items(it("lp", "p", "seed")), 1) // the queue exists
	e.popHTTP(t, "lp", "", vals("autoAck", "true"))
	done := make(chan popReply, 1)
	go func() { done <- e.popHTTP(t, "lp", "", vals("wait", "true", "timeout", "60000")) }()
	// Push once the poll is parked.
	waitParked(t, e)
	e.pushOK(t, "http", items(it("lp", "other", "wake")), 1)
	if r := <-done; txnsOf(r.Messages) != "wake" {
		t.Fatalf("long poll returned %q; the push did not wake it", txnsOf(r.Messages))
	}
}

func TestConsumeNATSClient(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	c := client.NewNATS(e.nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.configureOK(t, "nats", []byte(`{"queue":"nc","options":{"retryLimit":1}}`))
	var push []client.PushItem
	for _, id := range []string{"a", "b", "bad", "c"} {
		push = append(push, client.PushItem{Queue: "nc", Partition: "p", TransactionID: id})
	}
	if _, err := c.Push(ctx, push); err != nil {
		t.Fatal(err)
	}
	handled := map[string]int{}
	cctx, stop := context.WithCancel(ctx)
	err := c.Consume(cctx, client.ConsumeOptions{PopOptions: client.PopOptions{Queue: "nc", Batch: 10, TimeoutMs: 500}}, func(_ context.Context, m queen.Message) error {
		handled[m.TransactionID]++
		if m.TransactionID == "bad" {
			return errors.New("bad message")
		}
		if m.TransactionID == "c" {
			stop()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Consume: %v (handled %v)", err, handled)
	}
	if handled["a"] != 1 || handled["b"] != 1 || handled["bad"] != 2 || handled["c"] != 1 {
		t.Fatalf("handled %v", handled)
	}
	// The last ack went out before Consume returned.
	res, err := c.Pop(ctx, client.PopOptions{Queue: "nc"})
	if err != nil || len(res.Messages) != 0 {
		t.Fatalf("after consume: %v %+v", err, res.Messages)
	}
}

func TestConsumeAdmin(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	e.pushOK(t, "http", items(it("ad", "p", "a"), it("ad", "q", "b")), 2)
	st, b := e.httpDo(t, http.MethodGet, "/api/v1/resources/queues", nil)
	if st != http.StatusOK || !strings.Contains(string(b), `"name":"ad"`) || !strings.Contains(string(b), `"partitions":2`) || !strings.Contains(string(b), `"depth":2`) {
		t.Fatalf("list: %d %s", st, b)
	}
	st, b = e.httpDo(t, http.MethodPost, "/api/v1/consumer-groups/g/queues/ad/seek", map[string]any{"toEnd": true})
	if st != http.StatusOK {
		t.Fatalf("seek: %d %s", st, b)
	}
	if got := e.popHTTP(t, "ad", "", vals("consumerGroup", "g")); len(got.Messages) != 0 {
		t.Fatal("seek to end left messages")
	}
	st, b = e.httpDo(t, http.MethodDelete, "/api/v1/consumer-groups/g", nil)
	if st != http.StatusOK || !strings.Contains(string(b), `"deleted":true`) {
		t.Fatalf("delete group: %d %s", st, b)
	}
	st, b = e.httpDo(t, http.MethodDelete, "/api/v1/resources/queues/ad", nil)
	if st != http.StatusOK || !strings.Contains(string(b), `"existed":true`) {
		t.Fatalf("delete queue: %d %s", st, b)
	}
	if s := e.stats(t, "ad"); s.Queues != 0 {
		t.Fatalf("after delete: %+v", s)
	}
	st, b = e.httpDo(t, http.MethodDelete, "/api/v1/resources/queues/ad", nil)
	if st != http.StatusOK || !strings.Contains(string(b), `"existed":false`) {
		t.Fatalf("delete again: %d %s", st, b)
	}
	// Pushing to the deleted queue's name recreates it at once: the broker
	// resolves the partition again (its cached id is gone).
	if st, rs, _ := e.push(t, "http", items(it("ad", "p", "again"))); st != http.StatusCreated || rs[0].Status != "queued" {
		t.Fatalf("push after delete: %d %+v", st, rs)
	}
	// Bad input is refused with a 4xx and a JSON error.
	for _, c := range []struct {
		method, path string
		body         any
		status       int
	}{
		{http.MethodGet, "/api/v1/pop/queue/ad?batch=abc", nil, 400},
		{http.MethodGet, "/api/v1/pop/queue/ad?subscriptionFrom=yesterday", nil, 400},
		{http.MethodPost, "/api/v1/ack", map[string]any{"transactionId": "x"}, 400},
		{http.MethodPost, "/api/v1/ack", map[string]any{"transactionId": "x", "partitionId": "nope"}, 400},
		{http.MethodPost, "/api/v1/ack/batch", map[string]any{"acknowledgments": []any{map[string]any{"partitionId": "0190a4b6-0000-7000-8000-000000000000", "status": "maybe", "offset": 1}}}, 400},
		{http.MethodPost, "/api/v1/lease/not-a-uuid/extend", map[string]any{}, 400},
		{http.MethodPost, "/api/v1/consumer-groups/g/queues/ad/seek", map[string]any{}, 400},
		{http.MethodGet, "/api/v1/dlq?limit=-1", nil, 400},
		{http.MethodPut, "/api/v1/ack", nil, 405},
	} {
		st, b := e.httpDo(t, c.method, c.path, c.body)
		var eb errBody
		if st != c.status || json.Unmarshal(b, &eb) != nil || eb.Code == "" {
			t.Errorf("%s %s: %d %s, want %d with a JSON error", c.method, c.path, st, b, c.status)
		}
	}
}

// TestConsumeSubscriptionModeUpstream: upstream SDKs pop with
// subscriptionMode=from_beginning, and upstream treats every mode other than
// new, new-only and now as all: a group subscribing that way, over HTTP and
// over NATS, pops the partition from its first message, like all; the mode
// now starts at the group's first pop, like new (SPEC.md §4).
func TestConsumeSubscriptionModeUpstream(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	e.pushOK(t, "http", items(it("um", "p", "h1"), it("um", "p", "h2")), 2)
	for _, mode := range []string{"from_beginning", "all", "timestamp", "anything-else"} {
		got := e.popHTTP(t, "um", "", vals("consumerGroup", "http-"+mode, "subscriptionMode", mode, "batch", "10"))
		if txnsOf(got.Messages) != "h1,h2" {
			t.Errorf("HTTP subscriptionMode=%s: %s, want h1,h2", mode, txnsOf(got.Messages))
		}
		res := natsPop(t, e, map[string]any{"queue": "um", "consumerGroup": "nats-" + mode, "subscriptionMode": mode, "batch": 10})
		if res == nil || txnsOf(res.Messages) != "h1,h2" {
			t.Errorf("NATS subscriptionMode=%s: %+v, want h1,h2", mode, res)
		}
	}
	if got := e.popHTTP(t, "um", "", vals("consumerGroup", "late", "subscriptionMode", "now")); len(got.Messages) != 0 {
		t.Fatalf("subscriptionMode=now got the backlog: %s", txnsOf(got.Messages))
	}
	e.pushOK(t, "http", items(it("um", "p", "n1")), 1)
	if got := e.popHTTP(t, "um", "", vals("consumerGroup", "late", "batch", "10")); txnsOf(got.Messages) != "n1" {
		t.Fatalf("subscriptionMode=now after subscribing: %s", txnsOf(got.Messages))
	}
}

// A long poll parked on broker A wakes when the push enters through broker
// B (same database, same NATS): the wake-up crosses brokers over NATS.
func TestConsumeLongPollWakesAcrossBrokers(t *testing.T) {
	t.Parallel()
	a := startEnv(t, func(c *Config) { c.PollRecheck = time.Hour })
	b := startEnvOn(t, a.url, func(c *Config) { c.NATSURL = a.b.NATSURL() })
	b.pushOK(t, "http", items(it("xb", "p", "seed")), 1)
	a.popHTTP(t, "xb", "", vals("autoAck", "true"))
	done := make(chan popReply, 1)
	go func() { done <- a.popHTTP(t, "xb", "", vals("wait", "true", "timeout", "60000")) }()
	waitParked(t, a)
	b.pushOK(t, "http", items(it("xb", "q", "wake")), 1)
	// a never re-checks on its own within the poll's timeout: the message
	// can only come from the wake-up that crossed brokers.
	if r := <-done; txnsOf(r.Messages) != "wake" {
		t.Fatalf("long poll returned %q; the push on the other broker did not wake it", txnsOf(r.Messages))
	}
}

// TestConsumeRetryAckWakesAcrossBrokers: a failed ack on one broker makes
// its message deliverable again, and a long poll parked on another broker
// wakes for it (the coordinator announces it through the announcer).
func TestConsumeRetryAckWakesAcrossBrokers(t *testing.T) {
	t.Parallel()
	a := startEnv(t, func(c *Config) { c.PollRecheck = time.Hour })
	b := startEnvOn(t, a.url, func(c *Config) { c.NATSURL = a.b.NATSURL() })
	b.pushOK(t, "http", items(it("xr", "p", "again")), 1)
	got := b.popHTTP(t, "xr", "", vals())
	done := make(chan popReply, 1)
	go func() { done <- a.popHTTP(t, "xr", "", vals("wait", "true", "timeout", "60000")) }()
	waitParked(t, a)
	if res := results(ackBatch(t, b, "", ackOf(got.Messages[0], "failed"))); !equalOutcomes(res, []queen.AckOutcome{queen.RetryScheduled}) {
		t.Fatalf("ack: %v", res)
	}
	// a never re-checks on its own before the poll's timeout (when it
	// looks once more): the message can only come sooner from the wake-up
	// that crossed brokers.
	select {
	case r := <-done:
		if txnsOf(r.Messages) != "again" || r.Messages[0].RetryCount != 1 {
			t.Fatalf("long poll returned %q", txnsOf(r.Messages))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the retry ack on the other broker did not wake the long poll")
	}
}

// Several consumers of one group popping any partition at once: every
// message is delivered exactly once and everything gets acked.
func TestConsumeConcurrentConsumersExactlyOnce(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	const parts, per = 8, 50
	var push []item
	for p := 0; p < parts; p++ {
		for i := 0; i < per; i++ {
			push = append(push, it("cc", fmt.Sprintf("p%d", p), fmt.Sprintf("m%d-%d", p, i)))
		}
	}
	e.pushOK(t, "http", items(push...), parts*per)
	c := client.NewNATS(e.nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			idle := 0
			for idle < 3 && ctx.Err() == nil {
				res, err := c.Pop(ctx, client.PopOptions{Queue: "cc", Batch: 7, Wait: true, TimeoutMs: 300})
				if err != nil {
					t.Error(err)
					return
				}
				if len(res.Messages) == 0 {
					idle++
					continue
				}
				idle = 0
				acks := make([]client.Ack, len(res.Messages))
				mu.Lock()
				for i, m := range res.Messages {
					seen[m.TransactionID]++
					acks[i] = client.AckFor(m)
				}
				mu.Unlock()
				out, err := c.Ack(ctx, "", acks)
				if err != nil {
					t.Error(err)
					return
				}
				for _, r := range out {
					if r.Result != queen.Acked {
						t.Errorf("ack: %+v", r)
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != parts*per {
		t.Fatalf("delivered %d distinct messages, want %d", len(seen), parts*per)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("%s delivered %d times", id, n)
		}
	}
}

// A group that subscribes "new" before the queue has any partition gets
// what is pushed after its first pop (the subscription is recorded then).
func TestConsumeSubscribeNewBeforeAnyPartition(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	e.configureOK(t, "http", []byte(`{"queue":"early","options":{}}`))
	done := make(chan popReply, 1)
	go func() {
		done <- e.popHTTP(t, "early", "", vals("consumerGroup", "gn", "subscriptionMode", "new", "wait", "true", "timeout", "10000"))
	}()
	waitParked(t, e)
	e.pushOK(t, "http", items(it("early", "p", "after")), 1)
	select {
	case r := <-done:
		if txnsOf(r.Messages) != "after" {
			t.Fatalf("got %q, want the message pushed after the group's first pop", txnsOf(r.Messages))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the long poll never returned")
	}
}

// waitParked waits (polling, with a deadline) until a long poll is parked
// on e's broker.
func waitParked(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.b.cons.Parked() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the long poll never parked")
		}
		time.Sleep(time.Millisecond)
	}
}

// A consumer that crashes on a message never acks it: every lease expiry
// counts one failed delivery (SPEC.md §4), so after retryLimit+1 deliveries
// the message is dead-lettered with "lease expired" and the cursor moves
// past it. The pops alternate between two brokers and between HTTP and NATS:
// the count lives in the consumer row, whoever pops next.
func TestConsumeLeaseExpiryDeadLetters(t *testing.T) {
	t.Parallel()
	a := startEnv(t, nil)
	b := startEnvOn(t, a.url, func(c *Config) { c.NATSURL = a.b.NATSURL() })
	a.configureOK(t, "http", []byte(`{"queue":"crash","options":{"leaseTime":1,"retryLimit":2}}`))
	a.pushOK(t, "http", items(it("crash", "p", "poison"), it("crash", "p", "next")), 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clients := []*client.Client{client.NewNATS(a.nc), client.NewNATS(b.nc)}
	pop := func(n int) []queen.Message {
		if n%2 == 0 {
			e := []*env{a, b}[n/2%2]
			return e.popHTTP(t, "crash", "p", vals("wait", "true", "timeout", "2000")).Messages
		}
		res, err := clients[n/2%2].Pop(ctx, client.PopOptions{Queue: "crash", Partition: "p", Wait: true, TimeoutMs: 2000})
		if err != nil {
			t.Fatalf("NATS pop: %v", err)
		}
		return res.Messages
	}
	var deliveries []int // the retry count of each delivery of "poison"
	var next []queen.Message
	for n := 0; next == nil; n++ {
		if ctx.Err() != nil {
			t.Fatalf("the poison message was never passed (deliveries %v)", deliveries)
		}
		ms := pop(n)
		switch {
		case len(ms) == 0: // the lease is still live
		case ms[0].TransactionID == "poison":
			deliveries = append(deliveries, ms[0].RetryCount) // and crash: no ack
		default:
			next = ms
		}
	}
	if fmt.Sprint(deliveries) != "[0 1 2]" || txnsOf(next) != "next" || next[0].RetryCount != 0 {
		t.Fatalf("poison delivered with retry counts %v (want [0 1 2]), then %s retry %d", deliveries, txnsOf(next), next[0].RetryCount)
	}
	st, body := b.httpDo(t, http.MethodGet, "/api/v1/dlq?queue=crash&consumerGroup="+url.QueryEscape(queen.DefaultConsumerGroup), nil)
	var dlq struct {
		Messages []queen.DeadLetter `json:"messages"`
		Total    int64              `json:"total"`
	}
	if st != http.StatusOK || json.Unmarshal(body, &dlq) != nil || dlq.Total != 1 {
		t.Fatalf("dlq: %d %s", st, body)
	}
	if d := dlq.Messages[0]; d.TransactionID != "poison" || d.Error != "lease expired" || d.Attempts != 3 || d.Offset != 0 {
		t.Fatalf("dead letter: %+v", d)
	}
	if res := ackBatch(t, a, "", ackOf(next[0], "completed")); res[0].Result != queen.Acked {
		t.Fatalf("ack of next: %+v", res[0])
	}
}

// A consumer that acks part of its span and then crashes: the expired rest
// holds two unacked messages, so neither is charged (SPEC.md §4), and the
// next deliveries hold one message each until the expired range is passed,
// over NATS.
func TestConsumeLeaseExpirySpanBisected(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	c := client.NewNATS(e.nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// 3 s: the ack of "a" must land inside the first lease, even on a busy
	// machine; the expiry after it is waited for.
	e.configureOK(t, "nats", []byte(`{"queue":"part","options":{"leaseTime":3}}`))
	var push []client.PushItem
	for _, id := range []string{"a", "b", "c", "d"} {
		push = append(push, client.PushItem{Queue: "part", Partition: "p", TransactionID: id})
	}
	if _, err := c.Push(ctx, push); err != nil {
		t.Fatal(err)
	}
	first, err := c.Pop(ctx, client.PopOptions{Queue: "part", Batch: 3})
	if err != nil || txnsOf(first.Messages) != "a,b,c" {
		t.Fatalf("pop: %v %s", err, txnsOf(first.Messages))
	}
	res, err := c.Ack(ctx, "", []client.Ack{client.AckFor(first.Messages[0])})
	if err != nil || res[0].Result != queen.Acked {
		t.Fatalf("ack a: %v %+v", err, res)
	}
	var got []string
	for len(got) < 3 {
		if ctx.Err() != nil {
			t.Fatalf("the lease never expired (got %v)", got)
		}
		again, err := c.Pop(ctx, client.PopOptions{Queue: "part", Batch: 3, Wait: true, TimeoutMs: 2000})
		if err != nil {
			t.Fatal(err)
		}
		if len(again.Messages) == 0 {
			continue
		}
		for _, m := range again.Messages {
			if m.RetryCount != 0 {
				t.Fatalf("%s charged %d: a multi-message expired span charges none", m.TransactionID, m.RetryCount)
			}
		}
		got = append(got, txnsOf(again.Messages))
		last := again.Messages[len(again.Messages)-1]
		if res, err := c.Ack(ctx, "", []client.Ack{client.AckFor(last)}); err != nil || res[0].Result != queen.Acked {
			t.Fatalf("ack %s: %v %+v", last.TransactionID, err, res)
		}
	}
	if fmt.Sprint(got) != "[b c d]" {
		t.Fatalf("deliveries after the expiry %v, want [b c d] (bisected: one message each, then the batch)", got)
	}
	if v := e.metricValue(t, "queen_lease_bisections_total"); v != 1 {
		t.Fatalf("queen_lease_bisections_total %v, want 1", v)
	}
}

// TestConsumeBisectionIsolatesPoison (SPEC.md §4), over HTTP and over NATS:
// a batch of 100 with a poison message at position 37 and a consumer that
// handles the whole batch and acks its end, acking nothing when the poison
// message crashes it (its lease runs out, 2 s). The deliveries are bisected
// until the poison message is delivered alone; only it is charged, once per
// single-message expiry, and dead-lettered ("lease expired") after
// retryLimit+1 of them; messages 1-36 and 38-100 are acked, each once, and
// none is charged. /metrics counts the expiries, bisections and the stall.
func TestConsumeBisectionIsolatesPoison(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	c := client.NewNATS(e.nc)
	const retryLimit = 2
	for _, via := range []string{"http", "nats"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			queue := "bisect-" + via
			e.configureOK(t, "http", []byte(fmt.Sprintf(`{"queue":%q,"options":{"leaseTime":2,"retryLimit":%d}}`, queue, retryLimit)))
			var its []item
			for i := 1; i <= 100; i++ {
				its = append(its, it(queue, "p", fmt.Sprintf("m%03d", i)))
			}
			e.pushOK(t, via, items(its...), 100)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			pop := func() []queen.Message {
				if via == "http" {
					return e.popHTTP(t, queue, "", vals("batch", "100", "wait", "true", "timeout", "2000")).Messages
				}
				res, err := c.Pop(ctx, client.PopOptions{Queue: queue, Batch: 100, Wait: true, TimeoutMs: 2000})
				if err != nil {
					t.Fatalf("NATS pop: %v", err)
				}
				return res.Messages
			}
			ackEnd := func(m queen.Message) queen.AckResult {
				if via == "http" {
					return ackBatch(t, e, "", ackOf(m, "completed"))[0]
				}
				res, err := c.Ack(ctx, "", []client.Ack{client.AckFor(m)})
				if err != nil {
					t.Fatalf("NATS ack: %v", err)
				}
				return res[0]
			}
			acked := map[string]int{}
			var sizes, alone []int // delivery sizes; the retry counts of the poison delivered alone
			for len(acked) < 99 {
				if ctx.Err() != nil {
					t.Fatalf("not isolated in time: deliveries %v, poison alone %v, %d acked", sizes, alone, len(acked))
				}
				ms := pop()
				if len(ms) == 0 {
					continue // the lease is still live
				}
				sizes = append(sizes, len(ms))
				crash := false
				for _, m := range ms {
					if m.TransactionID == "m037" {
						crash = true
						if len(ms) == 1 {
							alone = append(alone, m.RetryCount)
						}
					} else if m.RetryCount != 0 {
						t.Fatalf("%s delivered with retryCount %d: only a single-message expiry charges", m.TransactionID, m.RetryCount)
					}
				}
				if crash {
					continue // the consumer crashed: no ack, the lease runs out
				}
				if r := ackEnd(ms[len(ms)-1]); r.Result != queen.Acked {
					t.Fatalf("ack of %s: %+v", ms[len(ms)-1].TransactionID, r)
				}
				for _, m := range ms {
					acked[m.TransactionID]++
				}
			}
			for id, n := range acked {
				if n != 1 || id == "m037" {
					t.Fatalf("%s acked %d times", id, n)
				}
			}
			if fmt.Sprint(alone) != "[0 1 2]" {
				t.Fatalf("the poison message alone was delivered with retry counts %v, want [0 1 2] (deliveries %v)", alone, sizes)
			}
			dl := e.dlq(t, queue)
			if len(dl) != 1 || dl[0].TransactionID != "m037" || dl[0].Error != "lease expired" || dl[0].Attempts != retryLimit+1 || dl[0].Offset != 36 {
				t.Fatalf("dead letters: %+v", dl)
			}
			t.Logf("%s: deliveries %v", via, sizes)
		})
	}
	t.Cleanup(func() {
		// Both subtests: 100 -> 50 -> 25 -> 12 -> 6 -> 3 bisected, then
		// retryLimit+1 single-message expiries each.
		for sample, want := range map[string]float64{
			"queen_lease_bisections_total":          12,
			"queen_lease_expiries_total":            2 * (6 + retryLimit + 1),
			"queen_lease_expiry_dead_letters_total": 2,
		} {
			if v := e.metricValue(t, sample); v != want {
				t.Errorf("%s = %v, want %v", sample, v, want)
			}
		}
	})
}

// A long poll that starts after StopPolls (the broker is shutting down)
// answers at once, empty (204), over HTTP and NATS, even while its database
// call is cut short: never a 504 (found by FuzzFrontDoors).
func TestLongPollAfterStopPolls(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	e.pushOK(t, "http", items(it("sp", "p", "a")), 1)
	e.b.svc.StopPolls()
	for i := range 3 {
		q := vals("consumerGroup", "g"+strconv.Itoa(i), "wait", "true", "timeout", "600000")
		if got := e.popHTTP(t, "sp", "p", q); len(got.Messages) != 0 {
			t.Fatalf("a long poll after StopPolls delivered %+v", got.Messages)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := e.do(ctx, "nats", "", "", "queen.v1.pop", marshal(map[string]any{"queue": "sp", "partition": "p", "consumerGroup": "n" + strconv.Itoa(i), "wait": true, "timeout": 600000}), http.StatusOK)
		cancel()
		var got struct{ Messages []json.RawMessage }
		if err != nil || r.Status != http.StatusOK || len(r.Raw) > 0 && (json.Unmarshal(r.Raw, &got) != nil || len(got.Messages) != 0) {
			t.Fatalf("NATS long poll after StopPolls: %v %d %s", err, r.Status, r.Raw)
		}
	}
}

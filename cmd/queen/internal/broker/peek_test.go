package broker

// The read-only peek (GET /api/v1/queues/{queue}/messages, queen.v1.peek),
// the queue detail (GET /api/v1/queues/{queue}, queen.v1.queue.detail) and
// the queue listing's duplicate rate, over HTTP and NATS.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	queen "github.com/queen-mq/queen-go"
)

// peek asks for a partition's messages through via; q holds the HTTP query
// fields (queue aside), body is the NATS body.
func (e *env) peek(t testing.TB, via, queue string, q url.Values, body []byte) (int, queen.PeekResult, *errBody) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var send []byte
	if via == "nats" {
		send = body
	}
	r, err := e.do(ctx, via, http.MethodGet, "/api/v1/queues/"+url.PathEscape(queue)+"/messages?"+q.Encode(), "queen.v1.peek", send, http.StatusOK)
	if err != nil {
		t.Fatalf("peek via %s: %v", via, err)
	}
	var res queen.PeekResult
	if r.Status == http.StatusOK {
		if err := json.Unmarshal(r.Raw, &res); err != nil {
			t.Fatalf("peek via %s: %s: %v", via, r.Raw, err)
		}
	}
	return r.Status, res, r.Err
}

// peekOK peeks partition of queue above after (limit 0: the default)
// through via, the HTTP query and the NATS body built from the same fields.
func (e *env) peekOK(t testing.TB, via, queue, partition string, after int64, limit int) queen.PeekResult {
	t.Helper()
	q := url.Values{"partition": {partition}, "after": {strconv.FormatInt(after, 10)}}
	body := map[string]any{"queue": queue, "partition": partition, "after": after}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
		body["limit"] = limit
	}
	st, res, eb := e.peek(t, via, queue, q, marshal(body))
	if st != http.StatusOK {
		t.Fatalf("peek %s/%s via %s: %d %+v", queue, partition, via, st, eb)
	}
	return res
}

func (e *env) queueDetail(t testing.TB, via, queue string) (int, queen.QueueDetail, *errBody) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var send []byte
	if via == "nats" {
		send = marshal(map[string]string{"queue": queue})
	}
	r, err := e.do(ctx, via, http.MethodGet, "/api/v1/queues/"+url.PathEscape(queue), "queen.v1.queue.detail", send, http.StatusOK)
	if err != nil {
		t.Fatalf("queue detail via %s: %v", via, err)
	}
	var d queen.QueueDetail
	if r.Status == http.StatusOK {
		if err := json.Unmarshal(r.Raw, &d); err != nil {
			t.Fatalf("queue detail via %s: %s: %v", via, r.Raw, err)
		}
	}
	return r.Status, d, r.Err
}

// TestPeek: stored messages in offset order, after/limit, across segments;
// nothing is written or leased (a consumer still gets every message
// afterwards); the queue detail shows the group's cursor and lag.
func TestPeek(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	var orig []reply
	orig = append(orig, e.pushOK(t, "http", items(it("pk", "p", "k0"), it("pk", "p", "k1"), it("pk", "p", "k2")), 3)...)
	orig = append(orig, e.pushOK(t, "nats", items(it("pk", "p", "k3"), it("pk", "p", "k4")), 2)...)
	e.pushOK(t, "http", items(it("pk", "other", "x")), 1)
	for _, via := range transports {
		res := e.peekOK(t, via, "pk", "p", -1, 0)
		if res.Queue != "pk" || res.Partition != "p" || res.PartitionID != orig[0].PartitionID || res.LastOffset != 4 || len(res.Messages) != 5 {
			t.Fatalf("peek via %s: %+v", via, res)
		}
		for i, m := range res.Messages {
			if m.Offset != int64(i) || m.ID != orig[i].MessageID || m.TransactionID != orig[i].TransactionID || m.Partition != "p" || m.CreatedAt.IsZero() {
				t.Fatalf("peek via %s: message %d: %+v", via, i, m)
			}
		}
		// after and limit, across the two segments.
		res = e.peekOK(t, via, "pk", "p", 1, 2)
		if len(res.Messages) != 2 || res.Messages[0].Offset != 2 || res.Messages[1].Offset != 3 {
			t.Fatalf("peek after 1 limit 2 via %s: %+v", via, res.Messages)
		}
		if res = e.peekOK(t, via, "pk", "p", 4, 0); res.Messages == nil || len(res.Messages) != 0 {
			t.Fatalf("peek above the last offset via %s: %+v", via, res)
		}
	}
	// HTTP defaults: partition Default, after -1, limit 50.
	e.pushOK(t, "http", items(it("pk", "", "d0")), 1)
	st, res, eb := e.peek(t, "http", "pk", url.Values{}, nil)
	if st != http.StatusOK || res.Partition != queen.DefaultPartition || len(res.Messages) != 1 || res.Messages[0].TransactionID != "d0" {
		t.Fatalf("peek with defaults: %d %+v %+v", st, res, eb)
	}
	before := e.totalRows(t)

	// Nothing written, nothing leased: a consumer gets every message.
	var n int64
	if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM queen.consumers`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a peek made consumer rows: %d %v", n, err)
	}
	if after := e.totalRows(t); after != before {
		t.Fatalf("a peek wrote rows: %v -> %v", before, after)
	}
	got := e.popHTTP(t, "pk", "p", vals("consumerGroup", "g", "batch", "10", "autoAck", "true"))
	if txnsOf(got.Messages) != "k0,k1,k2,k3,k4" {
		t.Fatalf("the consumer after peeks got %s", txnsOf(got.Messages))
	}
	got = e.popHTTP(t, "pk", "p", vals("batch", "2")) // the queue-mode group, leased
	if txnsOf(got.Messages) != "k0,k1" {
		t.Fatalf("the queue-mode consumer got %s", txnsOf(got.Messages))
	}

	// The detail: partitions by name, each group's cursor and lag, a live
	// lease shown.
	for _, via := range transports {
		st, d, eb := e.queueDetail(t, via, "pk")
		if st != http.StatusOK || d.PartitionCount != 3 || len(d.Partitions) != 3 || d.Truncated {
			t.Fatalf("detail via %s: %d %+v %+v", via, st, d, eb)
		}
		if d.Partitions[0].Name != queen.DefaultPartition || d.Partitions[1].Name != "other" || d.Partitions[2].Name != "p" || d.Partitions[2].LastOffset != 4 {
			t.Fatalf("detail partitions via %s: %+v", via, d.Partitions)
		}
		if len(d.ConsumerGroups) != 2 || d.ConsumerGroups[0].ConsumerGroup != "__QUEUE_MODE__" || d.ConsumerGroups[1].ConsumerGroup != "g" {
			t.Fatalf("detail groups via %s: %+v", via, d.ConsumerGroups)
		}
		qm, g := d.ConsumerGroups[0], d.ConsumerGroups[1]
		if len(g.Cursors) != 1 || g.Cursors[0] != (queen.GroupCursor{Partition: "p", Cursor: 4, LastOffset: 4, Lag: 0}) || g.Lag != 0 {
			t.Fatalf("group g via %s: %+v", via, g)
		}
		if len(qm.Cursors) != 1 || qm.Cursors[0].Cursor != -1 || qm.Cursors[0].Lag != 5 || qm.Cursors[0].LeaseExpiresAt == nil || qm.Lag != 5 {
			t.Fatalf("the queue-mode group via %s: %+v", via, qm)
		}
	}

	// The listing's duplicate rate: duplicate / (queued + duplicate) of the
	// queue's push items since the broker started.
	e.pushOK(t, "http", items(it("pk", "p", "k0"), it("pk", "p", "k1")), 2)
	e.pushOK(t, "http", items(it("quiet", "p", "a")), 1)
	_, b := e.httpDo(t, http.MethodGet, "/api/v1/resources/queues", nil)
	var l struct {
		Queues []queen.QueueSummary `json:"queues"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	byName := map[string]queen.QueueSummary{}
	for _, q := range l.Queues {
		byName[q.Name] = q
	}
	pk, quiet := byName["pk"], byName["quiet"]
	if pk.QueuedSinceStart != 7 || pk.DuplicateSinceStart != 2 || pk.DuplicateRate == nil || *pk.DuplicateRate != 2.0/9 {
		t.Fatalf("pk's counts: %+v", pk)
	}
	if quiet.QueuedSinceStart != 1 || quiet.DuplicateSinceStart != 0 || quiet.DuplicateRate == nil || *quiet.DuplicateRate != 0 {
		t.Fatalf("quiet's counts: %+v", quiet)
	}
	e.configureOK(t, "http", []byte(`{"queue":"fresh"}`))
	if _, b = e.httpDo(t, http.MethodGet, "/api/v1/resources/queues", nil); !json.Valid(b) {
		t.Fatal(string(b))
	}
	json.Unmarshal(b, &l) //nolint:errcheck // valid above
	for _, q := range l.Queues {
		if q.Name == "fresh" && q.DuplicateRate != nil {
			t.Fatalf("a queue without pushes has a rate: %+v", q)
		}
	}
	// A deleted queue's counts go with it.
	if st, _ := e.httpDo(t, http.MethodDelete, "/api/v1/resources/queues/quiet", nil); st != http.StatusOK {
		t.Fatalf("delete: %d", st)
	}
	e.pushOK(t, "http", items(it("quiet", "p", "b")), 1)
	_, b = e.httpDo(t, http.MethodGet, "/api/v1/resources/queues", nil)
	json.Unmarshal(b, &l) //nolint:errcheck // checked by the lookup below
	for _, q := range l.Queues {
		if q.Name == "quiet" && q.QueuedSinceStart != 1 {
			t.Fatalf("the recreated queue counts its old pushes: %+v", q)
		}
	}
}

// Bad input to the peek and the detail: 4xx with a JSON error, nothing
// written (no queue or partition created either).
func TestPeekBadInput(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	e.pushOK(t, "http", items(it("known", "p", "k1")), 1)
	before := e.totalRows(t)
	parts := e.stats(t, "known").Partitions
	for _, c := range []struct {
		name   string
		queue  string
		query  url.Values
		body   string
		status int
		code   string
	}{
		{"after below -1", "known", url.Values{"partition": {"p"}, "after": {"-2"}}, `{"queue":"known","partition":"p","after":-2}`, 400, "invalid_field"},
		{"after not a number", "known", url.Values{"partition": {"p"}, "after": {"x"}}, `{"queue":"known","partition":"p","after":"x"}`, 400, "invalid_field"},
		{"limit 0", "known", url.Values{"partition": {"p"}, "limit": {"0"}}, `{"queue":"known","partition":"p","limit":0}`, 400, "invalid_field"},
		{"limit over 1000", "known", url.Values{"partition": {"p"}, "limit": {"1001"}}, `{"queue":"known","partition":"p","limit":1001}`, 400, "invalid_field"},
		{"limit a fraction", "known", url.Values{"partition": {"p"}, "limit": {"1.5"}}, `{"queue":"known","partition":"p","limit":1.5}`, 400, "invalid_field"},
		{"control character", "known", url.Values{"partition": {"a\x01b"}}, `{"queue":"known","partition":"a\u0001b"}`, 400, "control_character"},
		{"unknown queue", "nope", url.Values{"partition": {"p"}}, `{"queue":"nope","partition":"p"}`, 404, "not_found"},
		{"unknown partition", "known", url.Values{"partition": {"nope"}}, `{"queue":"known","partition":"nope"}`, 404, "not_found"},
		{"no queue", "", nil, `{"partition":"p"}`, 400, "missing_field"},
		{"not JSON", "", nil, `queue=known`, 400, "invalid_json"},
	} {
		for _, via := range transports {
			if via == "http" && c.query == nil {
				continue
			}
			st, _, eb := e.peek(t, via, c.queue, c.query, []byte(c.body))
			if st != c.status || eb == nil || eb.Code != c.code || eb.Error == "" {
				t.Errorf("%s via %s: %d %+v, want %d %s", c.name, via, st, eb, c.status, c.code)
			}
		}
	}
	for _, via := range transports {
		if st, _, eb := e.queueDetail(t, via, "nope"); st != http.StatusNotFound || eb == nil || eb.Code != "not_found" {
			t.Errorf("detail of an unknown queue via %s: %d %+v", via, st, eb)
		}
	}
	for _, c := range []struct{ body, code string }{{`{}`, "missing_field"}, {`{"queue":7}`, "invalid_field"}, {`[]`, "invalid_json"}} {
		if st, b := e.natsAuth(t, "queen.v1.queue.detail", "", []byte(c.body)); st != http.StatusBadRequest || !json.Valid(b) || !strings.Contains(string(b), `"`+c.code+`"`) {
			t.Errorf("detail %s: %d %s", c.body, st, b)
		}
	}
	if after := e.totalRows(t); after != before {
		t.Fatalf("bad peeks wrote rows: %v -> %v", before, after)
	}
	if n := e.stats(t, "known").Partitions; n != parts {
		t.Fatalf("a peek created a partition: %d -> %d", parts, n)
	}
	for _, path := range []string{"/api/v1/queues/known/messages", "/api/v1/queues/known"} {
		if st, b := e.httpDo(t, http.MethodPost, path, nil); st != http.StatusMethodNotAllowed {
			t.Fatalf("POST %s: %d %s", path, st, b)
		}
	}
}

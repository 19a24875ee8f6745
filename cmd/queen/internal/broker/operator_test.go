package broker

// End-to-end operator API (SPEC.md §13) over HTTP and NATS: the dedup
// inspector, the admin token and DLQ replay.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	queen "github.com/queen-mq/queen-go"
)

// inspect asks the dedup inspector through via (HTTP query or NATS body).
func (e *env) inspect(t testing.TB, via, queue, partition, txn string) (int, queen.DedupInspection, *errBody) {
	t.Helper()
	q := url.Values{"queue": {queue}, "partition": {partition}, "transactionId": {txn}}
	body := marshal(map[string]string{"queue": queue, "partition": partition, "transactionId": txn})
	return e.inspectRaw(t, via, "/api/v1/dedup?"+q.Encode(), body)
}

func (e *env) inspectRaw(t testing.TB, via, path string, body []byte) (int, queen.DedupInspection, *errBody) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var send []byte
	if via == "nats" {
		send = body
	}
	r, err := e.do(ctx, via, http.MethodGet, path, "queen.v1.dedup", send, http.StatusOK)
	if err != nil {
		t.Fatalf("inspect via %s: %v", via, err)
	}
	var d queen.DedupInspection
	if r.Status == http.StatusOK {
		if err := json.Unmarshal(r.Raw, &d); err != nil {
			t.Fatalf("inspect via %s: %s: %v", via, r.Raw, err)
		}
	}
	return r.Status, d, r.Err
}

func (e *env) inspectOK(t testing.TB, via, queue, partition, txn string) queen.DedupInspection {
	t.Helper()
	st, d, eb := e.inspect(t, via, queue, partition, txn)
	if st != http.StatusOK {
		t.Fatalf("inspect %s/%s/%s via %s: %d %+v", queue, partition, txn, via, st, eb)
	}
	return d
}

func TestDedupInspector(t *testing.T) {
	t.Parallel()
	// The retention loop keeps sidecar rows younger than its 900 s floor:
	// rows aged 700 s stay (expired, not purged).
	e := startEnv(t, nil)
	e.configureOK(t, "http", []byte(`{"queue":"insp","options":{"dedupWindowSeconds":600}}`))
	orig := e.pushOK(t, "http", items(it("insp", "p", "k1"), it("insp", "p", "k2")), 2)
	for _, via := range transports {
		// A known id inside its window: what a duplicate push would name.
		d := e.inspectOK(t, via, "insp", "p", "k2")
		if d.State != queen.InWindow || d.MessageID == nil || *d.MessageID != orig[1].MessageID || d.Offset == nil || *d.Offset != 1 || d.WindowSeconds != 600 {
			t.Fatalf("k2 via %s: %+v", via, d)
		}
		if d.CreatedAt == nil || d.WindowClosesAt == nil || !d.WindowClosesAt.Equal(d.CreatedAt.Add(600*time.Second)) {
			t.Fatalf("k2 via %s: times %+v", via, d)
		}
		// An id never pushed there (another partition holds it: scope is
		// one partition).
		e.pushOK(t, via, items(it("insp", "other-"+via, "k9")), 1)
		u := e.inspectOK(t, via, "insp", "p", "k9")
		if u.State != queen.Unknown || u.MessageID != nil || u.Offset != nil || u.CreatedAt != nil || u.WindowClosesAt != nil || u.WindowSeconds != 600 {
			t.Fatalf("unknown via %s: %+v", via, u)
		}
	}
	// The raw reply has exactly the fields of SPEC.md §13, nulls included.
	st, b := e.httpDo(t, http.MethodGet, "/api/v1/dedup?queue=insp&partition=p&transactionId=nope", nil)
	if st != http.StatusOK || string(b) != `{"state":"unknown","messageId":null,"offset":null,"createdAt":null,"windowSeconds":600,"windowClosesAt":null}` {
		t.Fatalf("unknown reply: %d %s", st, b)
	}

	// The window closes (rows moved back 700 s on PostgreSQL's clock): expired,
	// and the push agrees (queued, a new message).
	e.ageQueue(t, "insp", 700*time.Second)
	for _, via := range transports {
		d := e.inspectOK(t, via, "insp", "p", "k1")
		if d.State != queen.Expired || d.MessageID == nil || *d.MessageID != orig[0].MessageID || *d.Offset != 0 || !d.WindowClosesAt.Before(time.Now()) {
			t.Fatalf("k1 after the window via %s: %+v", via, d)
		}
	}
	again := e.pushOK(t, "nats", items(it("insp", "p", "k1")), 1)
	wantStatuses(t, again, "queued")
	d := e.inspectOK(t, "http", "insp", "p", "k1")
	if d.State != queen.InWindow || *d.MessageID != again[0].MessageID || *d.Offset != 2 {
		t.Fatalf("k1 pushed again: %+v", d)
	}
	// Widening the window reopens it for the old original too: the push
	// would name the lowest offset, and so does the inspector.
	e.configureOK(t, "http", []byte(`{"queue":"insp","options":{"dedupWindowSeconds":3600}}`))
	d = e.inspectOK(t, "nats", "insp", "p", "k1")
	if d.State != queen.InWindow || *d.MessageID != orig[0].MessageID || *d.Offset != 0 {
		t.Fatalf("k1 with the wider window: %+v", d)
	}
	dup := e.pushOK(t, "http", items(it("insp", "p", "k1")), 1)
	if dup[0].Status != "duplicate" || dup[0].MessageID != orig[0].MessageID {
		t.Fatalf("the push disagrees with the inspector: %+v", dup[0])
	}
	// A window of 0 checks nothing: every stored id is expired.
	e.configureOK(t, "http", []byte(`{"queue":"insp","options":{"dedupWindowSeconds":0}}`))
	if d := e.inspectOK(t, "http", "insp", "p", "k2"); d.State != queen.Expired || d.WindowSeconds != 0 || !d.WindowClosesAt.Equal(*d.CreatedAt) {
		t.Fatalf("window 0: %+v", d)
	}
}

// Bad input to the inspector: 4xx with a JSON error, nothing written (no
// queue or partition created either).
func TestDedupInspectorBadInput(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	e.pushOK(t, "http", items(it("known", "p", "k1")), 1)
	before := e.totalRows(t)
	parts := e.stats(t, "known").Partitions
	long := make([]byte, queen.MaxTransactionIDBytes+1)
	for i := range long {
		long[i] = 'x'
	}
	for _, c := range []struct {
		name   string
		query  url.Values
		body   string
		status int
		code   string
	}{
		{"no queue", url.Values{"transactionId": {"k1"}}, `{"transactionId":"k1"}`, 400, "missing_field"},
		{"empty queue", url.Values{"queue": {""}, "transactionId": {"k1"}}, `{"queue":"","transactionId":"k1"}`, 400, "missing_field"},
		{"no id", url.Values{"queue": {"known"}, "partition": {"p"}}, `{"queue":"known","partition":"p"}`, 400, "missing_field"},
		{"empty id", url.Values{"queue": {"known"}, "transactionId": {""}}, `{"queue":"known","transactionId":""}`, 400, "missing_field"},
		{"control character", url.Values{"queue": {"known"}, "partition": {"p"}, "transactionId": {"a\x01b"}}, `{"queue":"known","partition":"p","transactionId":"a\u0001b"}`, 400, "control_character"},
		{"long id", url.Values{"queue": {"known"}, "partition": {"p"}, "transactionId": {string(long)}}, `{"queue":"known","partition":"p","transactionId":"` + string(long) + `"}`, 400, "too_long"},
		{"unknown queue", url.Values{"queue": {"nope"}, "partition": {"p"}, "transactionId": {"k1"}}, `{"queue":"nope","partition":"p","transactionId":"k1"}`, 404, "not_found"},
		{"unknown partition", url.Values{"queue": {"known"}, "partition": {"nope"}, "transactionId": {"k1"}}, `{"queue":"known","partition":"nope","transactionId":"k1"}`, 404, "not_found"},
		{"absent partition is Default, which does not exist", url.Values{"queue": {"known"}, "transactionId": {"k1"}}, `{"queue":"known","transactionId":"k1"}`, 404, "not_found"},
		{"wrong type", nil, `{"queue":"known","partition":"p","transactionId":7}`, 400, "invalid_field"},
		{"not JSON", nil, `queue=known`, 400, "invalid_json"},
	} {
		for _, via := range transports {
			if via == "http" && c.query == nil {
				continue
			}
			st, _, eb := e.inspectRaw(t, via, "/api/v1/dedup?"+c.query.Encode(), []byte(c.body))
			if st != c.status || eb == nil || eb.Code != c.code || eb.Error == "" {
				t.Errorf("%s via %s: %d %+v, want %d %s", c.name, via, st, eb, c.status, c.code)
			}
		}
	}
	if after := e.totalRows(t); after != before {
		t.Fatalf("bad inspector requests wrote rows: %v -> %v", before, after)
	}
	if n := e.stats(t, "known").Partitions; n != parts {
		t.Fatalf("an inspector request created a partition: %d -> %d", parts, n)
	}
	st, b := e.httpDo(t, http.MethodPost, "/api/v1/dedup", nil)
	if st != http.StatusMethodNotAllowed {
		t.Fatalf("POST /api/v1/dedup: %d %s", st, b)
	}
}

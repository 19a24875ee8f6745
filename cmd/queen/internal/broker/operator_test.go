package broker

// End-to-end operator API (SPEC.md §13) over HTTP and NATS: the dedup
// inspector, the admin token and DLQ replay.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
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

// httpAuth sends an HTTP request with an Authorization header ("" for none).
func (e *env) httpAuth(t testing.TB, method, path, auth string, body any) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(marshal(body))
	}
	req, err := http.NewRequest(method, e.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// natsAuth sends a NATS request with an Authorization header ("" for none)
// and returns the status (the error header, else 200) and body.
func (e *env) natsAuth(t testing.TB, subject, auth string, body []byte) (int, []byte) {
	t.Helper()
	msg := nats.NewMsg(subject)
	msg.Data = body
	if auth != "" {
		msg.Header.Set("Authorization", auth)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := e.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	st := http.StatusOK
	if c := rep.Header.Get("Nats-Service-Error-Code"); c != "" {
		st, _ = strconv.Atoi(c)
	}
	return st, rep.Data
}

// TestAdminToken: with QUEEN_ADMIN_TOKEN set, the admin routes and subjects
// answer 401 without the bearer token (or with another one) and work with
// it; the message plane (SPEC.md §3-§5) does not ask for it.
func TestAdminToken(t *testing.T) {
	t.Parallel()
	e := startEnv(t, func(c *Config) { c.AdminToken = "s3cret" })
	e.pushOK(t, "http", items(it("tok", "p", "k1")), 1)
	admin := []struct{ method, path string }{
		{http.MethodGet, "/api/v1/dlq?queue=tok"}, // payloads, like the peek
		{http.MethodGet, "/api/v1/resources/queues"},
		{http.MethodGet, "/api/v1/resources/queues/tok"},
		{http.MethodGet, "/api/v1/cluster"},
		{http.MethodGet, "/api/v1/admin/dedup-cache"},
		{http.MethodGet, "/api/v1/dedup?queue=tok&partition=p&transactionId=k1"},
		{http.MethodGet, "/api/v1/queues/tok"},
		{http.MethodGet, "/api/v1/queues/tok/messages?partition=p"},
		{http.MethodPost, "/api/v1/consumer-groups/g/queues/tok/seek"},
		{http.MethodPost, "/api/v1/consumer-groups/g/subscription"},
		{http.MethodDelete, "/api/v1/consumer-groups/g"},
		{http.MethodPost, "/api/v1/dlq/replay"},
		{http.MethodDelete, "/api/v1/resources/queues/tok"},
	}
	for _, r := range admin {
		for _, auth := range []string{"", "Bearer wrong", "Bearer s3cret2", "Basic s3cret", "s3cret"} {
			st, h, b := e.httpAuth(t, r.method, r.path, auth, map[string]any{"toEnd": true})
			var eb errBody
			if st != http.StatusUnauthorized || json.Unmarshal(b, &eb) != nil || eb.Code != "unauthorized" || h.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s with %q: %d %s, want 401 unauthorized", r.method, r.path, auth, st, b)
			}
		}
	}
	if n := e.stats(t, "tok"); n.Queues != 1 || n.Segments != 1 {
		t.Fatalf("a refused admin call changed the queue: %+v", n)
	}
	// With the token (the scheme in any case) they run.
	for _, r := range admin[:8] {
		for _, auth := range []string{"Bearer s3cret", "bearer s3cret"} {
			if st, _, b := e.httpAuth(t, r.method, r.path, auth, nil); st != http.StatusOK {
				t.Errorf("%s %s with the token: %d %s", r.method, r.path, st, b)
			}
		}
	}
	// NATS admin subjects read the Authorization message header.
	for _, c := range []struct {
		subject string
		body    []byte
	}{
		{"queen.v1.cluster", nil},
		{"queen.v1.queue", []byte("tok")},
		{"queen.v1.dedup", []byte(`{"queue":"tok","partition":"p","transactionId":"k1"}`)},
		{"queen.v1.dlq.replay", []byte(`{"queue":"tok","ids":[1]}`)},
		{"queen.v1.peek", []byte(`{"queue":"tok","partition":"p"}`)},
		{"queen.v1.queue.detail", []byte(`{"queue":"tok"}`)},
	} {
		if st, b := e.natsAuth(t, c.subject, "", c.body); st != http.StatusUnauthorized || !strings.Contains(string(b), `"unauthorized"`) {
			t.Errorf("%s without the token: %d %s", c.subject, st, b)
		}
		if st, b := e.natsAuth(t, c.subject, "Bearer nope", c.body); st != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %d %s", c.subject, st, b)
		}
		if st, b := e.natsAuth(t, c.subject, "Bearer s3cret", c.body); st != http.StatusOK {
			t.Errorf("%s with the token: %d %s", c.subject, st, b)
		}
	}
	// The message plane is unchanged: no token asked.
	for _, via := range transports {
		wantStatuses(t, e.pushOK(t, via, items(it("tok", "p", "k1"), it("tok", "p", "k2-"+via)), 2), "duplicate", "queued")
		if st, _, _ := e.configure(t, via, []byte(`{"queue":"tok2"}`)); st != http.StatusOK {
			t.Fatalf("configure via %s without the token: %d", via, st)
		}
	}
	got := e.popHTTP(t, "tok", "p", vals("autoAck", "true"))
	if len(got.Messages) != 1 {
		t.Fatalf("pop without the token: %+v", got)
	}
	for _, path := range []string{"/health", "/metrics"} {
		if st, _, b := e.httpAuth(t, http.MethodGet, path, "", nil); st != http.StatusOK {
			t.Errorf("GET %s without the token: %d %s", path, st, b)
		}
	}
}

// deadLetter pops the next message of queue/partition for group and acks it
// "dlq": it is dead-lettered at once. It returns the message.
func (e *env) deadLetter(t testing.TB, queue, partition, group string) queen.Message {
	t.Helper()
	got := e.popHTTP(t, queue, partition, vals("consumerGroup", group))
	if len(got.Messages) != 1 {
		t.Fatalf("pop %s/%s: %+v", queue, partition, got)
	}
	a := ackOf(got.Messages[0], "dlq")
	a["error"] = "poison"
	if res := ackBatch(t, e, group, a); res[0].Result != queen.DeadLettered {
		t.Fatalf("ack dlq: %+v", res[0])
	}
	return got.Messages[0]
}

// dlq lists a queue's dead letters (every group).
func (e *env) dlq(t testing.TB, queue string) []queen.DeadLetter {
	t.Helper()
	st, b := e.httpDo(t, http.MethodGet, "/api/v1/dlq?queue="+url.QueryEscape(queue), nil)
	var out struct {
		Messages []queen.DeadLetter `json:"messages"`
	}
	if st != http.StatusOK || json.Unmarshal(b, &out) != nil {
		t.Fatalf("dlq %s: %d %s", queue, st, b)
	}
	return out.Messages
}

type replayReply struct {
	Results                        []wire.ReplayResult `json:"results"`
	Moved, Duplicate, Gone, Failed int
}

func (e *env) replay(t testing.TB, via string, body any) (int, replayReply, *errBody) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, ok := body.([]byte)
	if !ok {
		raw = marshal(body)
	}
	r, err := e.do(ctx, via, http.MethodPost, "/api/v1/dlq/replay", "queen.v1.dlq.replay", raw, http.StatusOK)
	if err != nil {
		t.Fatalf("replay via %s: %v", via, err)
	}
	var out replayReply
	if r.Status == http.StatusOK {
		if err := json.Unmarshal(r.Raw, &out); err != nil {
			t.Fatalf("replay reply %s: %v", r.Raw, err)
		}
	}
	return r.Status, out, r.Err
}

func outcomes(rs []wire.ReplayResult) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.FormatInt(r.ID, 10) + ":" + string(r.Result)
	}
	return strings.Join(s, ",")
}

// TestDLQReplay: a dead letter replayed by id is pushed back onto its
// partition under dlq:<id> with its payload and traceId (moved, the dead
// letter removed) and delivered again; an unknown id is gone; a replay whose
// transactionId is already in the window is a duplicate and keeps the dead
// letter; a filter replays the dead letters it selects.
func TestDLQReplay(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	trace := "trace-1"
	e.pushOK(t, "http", marshal(map[string]any{"items": []any{
		map[string]any{"queue": "rp", "partition": "p", "transactionId": "a", "traceId": trace, "payload": map[string]any{"n": 1}},
		map[string]any{"queue": "rp", "partition": "p", "transactionId": "b", "payload": map[string]any{"n": 2}},
		map[string]any{"queue": "rp", "partition": "q", "transactionId": "c", "payload": map[string]any{"n": 3}},
	}}), 3)
	e.deadLetter(t, "rp", "p", "g1")
	e.deadLetter(t, "rp", "p", "g1")
	e.deadLetter(t, "rp", "q", "g1")
	dls := e.dlq(t, "rp")
	if len(dls) != 3 {
		t.Fatalf("dead letters: %+v", dls)
	}
	a, b, c := dls[0], dls[1], dls[2]

	// By id, over HTTP: moved, and an unknown id is gone.
	st, rep, eb := e.replay(t, "http", map[string]any{"queue": "rp", "consumerGroup": "g1", "ids": []int64{a.ID, 999999}})
	if st != http.StatusOK || outcomes(rep.Results) != strconv.FormatInt(a.ID, 10)+":moved,999999:gone" || rep.Moved != 1 || rep.Gone != 1 {
		t.Fatalf("replay a: %d %+v %+v", st, rep, eb)
	}
	ra := rep.Results[0]
	if ra.TransactionID != "dlq:"+strconv.FormatInt(a.ID, 10) || ra.Partition != "p" || ra.Queue != "rp" || ra.Offset == nil || *ra.Offset != 2 {
		t.Fatalf("moved result: %+v", ra)
	}
	if n := len(e.dlq(t, "rp")); n != 2 {
		t.Fatalf("the moved dead letter is still listed: %d", n)
	}
	// Delivered again (to g1, whose cursor is past the original), with the
	// original payload and traceId.
	got := e.popHTTP(t, "rp", "p", vals("consumerGroup", "g1", "autoAck", "true"))
	if len(got.Messages) != 1 || got.Messages[0].TransactionID != ra.TransactionID || got.Messages[0].ID != ra.MessageID {
		t.Fatalf("replayed message: %+v", got.Messages)
	}
	if m := got.Messages[0]; string(m.Data) != `{"n":1}` || m.TraceID == nil || *m.TraceID != trace {
		t.Fatalf("replayed payload/trace: %s %v", m.Data, m.TraceID)
	}
	// Again, over NATS: the dead letter is gone.
	if st, rep, _ := e.replay(t, "nats", map[string]any{"queue": "rp", "ids": []int64{a.ID}}); st != http.StatusOK || outcomes(rep.Results) != strconv.FormatInt(a.ID, 10)+":gone" {
		t.Fatalf("replay a again: %d %+v", st, rep)
	}
	// b's replay is already in the window (pushed by an earlier replay whose
	// removal was lost): duplicate, the dead letter kept, nothing written.
	first := e.pushOK(t, "http", items(it("rp", "p", wire.ReplayTransactionID(b.ID))), 1)
	before := e.stats(t, "rp")
	st, rep, _ = e.replay(t, "nats", map[string]any{"queue": "rp", "ids": []int64{b.ID}})
	if st != http.StatusOK || rep.Duplicate != 1 || rep.Results[0].Result != wire.ReplayDuplicate || rep.Results[0].MessageID != first[0].MessageID {
		t.Fatalf("replay b: %d %+v", st, rep)
	}
	if after := e.stats(t, "rp"); after != before || len(e.dlq(t, "rp")) != 2 {
		t.Fatalf("a duplicate replay wrote or removed something: %+v -> %+v", before, after)
	}
	// A filter: partition q's dead letters, moved.
	st, rep, _ = e.replay(t, "http", map[string]any{"queue": "rp", "consumerGroup": "g1", "partition": "q", "limit": 10})
	if st != http.StatusOK || outcomes(rep.Results) != strconv.FormatInt(c.ID, 10)+":moved" {
		t.Fatalf("replay by filter: %d %+v", st, rep)
	}
	// Another group's filter selects nothing.
	if st, rep, _ := e.replay(t, "http", map[string]any{"queue": "rp", "consumerGroup": "g2"}); st != http.StatusOK || len(rep.Results) != 0 {
		t.Fatalf("replay of another group: %d %+v", st, rep)
	}
}

// TestDLQReplayConcurrent: replays of one dead letter sent at once, over
// HTTP and NATS to two brokers sharing the database, run one after the
// other (the letter is locked from before it is read until after it is
// removed): exactly one answers moved, every other one gone (never
// duplicate: the letter no longer exists), the message is stored once and
// the dead letter is removed.
func TestDLQReplayConcurrent(t *testing.T) {
	t.Parallel()
	a := startEnv(t, nil)
	b := startEnvOn(t, a.url, func(c *Config) { c.NATSURL = a.b.NATSURL() })
	const letters, replays = 3, 8
	for i := range letters {
		a.pushOK(t, "http", items(it("rc", "p"+strconv.Itoa(i), "m")), 1)
		a.deadLetter(t, "rc", "p"+strconv.Itoa(i), "g")
	}
	dls := a.dlq(t, "rc")
	if len(dls) != letters {
		t.Fatalf("dead letters: %+v", dls)
	}
	for _, d := range dls {
		start := make(chan struct{})
		done := make(chan replayReply, replays)
		for k := range replays {
			e, via := []*env{a, b}[k%2], transports[(k/2)%2]
			go func() {
				<-start
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				r, err := e.do(ctx, via, http.MethodPost, "/api/v1/dlq/replay", "queen.v1.dlq.replay", marshal(map[string]any{"queue": "rc", "consumerGroup": "g", "ids": []int64{d.ID}}), http.StatusOK)
				var out replayReply
				if err != nil || r.Status != http.StatusOK || json.Unmarshal(r.Raw, &out) != nil {
					t.Errorf("concurrent replay via %s: %v %d %s", via, err, r.Status, r.Raw)
				}
				done <- out
			}()
		}
		close(start)
		var moved, gone int
		for range replays {
			r := <-done
			if len(r.Results) != 1 {
				t.Fatalf("replay of %d: %+v", d.ID, r)
			}
			switch res := r.Results[0]; res.Result {
			case wire.Moved:
				moved++
			case wire.Gone:
				gone++
			default:
				t.Errorf("replay of %d answered %+v, want moved or gone", d.ID, res)
			}
		}
		if moved != 1 || gone != replays-1 {
			t.Fatalf("replays of %d: %d moved, %d gone; want 1 and %d", d.ID, moved, gone, replays-1)
		}
		if n := txnCounts(a.frames(t, "rc", d.Partition))[wire.ReplayTransactionID(d.ID)]; n != 1 {
			t.Fatalf("the replay of %d is stored %d times", d.ID, n)
		}
	}
	if left := a.dlq(t, "rc"); len(left) != 0 {
		t.Fatalf("dead letters left after the replays: %+v", left)
	}
}

// Bad replay requests: 4xx with a JSON error, nothing pushed or removed.
func TestDLQReplayBadInput(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	e.pushOK(t, "http", items(it("rb", "p", "a")), 1)
	e.deadLetter(t, "rb", "p", "g")
	before := e.totalRows(t)
	for _, c := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"not JSON", `ids=1`, 400, "invalid_json"},
		{"no queue", `{"ids":[1]}`, 400, "missing_field"},
		{"ids and a filter", `{"queue":"rb","ids":[1],"limit":5}`, 400, "invalid_field"},
		{"empty ids", `{"queue":"rb","ids":[]}`, 400, "invalid_field"},
		{"negative id", `{"queue":"rb","ids":[-1]}`, 400, "invalid_field"},
		{"id not a number", `{"queue":"rb","ids":["1"]}`, 400, "invalid_field"},
		{"limit 0", `{"queue":"rb","limit":0}`, 400, "invalid_field"},
		{"bad from", `{"queue":"rb","from":"yesterday"}`, 400, "invalid_field"},
		{"control character in the group", `{"queue":"rb","consumerGroup":"g\u0001","ids":[1]}`, 400, "control_character"},
		{"unknown queue", `{"queue":"nope","ids":[1]}`, 404, "not_found"},
	} {
		for _, via := range transports {
			st, _, eb := e.replay(t, via, []byte(c.body))
			if st != c.status || eb == nil || eb.Code != c.code {
				t.Errorf("%s via %s: %d %+v, want %d %s", c.name, via, st, eb, c.status, c.code)
			}
		}
	}
	if after := e.totalRows(t); after != before || len(e.dlq(t, "rb")) != 1 {
		t.Fatalf("bad replays wrote something: %v -> %v", before, after)
	}
	if st, b := e.httpDo(t, http.MethodGet, "/api/v1/dlq/replay", nil); st != http.StatusMethodNotAllowed {
		t.Fatalf("GET /api/v1/dlq/replay: %d %s", st, b)
	}
}

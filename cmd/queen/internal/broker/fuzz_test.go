package broker

// FuzzFrontDoors: whole requests, HTTP or NATS, into one real broker (its
// PostgreSQL database and embedded NATS server), checked against the
// contract's invariants (docs/contract.md §3, §10):
//
//   - no 5xx for client input (the database is healthy: any 5xx, or a
//     push item answered failed, is the broker's fault);
//   - a 4xx is a JSON error with a code and writes nothing (the database's
//     queues, partitions, cursors, subscriptions, dead letters, segments and
//     sidecar rows read the same before and after);
//   - a push answered 201: every item answered queued is stored exactly
//     once (its message id, with its transactionId, among the frames the
//     push added to its partition, and the partition gained exactly as many
//     frames as it has queued items); an item answered duplicate added none;
//   - a repeat of the queued items' transactionIds inside the window is
//     answered duplicate with the same message ids and writes nothing.
//
// Inputs: the front door (NATS or HTTP), the method (HTTP), the route (an
// HTTP path with its query, or a NATS subject: the public queen.v1 subjects
// only), headers ("Name: value" lines, Authorization included: the broker's
// admin token is fuzzAdminToken) and the body bytes. `go test` runs only the
// seed corpus in testdata/fuzz/FuzzFrontDoors; README, Testing, says how it
// was fuzzed and for how long.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/queen-mq/queen-go/persistence"
)

// fuzzAdminToken is the fuzzed broker's QUEEN_ADMIN_TOKEN (seeds send it).
const fuzzAdminToken = "fuzz-admin"

// fuzzPublicSubjects are the NATS subjects a client may send requests to
// (the micro service's endpoints; queen.v1.shard.N.push is matched apart).
var fuzzPublicSubjects = map[string]bool{
	"queen.v1.push": true, "queen.v1.configure": true, "queen.v1.queue": true, "queen.v1.pop": true,
	"queen.v1.ack": true, "queen.v1.ack.batch": true, "queen.v1.lease.extend": true,
	"queen.v1.transaction": true, "queen.v1.cluster": true, "queen.v1.dedup": true,
	"queen.v1.dlq.replay": true, "queen.v1.peek": true, "queen.v1.queue.detail": true,
}

// fuzzSubjects lists them in a fixed order (with one shard's push).
var fuzzSubjects = []string{"queen.v1.push", "queen.v1.configure", "queen.v1.queue", "queen.v1.pop",
	"queen.v1.ack", "queen.v1.ack.batch", "queen.v1.lease.extend", "queen.v1.transaction", "queen.v1.cluster",
	"queen.v1.dedup", "queen.v1.dlq.replay", "queen.v1.peek", "queen.v1.queue.detail", "queen.v1.shard.0.push"}

var (
	fuzzShardPush  = regexp.MustCompile(`^queen\.v1\.shard\.[0-9]{1,4}\.push$`)
	fuzzHeaderName = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
)

// fuzzRequest is one decoded fuzz input.
type fuzzRequest struct {
	nats          bool
	method, route string // route: HTTP path and query, or NATS subject
	header        http.Header
	body          []byte
	push          bool // the push route (items are checked)
}

// fuzzEnv is the fuzzed broker and a read-only audit of its database.
type fuzzEnv struct {
	*env
	audit *persistence.Audit
	// counts are the answers by status class (2xx, 4xx, ...), written to
	// $QUEEN_FUZZ_COUNTS every 500 answers when that is set (a fuzzing
	// worker's own tally of the requests that reached the broker).
	counts    map[string]int
	countFile string
}

// count tallies an answer of status st.
func (fz *fuzzEnv) count(st int) {
	if fz.countFile == "" {
		return
	}
	fz.counts[strconv.Itoa(st/100)+"xx"]++
	fz.counts["total"]++
	if fz.counts["total"]%500 == 0 {
		_ = os.WriteFile(fz.countFile, marshal(fz.counts), 0o644)
	}
}

func FuzzFrontDoors(f *testing.F) {
	e := startEnv(f, func(c *Config) {
		c.AdminToken = fuzzAdminToken
		// No retention pass while fuzzing: a queue configured with a short
		// retention must not lose a stored message between the answer and
		// its check.
		c.Retention.Interval = 24 * time.Hour
	})
	// Long polls answer at once (empty): a fuzzed wait must not stall.
	e.b.svc.StopPolls()
	a, err := persistence.OpenAudit(context.Background(), e.url)
	if err != nil {
		f.Fatalf("open the audit: %v", err)
	}
	f.Cleanup(a.Close)
	fz := &fuzzEnv{env: e, audit: a, counts: map[string]int{}}
	if fz.countFile = os.Getenv("QUEEN_FUZZ_COUNTS"); fz.countFile != "" {
		fz.countFile += "." + strconv.Itoa(os.Getpid())
	}
	f.Fuzz(func(t *testing.T, viaNATS bool, method, route, header string, body []byte) {
		r, ok := decodeFuzzRequest(viaNATS, method, route, header, body)
		if !ok {
			return
		}
		fz.check(t, r)
	})
}

// decodeFuzzRequest turns fuzz input into a request the client libraries
// can send as given, or false (skipped: a route that is not a valid URL
// path, or not a valid HTTP/1.1 request target). So that mutated inputs still reach the broker, a header line that
// is not a valid "Name: value" (or sets the framing) is dropped, an invalid
// or CONNECT method becomes POST (with a body) or GET, and a NATS subject
// that is not a public request subject becomes one of them, picked by the
// subject's length. A shard's push always carries Content-Type:
// application/json, its client form.
func decodeFuzzRequest(viaNATS bool, method, route, header string, body []byte) (fuzzRequest, bool) {
	r := fuzzRequest{nats: viaNATS, method: method, route: route, header: http.Header{}, body: body}
	for _, line := range strings.Split(header, "\n") {
		name, value, ok := strings.Cut(line, ":")
		value = strings.TrimSpace(value)
		if !ok || !fuzzHeaderName.MatchString(name) || !printableASCII(value) {
			continue
		}
		switch http.CanonicalHeaderKey(name) {
		case "Content-Length", "Transfer-Encoding", "Host", "Connection", "Expect", "Te", "Trailer", "Upgrade":
			continue // framing, set by the client
		}
		r.header.Add(name, value)
	}
	if viaNATS {
		if !fuzzPublicSubjects[route] && !fuzzShardPush.MatchString(route) {
			r.route = fuzzSubjects[len(route)%len(fuzzSubjects)]
		}
		r.push = r.route == "queen.v1.push" || fuzzShardPush.MatchString(r.route)
		if fuzzShardPush.MatchString(r.route) {
			// The client form of a shard's push (transport.ShardPushSubject);
			// without this header the subject speaks the brokers' own hop
			// codec (package shards), which is not a front door.
			r.header.Set("Content-Type", "application/json")
		}
		return r, true
	}
	if !strings.HasPrefix(route, "/") || strings.HasPrefix(route, "//") || !requestTarget(route) {
		return r, false
	}
	if _, err := http.NewRequest(method, "http://127.0.0.1"+route, nil); err != nil || method == http.MethodConnect {
		r.method = http.MethodGet
		if len(body) > 0 {
			r.method = http.MethodPost
		}
	}
	if _, err := http.NewRequest(r.method, "http://127.0.0.1"+route, nil); err != nil {
		return r, false
	}
	method = r.method
	path, _, _ := strings.Cut(route, "?")
	r.push = method == http.MethodPost && path == "/api/v1/push"
	return r, true
}

// requestTarget reports whether route can be sent as an HTTP/1.1 request
// target: printable ASCII without spaces. The Go client sends a query as it
// is given, so a space or a control byte there would make a request line
// that is not HTTP (net/http's server answers it a plain-text 400 before
// any handler runs: the protocol, not the API, refuses it).
func requestTarget(route string) bool {
	return printableASCII(route) && !strings.Contains(route, " ")
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// fuzzAnswer is a reply: its status (for NATS the Nats-Service-Error-Code
// header, else 200, or 201 for a push) and body.
type fuzzAnswer struct {
	status int
	body   []byte
}

// send sends r and waits for its answer (at most 30 s). noReply is true for
// a NATS subject nobody serves.
func (fz *fuzzEnv) send(r fuzzRequest) (ans fuzzAnswer, noReply bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r.nats {
		msg := nats.NewMsg(r.route)
		msg.Data = r.body
		for k, vs := range r.header {
			for _, v := range vs {
				msg.Header.Add(k, v)
			}
		}
		m, err := fz.nc.RequestMsgWithContext(ctx, msg)
		if errors.Is(err, nats.ErrNoResponders) {
			return ans, true, nil
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			return ans, true, nil // refused by the client library, never sent
		}
		if err != nil {
			return ans, false, err
		}
		ans.status, ans.body = http.StatusOK, m.Data
		if r.push {
			ans.status = http.StatusCreated
		}
		if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
			if ans.status, err = strconv.Atoi(code); err != nil {
				return ans, false, fmt.Errorf("bad Nats-Service-Error-Code %q", code)
			}
		}
		return ans, false, nil
	}
	req, err := http.NewRequestWithContext(ctx, r.method, fz.base+r.route, bytes.NewReader(r.body))
	if err != nil {
		return ans, true, nil
	}
	req.Header = r.header.Clone()
	resp, err := fz.hc.Do(req)
	if err != nil {
		return ans, false, err
	}
	defer resp.Body.Close()
	ans.status = resp.StatusCode
	ans.body, err = io.ReadAll(resp.Body)
	return ans, false, err
}

// check sends r and checks the invariants on its answer.
func (fz *fuzzEnv) check(t *testing.T, r fuzzRequest) {
	before := fz.fingerprint(t)
	var offsets map[[2]string]int64
	if r.push {
		offsets = fz.lastOffsets(t)
	}
	ans, noReply, err := fz.send(r)
	if noReply {
		return
	}
	fz.count(ans.status)
	if err != nil {
		t.Fatalf("%s: no answer: %v", r, err)
	}
	switch {
	case ans.status >= 500:
		t.Fatalf("%s: %d for client input: %s", r, ans.status, clip(ans.body))
	case ans.status >= 400:
		var eb errBody
		if r.method != http.MethodHead && (json.Unmarshal(ans.body, &eb) != nil || eb.Code == "" || eb.Error == "") {
			t.Fatalf("%s: %d without a JSON error: %s", r, ans.status, clip(ans.body))
		}
		after := fz.fingerprint(t)
		if r.transaction() {
			// A transaction creates the queues and partitions it pushes to
			// before it begins (their row locks are taken in one global
			// order): one rolled back may leave them, empty (docs/contract.md
			// §5, README Transactions). Nothing else.
			after[0], after[1], before[0], before[1] = "", "", "", ""
		}
		if after != before {
			t.Fatalf("%s: %d (%s) wrote to the database:\n before %v\n after  %v", r, ans.status, eb.Code, before, after)
		}
	case r.push && ans.status == http.StatusCreated:
		var items []reply
		if err := json.Unmarshal(ans.body, &items); err != nil {
			t.Fatalf("%s: 201 whose body is not a reply array: %v %s", r, err, clip(ans.body))
		}
		fz.checkStored(t, r, items, offsets)
		fz.checkRepeat(t, r, items)
	}
}

// transaction reports whether r is a transaction (POST /api/v1/transaction,
// queen.v1.transaction).
func (r fuzzRequest) transaction() bool {
	if r.nats {
		return r.route == "queen.v1.transaction"
	}
	path, _, _ := strings.Cut(r.route, "?")
	return r.method == http.MethodPost && path == "/api/v1/transaction"
}

func (r fuzzRequest) String() string {
	if r.nats {
		return fmt.Sprintf("NATS %q %v body %q", r.route, r.header, clip(r.body))
	}
	return fmt.Sprintf("HTTP %s %q %v body %q", r.method, r.route, r.header, clip(r.body))
}

// fingerprint summarises what a request can write: every row of the queues,
// partitions, cursors and subscriptions, and the dead letters', segments' and
// sidecar rows' counts and extents.
func (fz *fuzzEnv) fingerprint(t testing.TB) [7]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var fp [7]string
	err := fz.db.QueryRow(ctx, `
SELECT (SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x.id), '')) FROM queen.queues x),
       (SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x.id), '')) FROM queen.partitions x),
       (SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x.partition_id, x.consumer_group), '')) FROM queen.consumers x),
       (SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x.queue_id, x.consumer_group), '')) FROM queen.subscriptions x),
       (SELECT count(*) || '/' || coalesce(max(id), 0) FROM queen.dead_letters),
       (SELECT count(*) || '/' || coalesce(sum(last_offset - first_offset + 1), 0) || '/' || coalesce(max(created_at)::text, '') FROM queen.segments),
       (SELECT count(*) || '/' || coalesce(max(created_at)::text, '') FROM queen.log_txn_hashes)`).
		Scan(&fp[0], &fp[1], &fp[2], &fp[3], &fp[4], &fp[5], &fp[6])
	if err != nil {
		t.Fatalf("fingerprint: %v", err)
	}
	return fp
}

// lastOffsets is every partition's last offset, by (queue, partition).
func (fz *fuzzEnv) lastOffsets(t testing.TB) map[[2]string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := fz.db.Query(ctx, `SELECT q.name, p.name, e.last_offset FROM queen.partitions p JOIN queen.partition_ends e ON e.partition_id = p.id JOIN queen.queues q ON q.id = p.queue_id`)
	if err != nil {
		t.Fatalf("last offsets: %v", err)
	}
	defer rows.Close()
	out := map[[2]string]int64{}
	for rows.Next() {
		var q, p string
		var off int64
		if err := rows.Scan(&q, &p, &off); err != nil {
			t.Fatalf("last offsets: %v", err)
		}
		out[[2]string{q, p}] = off
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("last offsets: %v", err)
	}
	return out
}

// checkStored checks a push's verdicts against the frames it added: each
// queued item's message id exactly once in its partition with its
// transactionId, no duplicate's, and no other frame.
func (fz *fuzzEnv) checkStored(t *testing.T, r fuzzRequest, items []reply, offsets map[[2]string]int64) {
	queued := map[[2]string]map[string]string{} // (queue, partition) -> message id -> transactionId
	dups := map[string]bool{}
	for i, it := range items {
		if it.Index != i {
			t.Fatalf("%s: reply element %d has index %d", r, i, it.Index)
		}
		qp := [2]string{it.QueueName, it.Partition}
		switch it.Status {
		case "queued":
			if queued[qp] == nil {
				queued[qp] = map[string]string{}
			}
			if _, seen := queued[qp][it.MessageID]; seen {
				t.Fatalf("%s: message id %s answered twice", r, it.MessageID)
			}
			queued[qp][it.MessageID] = it.TransactionID
		case "duplicate":
			dups[it.MessageID] = true
		default:
			t.Fatalf("%s: item %d answered %q (%s %s) on a healthy database", r, i, it.Status, it.Code, it.Error)
		}
	}
	byQueue := map[string][]string{}
	for qp := range queued {
		byQueue[qp[0]] = append(byQueue[qp[0]], qp[1])
	}
	for queue, names := range byQueue {
		after := make([]int64, len(names))
		for i, p := range names {
			after[i] = -1
			if off, ok := offsets[[2]string{queue, p}]; ok {
				after[i] = off
			}
		}
		added := map[[2]string]int{}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := fz.audit.EachMessageIn(ctx, queue, names, after, nil, func(m *persistence.StoredMessage) error {
			qp := [2]string{queue, m.Partition}
			added[qp]++
			id := m.MessageID.String()
			txn, ok := queued[qp][id]
			switch {
			case !ok && dups[id]: // (a duplicate in the request of a queued item names its id)
				return fmt.Errorf("the duplicate %s was stored at %s/%s@%d", id, queue, m.Partition, m.Offset)
			case !ok:
				return fmt.Errorf("a frame no item was answered queued for: %s/%s@%d id %s txn %q", queue, m.Partition, m.Offset, id, m.TransactionID)
			case txn != m.TransactionID:
				return fmt.Errorf("message %s stored with transactionId %q, answered %q", id, m.TransactionID, txn)
			}
			delete(queued[qp], id)
			return nil
		})
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		for _, p := range names {
			qp := [2]string{queue, p}
			if len(queued[qp]) != 0 {
				t.Fatalf("%s: answered queued but not stored in %s/%s: %v (the push added %d frames)", r, queue, p, queued[qp], added[qp])
			}
		}
	}
}

// checkRepeat pushes the queued items' (queue, partition, transactionId)
// again through the same door: inside the window each is a duplicate of
// the same message, and nothing is written.
func (fz *fuzzEnv) checkRepeat(t *testing.T, r fuzzRequest, items []reply) {
	windows := map[string]int64{}
	var again []map[string]any
	var want []string
	for _, it := range items {
		if it.Status != "queued" {
			continue
		}
		w, ok := windows[it.QueueName]
		if !ok {
			w = fz.window(t, it.QueueName)
			windows[it.QueueName] = w
		}
		if w < 60 { // off, or short enough to close during the check
			continue
		}
		again = append(again, map[string]any{"queue": it.QueueName, "partition": it.Partition, "transactionId": it.TransactionID})
		want = append(want, it.MessageID)
	}
	if len(again) == 0 {
		return
	}
	rep := fuzzRequest{nats: r.nats, method: http.MethodPost, route: "/api/v1/push", header: http.Header{"Content-Type": {"application/json"}}, push: true,
		body: marshal(map[string]any{"items": again})}
	if r.nats {
		rep.route = "queen.v1.push"
	}
	before := fz.fingerprint(t)
	ans, _, err := fz.send(rep)
	if err != nil || ans.status != http.StatusCreated {
		t.Fatalf("%s: the repeat %s: %v %d %s", r, rep, err, ans.status, clip(ans.body))
	}
	var got []reply
	if err := json.Unmarshal(ans.body, &got); err != nil || len(got) != len(want) {
		t.Fatalf("%s: the repeat's reply: %v %s", r, err, clip(ans.body))
	}
	for i, g := range got {
		if g.Status != "duplicate" || g.MessageID != want[i] {
			t.Fatalf("%s: the repeat of item %v answered %s %s, want duplicate %s", r, again[i], g.Status, g.MessageID, want[i])
		}
	}
	if after := fz.fingerprint(t); after != before {
		t.Fatalf("%s: the repeat (all duplicates) wrote to the database:\n before %v\n after  %v", r, before, after)
	}
}

// window is a queue's dedupWindowSeconds as stored.
func (fz *fuzzEnv) window(t testing.TB, queue string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var w int64
	if err := fz.db.QueryRow(ctx, `SELECT dedup_window_seconds FROM queen.queues WHERE name = $1`, queue).Scan(&w); err != nil {
		t.Fatalf("window of %q: %v", queue, err)
	}
	return w
}

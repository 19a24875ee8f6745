package broker

// Shared helpers of the end-to-end tests: a broker per test on a fresh
// PostgreSQL database (persistence/pgtest) with its embedded NATS server, a
// push/configure/queue helper that speaks either transport with byte-identical
// bodies, and direct database inspection through pgx.
//
// The tests use only the standard testing package (go.mod does not require
// testify, and non-test files must not be edited).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// transports are the two front doors every behaviour is checked through.
var transports = []string{"http", "nats"}

const zeroUUID = "00000000-0000-0000-0000-000000000000"

// reply is one element of a push reply (SPEC.md §3).
type reply struct {
	Index         int     `json:"index"`
	MessageID     string  `json:"message_id"`
	TransactionID string  `json:"transaction_id"`
	PartitionID   string  `json:"partition_id"`
	TraceID       *string `json:"trace_id"`
	QueueName     string  `json:"queueName"`
	Partition     string  `json:"partition"`
	Status        string  `json:"status"`
	Error         string  `json:"error"`
	Code          string  `json:"code"`
}

// errBody is an error reply (SPEC.md §10).
type errBody struct {
	Error     string `json:"error"`
	Code      string `json:"code"`
	Index     *int   `json:"index"`
	Field     string `json:"field"`
	Retryable *bool  `json:"retryable"`
}

// result is a transport-neutral answer. Status is the HTTP status, or for
// NATS the Nats-Service-Error-Code header (201 for a push / 200 for other
// calls when the reply is not an error).
type result struct {
	Status  int
	Items   []reply
	Err     *errBody
	Raw     []byte
	Header  http.Header // HTTP response headers or NATS message headers
	Elapsed time.Duration
}

// env is one running broker with clients on both transports and a pool on
// its database.
type env struct {
	b    *Broker
	url  string
	nc   *nats.Conn
	hc   *http.Client
	db   *pgxpool.Pool
	base string
}

func quietLogger() *slog.Logger {
	if os.Getenv("QUEEN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startEnv starts a broker on a fresh database; mod adjusts its Config.
func startEnv(t testing.TB, mod func(*Config)) *env {
	t.Helper()
	url := pgtest.NewDatabase(t)
	return startEnvOn(t, url, mod)
}

// startBrokerOn starts a broker on the database at url (loopback ports, a
// temporary data folder, a quiet logger; mod adjusts its Config) and stops
// it when the test ends.
func startBrokerOn(t testing.TB, url string, mod func(*Config)) *Broker {
	t.Helper()
	cfg := Config{
		DatabaseURL: url,
		HTTPAddr:    "127.0.0.1:0",
		NATSListen:  "127.0.0.1:0",
		DataDir:     t.TempDir(),
		Logger:      quietLogger(),
	}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("broker.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			t.Logf("broker.Stop: %v", err)
		}
	})
	return b
}

func startEnvOn(t testing.TB, url string, mod func(*Config)) *env {
	t.Helper()
	b := startBrokerOn(t, url, mod)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(b.NATSURL(), nats.Name("queen-e2e-test"))
	if err != nil {
		t.Fatalf("connect to NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxIdleConns: 512}}
	t.Cleanup(hc.CloseIdleConnections)
	pool, err := pgxpool.New(ctx, b.DatabaseURL())
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	t.Cleanup(pool.Close)
	return &env{b: b, url: b.DatabaseURL(), nc: nc, hc: hc, db: pool, base: b.HTTPURL()}
}

// ---------------------------------------------------------------------------
// Requests

// do sends body to an HTTP path or NATS subject and decodes the answer. It
// never calls t (safe from any goroutine); err is a transport failure.
func (e *env) do(ctx context.Context, via, method, path, subject string, body []byte, okStatus int) (result, error) {
	var r result
	start := time.Now()
	switch via {
	case "http":
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, e.base+path, rd)
		if err != nil {
			return r, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := e.hc.Do(req)
		if err != nil {
			return r, err
		}
		defer resp.Body.Close()
		r.Raw, err = io.ReadAll(resp.Body)
		if err != nil {
			return r, err
		}
		r.Status, r.Header = resp.StatusCode, resp.Header
	case "nats":
		msg, err := e.nc.RequestWithContext(ctx, subject, body)
		if err != nil {
			return r, err
		}
		r.Raw, r.Header = msg.Data, http.Header(msg.Header)
		r.Status = okStatus
		if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
			st, err := strconv.Atoi(code)
			if err != nil {
				return r, fmt.Errorf("bad Nats-Service-Error-Code %q", code)
			}
			r.Status = st
		}
	default:
		return r, fmt.Errorf("unknown transport %q", via)
	}
	r.Elapsed = time.Since(start)
	trimmed := bytes.TrimSpace(r.Raw)
	switch {
	case len(trimmed) > 0 && trimmed[0] == '[':
		if err := json.Unmarshal(trimmed, &r.Items); err != nil {
			return r, fmt.Errorf("decode reply array %q: %w", clip(r.Raw), err)
		}
	case r.Status >= 400:
		r.Err = &errBody{}
		if err := json.Unmarshal(trimmed, r.Err); err != nil {
			return r, fmt.Errorf("decode error body %q (status %d): %w", clip(r.Raw), r.Status, err)
		}
	}
	return r, nil
}

func clip(b []byte) string {
	if len(b) > 400 {
		return string(b[:400]) + "..."
	}
	return string(b)
}

// tryPush pushes body without calling t.
func (e *env) tryPush(ctx context.Context, via string, body []byte) (result, error) {
	return e.do(ctx, via, http.MethodPost, "/api/v1/push", "queen.v1.push", body, http.StatusCreated)
}

// pushR pushes body through via and checks the transport-level contract
// (error headers over NATS, an array for 201).
func (e *env) pushR(t testing.TB, via string, body []byte) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := e.tryPush(ctx, via, body)
	if err != nil {
		t.Fatalf("push via %s: %v", via, err)
	}
	checkTransportContract(t, via, r)
	if r.Status == http.StatusCreated && r.Items == nil {
		t.Fatalf("push via %s: 201 without a reply array: %s", via, clip(r.Raw))
	}
	return r
}

// push is the helper of the brief: status, per-item replies, error body.
func (e *env) push(t testing.TB, via string, body []byte) (int, []reply, *errBody) {
	t.Helper()
	r := e.pushR(t, via, body)
	return r.Status, r.Items, r.Err
}

// pushOK pushes and requires 201 with one reply per item.
func (e *env) pushOK(t testing.TB, via string, body []byte, n int) []reply {
	t.Helper()
	st, items, eb := e.push(t, via, body)
	if st != http.StatusCreated {
		t.Fatalf("push via %s: status %d (want 201), error %+v, body %s", via, st, eb, clip(body))
	}
	if len(items) != n {
		t.Fatalf("push via %s: %d replies, want %d", via, len(items), n)
	}
	for i, it := range items {
		if it.Index != i {
			t.Fatalf("push via %s: reply %d has index %d", via, i, it.Index)
		}
	}
	return items
}

func checkTransportContract(t testing.TB, via string, r result) {
	t.Helper()
	if via == "nats" && r.Status >= 400 {
		if r.Header.Get("Nats-Service-Error") == "" {
			t.Errorf("NATS error reply (code %d) without a Nats-Service-Error header", r.Status)
		}
		if r.Err != nil && r.Err.Error != r.Header.Get("Nats-Service-Error") {
			t.Errorf("Nats-Service-Error %q differs from the body's error %q", r.Header.Get("Nats-Service-Error"), r.Err.Error)
		}
	}
	if r.Err != nil {
		if r.Err.Code == "" || r.Err.Error == "" {
			t.Errorf("error body without code or error sentence: %s", clip(r.Raw))
		}
		if r.Err.Retryable == nil {
			t.Errorf("error body without \"retryable\": %s", clip(r.Raw))
		}
	}
}

// configure posts a configure body and returns the status, the decoded reply
// object (nil on error) and the error body.
func (e *env) configure(t testing.TB, via string, body []byte) (int, map[string]any, *errBody) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := e.do(ctx, via, http.MethodPost, "/api/v1/configure", "queen.v1.configure", body, http.StatusOK)
	if err != nil {
		t.Fatalf("configure via %s: %v", via, err)
	}
	checkTransportContract(t, via, r)
	if r.Status != http.StatusOK {
		return r.Status, nil, r.Err
	}
	var m map[string]any
	if err := json.Unmarshal(r.Raw, &m); err != nil {
		t.Fatalf("configure via %s: decode reply %s: %v", via, clip(r.Raw), err)
	}
	return r.Status, m, nil
}

func (e *env) configureOK(t testing.TB, via string, body []byte) map[string]any {
	t.Helper()
	st, m, eb := e.configure(t, via, body)
	if st != http.StatusOK {
		t.Fatalf("configure via %s %s: status %d, error %+v", via, body, st, eb)
	}
	return m
}

// getQueue reads a queue through GET /api/v1/resources/queues/{queue} or the
// NATS subject queen.v1.queue.
func (e *env) getQueue(t testing.TB, via, name string) (int, map[string]any, *errBody) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := e.do(ctx, via, http.MethodGet, "/api/v1/resources/queues/"+name, "queen.v1.queue", []byte(name), http.StatusOK)
	if err != nil {
		t.Fatalf("get queue via %s: %v", via, err)
	}
	checkTransportContract(t, via, r)
	if r.Status != http.StatusOK {
		return r.Status, nil, r.Err
	}
	var m map[string]any
	if err := json.Unmarshal(r.Raw, &m); err != nil {
		t.Fatalf("get queue via %s: decode %s: %v", via, clip(r.Raw), err)
	}
	return r.Status, m, nil
}

// queueOption returns the options[name] of a queue read through via.
func (e *env) queueOption(t testing.TB, via, queue, name string) any {
	t.Helper()
	st, m, eb := e.getQueue(t, via, queue)
	if st != http.StatusOK {
		t.Fatalf("get queue %s via %s: status %d, %+v", queue, via, st, eb)
	}
	opts, ok := m["options"].(map[string]any)
	if !ok {
		t.Fatalf("queue %s has no options object: %v", queue, m)
	}
	return opts[name]
}

// ---------------------------------------------------------------------------
// Bodies

type item = map[string]any

// marshal encodes v without HTML escaping, so bodies carry '&', '<' and '>'
// raw (escaping is tested on purpose elsewhere).
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// items builds {"items":[...]}.
func items(its ...item) []byte { return marshal(map[string]any{"items": its}) }

// it builds one item for queue/partition with a transactionId (empty = omitted).
func it(queue, partition, txn string) item {
	m := item{"queue": queue}
	if partition != "" {
		m["partition"] = partition
	}
	if txn != "" {
		m["transactionId"] = txn
	}
	return m
}

// ---------------------------------------------------------------------------
// Database inspection

// stats is what the database holds for one queue.
type stats struct {
	Queues, Partitions, Segments, Messages, SidecarSegments, Hashes, LastOffsets int64
}

func (e *env) stats(t testing.TB, queue string) stats {
	t.Helper()
	return dbStats(t, e.db, queue)
}

func dbStats(t testing.TB, db *pgxpool.Pool, queue string) stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The sidecar, by schema version: log_txns rows (hashes bytea[], one
	// element per frame, or packed bytea, 16 bytes per frame) before
	// migration 0017; the entries of its two levels (per-hash rows and
	// self-contained level-1 blocks) from then on.
	var typ string
	if err := db.QueryRow(ctx, `SELECT COALESCE((SELECT data_type FROM information_schema.columns WHERE table_schema = 'queen' AND table_name = 'log_txns' AND column_name = 'hashes'), '')`).Scan(&typ); err != nil {
		t.Fatalf("read the type of log_txns.hashes: %v", err)
	}
	sidecar := `
       (SELECT count(DISTINCT (z.partition_id, z.segment)) FROM sc z),
       (SELECT count(*) FROM sc),`
	entries := `,
     sc AS (SELECT x.partition_id, x.segment, x."offset" FROM queen.log_txn_hashes x WHERE x.partition_id IN (SELECT id FROM p)
            UNION
            SELECT n.id, e.first, e.first + e.idx
              FROM queen.hash_blocks k CROSS JOIN LATERAL generate_subscripts(k.hashes, 1) AS i
             CROSS JOIN LATERAL queen.hash_entry(k.entries, i) e
              JOIN queen.partitions n ON n.num = e.num
             WHERE n.id IN (SELECT id FROM p))`
	if typ != "" {
		hashCount := "octet_length(hashes) / 16"
		if typ == "ARRAY" {
			hashCount = "cardinality(hashes)"
		}
		sidecar = `
       (SELECT count(*) FROM queen.log_txns WHERE partition_id IN (SELECT id FROM p)),
       (SELECT coalesce(sum(` + hashCount + `), 0)::bigint FROM queen.log_txns WHERE partition_id IN (SELECT id FROM p)),`
		entries = ""
	}
	var s stats
	err := db.QueryRow(ctx, `
WITH q AS (SELECT id FROM queen.queues WHERE name = $1),
     p AS (SELECT p.id, p.num, e.last_offset FROM queen.partitions p JOIN queen.partition_ends e ON e.partition_id = p.id WHERE p.queue_id IN (SELECT id FROM q))`+entries+`
SELECT (SELECT count(*) FROM q),
       (SELECT count(*) FROM p),
       (SELECT count(*) FROM queen.segments WHERE partition_num IN (SELECT num FROM p)),
       (SELECT coalesce(sum(last_offset - first_offset + 1), 0)::bigint FROM queen.segments WHERE partition_num IN (SELECT num FROM p)),`+sidecar+`
       (SELECT coalesce(sum(last_offset + 1), 0)::bigint FROM p)`, queue).
		Scan(&s.Queues, &s.Partitions, &s.Segments, &s.Messages, &s.SidecarSegments, &s.Hashes, &s.LastOffsets)
	if err != nil {
		t.Fatalf("read stats of queue %q: %v", queue, err)
	}
	return s
}

// totalRows counts every segment, level-0 sidecar row and queue in the
// database.
func (e *env) totalRows(t testing.TB) [3]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n [3]int64
	if err := e.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM queen.segments), (SELECT count(*) FROM queen.log_txn_hashes), (SELECT count(*) FROM queen.queues)`).Scan(&n[0], &n[1], &n[2]); err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return n
}

// storedFrame is a stored message with its place.
type storedFrame struct {
	persistence.Frame
	Partition string
	Offset    int64
}

// frames decodes every stored message of a queue (all partitions when
// partition is ""), in (partition, offset) order. It checks each segment's
// frame count against its offset range.
func (e *env) frames(t testing.TB, queue, partition string) []storedFrame {
	t.Helper()
	return dbFrames(t, e.db, queue, partition)
}

func dbFrames(t testing.TB, db *pgxpool.Pool, queue, partition string) []storedFrame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rows, err := db.Query(ctx, `
SELECT p.name, s.first_offset, s.last_offset, p.id, s.created_at, s.legacy_ids, s.frames
FROM queen.segments s
JOIN queen.partitions p ON p.num = s.partition_num
JOIN queen.queues q ON q.id = p.queue_id
WHERE q.name = $1 AND ($2 = '' OR p.name = $2)
ORDER BY p.name, s.first_offset`, queue, partition)
	if err != nil {
		t.Fatalf("read segments: %v", err)
	}
	defer rows.Close()
	var out []storedFrame
	for rows.Next() {
		var pname string
		var first, last int64
		var seg persistence.SegmentIDs
		var fr []byte
		if err := rows.Scan(&pname, &first, &last, &seg.Partition, &seg.At, &seg.Stored, &fr); err != nil {
			t.Fatalf("scan segment: %v", err)
		}
		seg.First = first
		fs, err := persistence.UnpackFrames(seg, fr)
		if err != nil {
			t.Fatalf("decode segment %s@%d: %v", pname, first, err)
		}
		if int64(len(fs)) != last-first+1 {
			t.Fatalf("segment %s@%d..%d holds %d frames", pname, first, last, len(fs))
		}
		for i, f := range fs {
			out = append(out, storedFrame{Frame: f, Partition: pname, Offset: first + int64(i)})
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read segments: %v", err)
	}
	return out
}

// txnCounts counts the stored messages of a queue per transactionId.
func txnCounts(fs []storedFrame) map[string]int {
	m := make(map[string]int, len(fs))
	for _, f := range fs {
		m[f.TransactionID]++
	}
	return m
}

func (e *env) dbWindow(t testing.TB, queue string) int64 {
	t.Helper()
	var w int64
	if err := e.db.QueryRow(context.Background(), `SELECT dedup_window_seconds FROM queen.queues WHERE name = $1`, queue).Scan(&w); err != nil {
		t.Fatalf("read dedup_window_seconds of %q: %v", queue, err)
	}
	return w
}

// ---------------------------------------------------------------------------
// Assertions

// eq fails the test unless want and got are deeply equal (same types too).
func eq(t testing.TB, want, got any, format string, args ...any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("%s: want %v (%T), got %v (%T)", fmt.Sprintf(format, args...), want, want, got, got)
	}
}

func jsonEq(t testing.TB, want, got []byte, what string) {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(want, &a); err != nil {
		t.Fatalf("%s: bad expected JSON %q: %v", what, want, err)
	}
	if err := json.Unmarshal(got, &b); err != nil {
		t.Fatalf("%s: stored bytes are not JSON %q: %v", what, clip(got), err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("%s: want %s, got %s", what, want, clip(got))
	}
}

// statuses lists the replies' statuses.
func statuses(rs []reply) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Status
	}
	return out
}

func wantStatuses(t testing.TB, rs []reply, want ...string) {
	t.Helper()
	if !reflect.DeepEqual(statuses(rs), want) {
		t.Fatalf("statuses: want %v, got %v (replies %+v)", want, statuses(rs), rs)
	}
}

// mustV7 checks s is a UUIDv7.
func mustV7(t testing.TB, s, what string) uuid.UUID {
	t.Helper()
	id, err := uuid.Parse(s)
	if err != nil {
		t.Fatalf("%s %q is not a UUID: %v", what, s, err)
	}
	if id.Version() != 7 {
		t.Fatalf("%s %q is UUID version %d, want 7", what, s, id.Version())
	}
	return id
}

// eventually polls fn every interval until it reports done or the deadline passes.
func eventually(t testing.TB, timeout, interval time.Duration, what string, fn func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	last := ""
	for {
		ok, msg := fn()
		if ok {
			return
		}
		last = msg
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v (last: %s)", what, timeout, last)
		}
		<-tick.C
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

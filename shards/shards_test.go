package shards

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

func TestCodecRoundTrip(t *testing.T) {
	trace := "t"
	items := []*queen.Item{
		{Queue: "q", Partition: "p", TransactionID: "日本", TraceID: &trace, Payload: []byte(`{"a":1}`)},
		{Queue: "q2", Partition: "Default", TransactionID: "", Payload: []byte(`null`)},
	}
	got, err := decodeItems(encodeItems(nil, items))
	require.NoError(t, err)
	require.Len(t, got, 2)
	for i := range items {
		items[i].Hash = queen.HashTxn(items[i].TransactionID)
		require.Equal(t, *items[i], *got[i])
	}
	rs := []queen.Result{
		{Verdict: queen.Queued, MessageID: uuid.New(), PartitionID: uuid.New(), Offset: 7},
		{Verdict: queen.Duplicate, MessageID: uuid.New(), PartitionID: uuid.New(), Offset: -1},
		{Verdict: queen.Failed, Offset: -1, Err: queen.ErrOverloaded.With("busy")},
		{Verdict: queen.Duplicate, MessageID: uuid.New(), PartitionID: uuid.New(), Offset: 3, PayloadMismatch: true},
	}
	back, err := decodeResults(encodeResults(nil, rs))
	require.NoError(t, err)
	require.Equal(t, rs[:2], back[:2])
	require.Equal(t, queen.Failed, back[2].Verdict)
	require.Equal(t, "overloaded", back[2].Err.Code)
	require.True(t, back[2].Err.Retryable)
	require.Equal(t, rs[3], back[3], "a duplicate's payload mismatch crosses the shard hop")

	_, err = decodeItems([]byte{5, 1})
	require.Error(t, err)
	_, err = decodeResults([]byte{1, 9})
	require.Error(t, err)
}

// recorder is a PartitionPusher that queues everything and records what
// each partition received, in order.
type recorder struct {
	mu     sync.Mutex
	got    map[string][]string
	chunks int
}

type done []queen.Result

func (d done) Wait(context.Context) ([]queen.Result, error) { return d, nil }

func (r *recorder) Enqueue(q, p string, items []*queen.Item) (Waiter, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.chunks++
	out := make(done, len(items))
	for i, it := range items {
		r.got[q+"/"+p] = append(r.got[q+"/"+p], it.TransactionID)
		out[i] = queen.Result{Verdict: queen.Queued, Offset: int64(len(r.got[q+"/"+p]) - 1)}
	}
	return out, nil
}

// TestRouterChunksBelowMaxPayloadAndKeepsOrder runs a NATS server whose
// max_payload is 64 KiB and routes a 1 MiB request: the shard hops are split
// into chunks below the limit, and each partition still sees its items in
// request order, with verdicts reassembled in request order.
func TestRouterChunksBelowMaxPayloadAndKeepsOrder(t *testing.T) {
	nc := connectNATS(t, 64<<10)

	rec := &recorder{got: map[string][]string{}}
	s := newServer(t, ServerConfig{Conn: nc, Pusher: rec, Count: 8})
	require.NoError(t, s.ServeAll())
	defer s.Stop(context.Background()) //nolint:errcheck
	r := newRouter(t, RouterConfig{Conn: nc, Count: 8})

	payload := []byte(`"` + strings.Repeat("x", 1000) + `"`)
	var items []*queen.Item
	for i := 0; i < 1000; i++ {
		items = append(items, &queen.Item{Queue: "q", Partition: fmt.Sprintf("p%d", i%3), TransactionID: fmt.Sprintf("t%04d", i), Payload: payload})
	}
	res := r.Push(context.Background(), items)
	require.Len(t, res, len(items))
	for i, it := range items {
		require.Equal(t, queen.Queued, res[i].Verdict, "item %d", i)
		require.Equal(t, int64(i/3), res[i].Offset, "item %d (%s) answered out of order", i, it.TransactionID)
	}
	for p := 0; p < 3; p++ {
		got := rec.got[fmt.Sprintf("q/p%d", p)]
		require.Len(t, got, 334-boolInt(p > 0))
		for j, txn := range got {
			require.Equal(t, fmt.Sprintf("t%04d", j*3+p), txn)
		}
	}
	require.Greater(t, rec.chunks, 3, "a 1 MiB request over a 64 KiB server is split")

	// No broker serving: every item fails with a retryable code, fast.
	require.NoError(t, s.Stop(context.Background()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res = r.Push(ctx, items[:2])
	for _, x := range res {
		require.Equal(t, queen.Failed, x.Verdict)
		require.True(t, x.Err.Retryable)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestShardSubjectRefusesUnvalidatedItems: a client publishing straight to a
// shard subject cannot store what the front door would refuse, and gets the
// front door's 4xx (micro error headers, JSON error body; SPEC.md §10, §11).
func TestShardSubjectRefusesUnvalidatedItems(t *testing.T) {
	nc := connectNATS(t, 0)
	rec := &recorder{got: map[string][]string{}}
	s := newServer(t, ServerConfig{Conn: nc, Pusher: rec, Count: 1, MaxPayloadBytes: 64})
	require.NoError(t, s.ServeAll())
	defer s.Stop(context.Background()) //nolint:errcheck
	ok := func() *queen.Item {
		return &queen.Item{Queue: "q", Partition: "p", TransactionID: "t", Payload: []byte(`{}`)}
	}
	trace := "bad\xff"
	for _, c := range []struct {
		it          *queen.Item
		code, field string
	}{
		{&queen.Item{Queue: "q", Partition: "p", TransactionID: "t", Payload: []byte(`not json`)}, "invalid_json", "items[1].payload"},
		{&queen.Item{Queue: "", Partition: "p", TransactionID: "t", Payload: []byte(`{}`)}, "missing_field", "items[1].queue"},
		{&queen.Item{Queue: "q", Partition: "", TransactionID: "t", Payload: []byte(`{}`)}, "missing_field", "items[1].partition"},
		{&queen.Item{Queue: "q\x01", Partition: "p", TransactionID: "t", Payload: []byte(`{}`)}, "control_character", "items[1].queue"},
		{&queen.Item{Queue: "q", Partition: "p", TransactionID: "", Payload: []byte(`{}`)}, "missing_field", "items[1].transactionId"},
		{&queen.Item{Queue: "q", Partition: strings.Repeat("p", 256), TransactionID: "t", Payload: []byte(`{}`)}, "too_long", "items[1].partition"},
		{&queen.Item{Queue: "q", Partition: "p", TransactionID: "t\xff", Payload: []byte(`{}`)}, "invalid_utf8", "items[1].transactionId"},
		{&queen.Item{Queue: "q", Partition: "p", TransactionID: "\xfe\xff", Payload: []byte(`{}`)}, "invalid_utf8", "items[1].transactionId"},
		{&queen.Item{Queue: "q", Partition: "p", TransactionID: "t\u0085", Payload: []byte(`{}`)}, "control_character", "items[1].transactionId"},
		{&queen.Item{Queue: "q", Partition: "\ufeffp", TransactionID: "t", Payload: []byte(`{}`)}, "control_character", "items[1].partition"},
		{&queen.Item{Queue: "q\u2028", Partition: "p", TransactionID: "t", Payload: []byte(`{}`)}, "control_character", "items[1].queue"},
		{&queen.Item{Queue: "q", Partition: "p", TransactionID: "t", TraceID: &trace, Payload: []byte(`{}`)}, "invalid_utf8", "items[1].traceId"},
		{&queen.Item{Queue: "q", Partition: "p", TransactionID: "t", Payload: []byte("\"\xff\"")}, "invalid_utf8", "items[1].payload"},
		{&queen.Item{Queue: "q", Partition: "p", TransactionID: "t", Payload: []byte(`"\ud800"`)}, "invalid_utf8", "items[1].payload"},
		{&queen.Item{Queue: "q", Partition: "p", TransactionID: "t", Payload: []byte(`["\udc00\ud800"]`)}, "invalid_utf8", "items[1].payload"},
		{&queen.Item{Queue: "q", Partition: "p", TransactionID: "t", Payload: []byte(`"` + strings.Repeat("x", 64) + `"`)}, "payload_too_large", "items[1].payload"},
	} {
		msg, err := nc.Request(wire.ShardPushSubject(0), encodeItems(nil, []*queen.Item{ok(), c.it}), 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, "400", msg.Header.Get(ErrorCodeHeader), "%s: %s", c.field, msg.Data)
		var e queen.Error
		require.NoError(t, json.Unmarshal(msg.Data, &e))
		require.Equal(t, c.code, e.Code, "%s: %s", c.field, msg.Data)
		require.Equal(t, c.field, e.Field)
		require.NotNil(t, e.Index)
		require.Equal(t, 1, *e.Index)
		require.NotEmpty(t, msg.Header.Get(ErrorHeader))
	}
	// A paired surrogate and other escapes are fine.
	good := ok()
	good.Payload = []byte(`{"a":"\ud83d\ude00\\ud800\n\u00e9"}`)
	require.Nil(t, checkItems([]*queen.Item{good}, 1<<20))

	// The public push body without its header is not the internal encoding.
	msg, err := nc.Request(wire.ShardPushSubject(0), []byte(`{"items":[{"queue":"q"}]}`), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "400", msg.Header.Get(ErrorCodeHeader), "%s", msg.Data)
	require.Empty(t, rec.got, "nothing reached a partition")

	// With the header, before a direct handler is set: 503 unavailable
	// (shard-aware clients then use queen.v1.push); after, the handler answers.
	req := nats.NewMsg(wire.ShardPushSubject(0))
	req.Header.Set("Content-Type", wire.ContentTypeJSON)
	req.Data = []byte(`{"items":[{"queue":"q"}]}`)
	msg, err = nc.RequestMsg(req, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "503", msg.Header.Get(ErrorCodeHeader), "%s", msg.Data)
	require.Contains(t, string(msg.Data), `"code":"unavailable"`)
	s.SetDirect(func(m *nats.Msg) { m.Respond([]byte("direct " + string(m.Data))) }) //nolint:errcheck
	msg, err = nc.RequestMsg(req, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, `direct {"items":[{"queue":"q"}]}`, string(msg.Data))
}

// newServer is NewServer for valid settings.
func newServer(t *testing.T, cfg ServerConfig) *Server {
	t.Helper()
	s, err := NewServer(cfg)
	require.NoError(t, err)
	return s
}

// newRouter is NewRouter for valid settings.
func newRouter(t *testing.T, cfg RouterConfig) *Router {
	t.Helper()
	r, err := NewRouter(cfg)
	require.NoError(t, err)
	return r
}

// connectNATS runs an in-process NATS server on an ephemeral loopback port
// (maxPayload 0 = its default) and connects to it; both end with the test.
func connectNATS(t *testing.T, maxPayload int32) *nats.Conn {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, MaxPayload: maxPayload, NoSigs: true, NoLog: true})
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(srv.Shutdown)
	require.True(t, srv.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// owners is a fixed Owners: every shard owned by the broker it names, or
// none ("": served here).
type owners string

func (o owners) RemoteOwner(int) string { return string(o) }

// testOwner is the other broker's id in tests with owners.
const testOwner = "owner"

// TestClusterRouterServesHereWhenNoOwnerAnswers: shards this broker owns (or
// nobody does) go straight to the local pusher; a shard routed to an owner
// whose subject has no responder, or whose owner answers shutting_down
// (nothing stored), is served locally, in request order.
func TestClusterRouterServesHereWhenNoOwnerAnswers(t *testing.T) {
	nc := connectNATS(t, 0)
	var items []*queen.Item
	for i := 0; i < 30; i++ {
		items = append(items, &queen.Item{Queue: "q", Partition: fmt.Sprintf("p%d", i%5), TransactionID: fmt.Sprintf("t%02d", i), Payload: []byte(`{}`)})
	}
	check := func(r *Router, rec *recorder, res []queen.Result) {
		t.Helper()
		for i, x := range res {
			require.Equal(t, queen.Queued, x.Verdict, "item %d: %+v", i, x.Err)
			require.Equal(t, int64(i/5), x.Offset, "item %d", i)
		}
		for p := 0; p < 5; p++ {
			got := rec.got[fmt.Sprintf("q/p%d", p)]
			require.Len(t, got, 6)
			for j, txn := range got {
				require.Equal(t, fmt.Sprintf("t%02d", j*5+p), txn)
			}
		}
	}

	rec := &recorder{got: map[string][]string{}}
	r := newRouter(t, RouterConfig{Conn: nc, Count: 4, Owners: owners(""), Local: rec})
	check(r, rec, r.Push(context.Background(), items))
	require.Equal(t, RouterStats{Local: r.Stats().Local}, r.Stats())
	require.NotZero(t, r.Stats().Local)

	rec = &recorder{got: map[string][]string{}}
	r = newRouter(t, RouterConfig{Conn: nc, Count: 4, Owners: owners(testOwner), Local: rec})
	check(r, rec, r.Push(context.Background(), items))
	require.Equal(t, RouterStats{Remote: r.Stats().Remote, Hops: 1, Fallback: 1}, r.Stats(), "every shard's items in one hop, no responder: all served here")

	// An owner shutting down answers every item shutting_down.
	sub, err := nc.QueueSubscribe(SubjectPrefix+".*.push", queueGroup, func(m *nats.Msg) {
		in, err := decodeItems(m.Data)
		if err != nil {
			return
		}
		out := make([]queen.Result, len(in))
		for i := range out {
			out[i] = queen.Result{Verdict: queen.Failed, Offset: -1, Err: queen.ErrShuttingDown}
		}
		m.Respond(encodeResults(nil, out)) //nolint:errcheck
	})
	require.NoError(t, err)
	defer sub.Unsubscribe() //nolint:errcheck
	require.NoError(t, nc.Flush())
	rec = &recorder{got: map[string][]string{}}
	r = newRouter(t, RouterConfig{Conn: nc, Count: 4, Owners: owners(testOwner), Local: rec})
	check(r, rec, r.Push(context.Background(), items))
	require.NotZero(t, r.Stats().Fallback)
}

// ownerOf is an Owners given as a function of the shard.
type ownerOf func(n int) string

func (o ownerOf) RemoteOwner(n int) string { return o(n) }

// TestClusterRouterSendsOneHopPerOwner: a push spanning every shard of a
// three-broker cluster makes one hop to each other broker (carrying the
// items of all the shards it owns), not one per shard; each owner stores
// the items of its shards in request order; and the items of a shard the
// sender believes owned but its owner does not serve (its lease moved) are
// answered shutting_down by the owner, nothing written there, and served
// by the sender.
func TestClusterRouterSendsOneHopPerOwner(t *testing.T) {
	nc := connectNATS(t, 0)
	const count = 16
	recs := map[string]*recorder{}
	for _, id := range []string{"a", "b"} {
		recs[id] = &recorder{got: map[string][]string{}}
		s := newServer(t, ServerConfig{Conn: nc, Pusher: recs[id], Count: count})
		for n := range count {
			// a serves the even shards, b the odd ones but shard 3.
			if (id == "a") == (n%2 == 0) && n != 3 {
				require.NoError(t, s.Serve(n))
			}
		}
		defer s.Stop(context.Background()) //nolint:errcheck
	}
	require.NoError(t, nc.Flush())
	// The sender's view: shards 0-11 alternate between a and b, 12-15 are its own.
	owner := func(n int) string {
		switch {
		case n >= 12:
			return ""
		case n%2 == 0:
			return "a"
		default:
			return "b"
		}
	}
	local := &recorder{got: map[string][]string{}}
	r := newRouter(t, RouterConfig{Conn: nc, Count: count, Owners: ownerOf(owner), Local: local})
	var items []*queen.Item
	shardsSeen := map[int]bool{}
	for i := range 400 {
		it := &queen.Item{Queue: "q", Partition: fmt.Sprintf("p%d", i%100), TransactionID: fmt.Sprintf("t%03d", i), Payload: []byte(`{}`)}
		shardsSeen[queen.ShardOf(it.Queue, it.Partition, count)] = true
		items = append(items, it)
	}
	require.Len(t, shardsSeen, count, "the push spans every shard")
	res := r.Push(context.Background(), items)
	for i, x := range res {
		require.Equal(t, queen.Queued, x.Verdict, "item %d: %+v", i, x.Err)
		require.Equal(t, int64(i/100), x.Offset, "item %d answered out of order", i)
	}
	st := r.Stats()
	require.Equal(t, uint64(2), st.Hops, "one hop to a, one to b: %+v", st)
	require.Equal(t, uint64(12), st.Remote, "12 shard groups owned elsewhere: %+v", st)
	require.Equal(t, uint64(4), st.Local, "%+v", st)
	require.Equal(t, uint64(1), st.Fallback, "b's hop held shard 3's items, which b does not serve: %+v", st)
	for p := range 100 {
		key := fmt.Sprintf("q/p%d", p)
		n := queen.ShardOf("q", fmt.Sprintf("p%d", p), count)
		where := owner(n)
		if where == "" || n == 3 {
			where = "here"
		}
		for id, rec := range map[string]*recorder{"a": recs["a"], "b": recs["b"], "here": local} {
			got := rec.got[key]
			if id != where {
				require.Empty(t, got, "partition p%d (shard %d) stored on %s, want %s", p, n, id, where)
				continue
			}
			require.Len(t, got, 4, "partition p%d (shard %d) on %s", p, n, id)
			for j, txn := range got {
				require.Equal(t, fmt.Sprintf("t%03d", j*100+p), txn)
			}
		}
	}
}

// servingAll starts a Server on nc serving all count shards into a
// recorder, stopped at the test's end, and returns the recorder.
func servingAll(t *testing.T, nc *nats.Conn, count int) *recorder {
	t.Helper()
	rec := &recorder{got: map[string][]string{}}
	s := newServer(t, ServerConfig{Conn: nc, Pusher: rec, Count: count})
	require.NoError(t, s.ServeAll())
	t.Cleanup(func() { s.Stop(context.Background()) }) //nolint:errcheck
	return rec
}

// flipOwner is an Owners whose answer changes after its first call for each
// shard (a lease running out while a push is split): owner, then "".
type flipOwner struct {
	mu     sync.Mutex
	owner  string
	called map[int]bool
}

func (f *flipOwner) RemoteOwner(n int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.called[n] {
		return ""
	}
	f.called[n] = true
	return f.owner
}

// TestClusterRouterReadsEachShardsOwnerOncePerPush: a view of ownership
// that changes while a push is split (a lease running out) sends all of a
// partition's items one way, so their order holds: here they all go to
// the owner the first answer named.
func TestClusterRouterReadsEachShardsOwnerOncePerPush(t *testing.T) {
	nc := connectNATS(t, 0)
	remote := servingAll(t, nc, 4)
	local := &recorder{got: map[string][]string{}}
	r := newRouter(t, RouterConfig{Conn: nc, Count: 4, Owners: &flipOwner{owner: testOwner, called: map[int]bool{}}, Local: local})
	var items []*queen.Item
	for i := range 20 {
		items = append(items, &queen.Item{Queue: "q", Partition: "p", TransactionID: fmt.Sprintf("t%02d", i), Payload: []byte(`{}`)})
	}
	for i, x := range r.Push(context.Background(), items) {
		require.Equal(t, queen.Queued, x.Verdict, "item %d: %+v", i, x.Err)
		require.Equal(t, int64(i), x.Offset, "item %d", i)
	}
	require.Empty(t, local.got, "no item of the partition was served here")
	require.Len(t, remote.got["q/p"], 20)
}

// TestClusterRouterSendsNothingAfterAnUnknownOutcome: once a chunk of a
// hop is not answered in time (the owner may still commit it), the hop's
// later chunks are neither sent nor served here, where they could
// overtake it: every item is answered failed with timeout, one chunk sent.
func TestClusterRouterSendsNothingAfterAnUnknownOutcome(t *testing.T) {
	nc := connectNATS(t, 64<<10)
	var got atomic.Int64
	sub, err := nc.QueueSubscribe(SubjectPrefix+".*.push", queueGroup, func(*nats.Msg) { got.Add(1) }) // never answers
	require.NoError(t, err)
	defer sub.Unsubscribe() //nolint:errcheck
	require.NoError(t, nc.Flush())
	local := &recorder{got: map[string][]string{}}
	r := newRouter(t, RouterConfig{Conn: nc, Count: 1, Owners: owners(testOwner), Local: local, HopTimeout: 100 * time.Millisecond})
	payload := []byte(`"` + strings.Repeat("x", 1000) + `"`)
	var items []*queen.Item
	for i := range 200 { // about 200 KiB: several chunks below 64 KiB
		items = append(items, &queen.Item{Queue: "q", Partition: fmt.Sprintf("p%d", i%3), TransactionID: fmt.Sprintf("t%03d", i), Payload: payload})
	}
	for i, x := range r.Push(context.Background(), items) {
		require.Equal(t, queen.Failed, x.Verdict, "item %d", i)
		require.ErrorIs(t, x.Err, queen.ErrTimeout, "item %d", i)
	}
	require.Empty(t, local.got, "nothing served here behind a chunk whose outcome is unknown")
	require.Equal(t, uint64(1), r.Stats().Hops, "one chunk sent")
	require.Eventually(t, func() bool { return got.Load() == 1 }, 10*time.Second, time.Millisecond)
}

// TestClusterRouterBoundsAHopToADeadOwner: an owner that received a hop and
// never answers (killed mid-request) holds the push only for the hop
// timeout; its items are answered failed with timeout (outcome unknown).
func TestClusterRouterBoundsAHopToADeadOwner(t *testing.T) {
	nc := connectNATS(t, 0)
	sub, err := nc.QueueSubscribe(SubjectPrefix+".*.push", queueGroup, func(*nats.Msg) {}) // never answers
	require.NoError(t, err)
	defer sub.Unsubscribe() //nolint:errcheck
	require.NoError(t, nc.Flush())
	rec := &recorder{got: map[string][]string{}}
	r := newRouter(t, RouterConfig{Conn: nc, Count: 4, Owners: owners(testOwner), Local: rec, HopTimeout: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := r.Push(ctx, []*queen.Item{{Queue: "q", Partition: "p", TransactionID: "t", Payload: []byte(`{}`)}})
	require.Equal(t, queen.Failed, res[0].Verdict)
	require.ErrorIs(t, res[0].Err, queen.ErrTimeout)
	require.NoError(t, ctx.Err(), "the push ended at the hop timeout, not the request's deadline")
	require.Empty(t, rec.got, "an unanswered hop is never served here too (its outcome is unknown)")
}

// TestRouterServesItemsAboveMaxPayloadHere: with a NATS server whose
// max_payload (64 KiB here, 1 MiB for a default external server) is below
// one item, the cluster router serves that item on this broker, in order with
// the shard's other items, instead of failing it; a router without a local
// pusher answers it failed with payload_too_large (not retryable).
func TestRouterServesItemsAboveMaxPayloadHere(t *testing.T) {
	nc := connectNATS(t, 64<<10)
	remote := &recorder{got: map[string][]string{}}
	s := newServer(t, ServerConfig{Conn: nc, Pusher: remote, Count: 1})
	require.NoError(t, s.ServeAll())
	defer s.Stop(context.Background()) //nolint:errcheck
	local := &recorder{got: map[string][]string{}}
	r := newRouter(t, RouterConfig{Conn: nc, Count: 1, Owners: owners(testOwner), Local: local})

	small, big := []byte(`{}`), []byte(`"`+strings.Repeat("x", 100<<10)+`"`)
	items := []*queen.Item{
		{Queue: "q", Partition: "p", TransactionID: "a", Payload: small},
		{Queue: "q", Partition: "p", TransactionID: "b", Payload: big},
		{Queue: "q", Partition: "p", TransactionID: "c", Payload: small},
	}
	res := r.Push(context.Background(), items)
	for i, x := range res {
		require.Equal(t, queen.Queued, x.Verdict, "item %d: %+v", i, x.Err)
	}
	require.Equal(t, []string{"a", "c"}, remote.got["q/p"], "the items that fit go to the owner")
	require.Equal(t, []string{"b"}, local.got["q/p"], "the one above max_payload is served here")
	require.EqualValues(t, 1, r.Stats().Fallback)

	res = newRouter(t, RouterConfig{Conn: nc, Count: 1}).Push(context.Background(), items[1:2])
	require.Equal(t, queen.Failed, res[0].Verdict)
	require.Equal(t, "payload_too_large", res[0].Err.Code)
	require.False(t, res[0].Err.Retryable)
}

// blocker is a PartitionPusher whose Enqueue waits until release is closed,
// holding the shard subscription's goroutine so its pending queue fills.
type blocker struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blocker) Enqueue(_, _ string, items []*queen.Item) (Waiter, error) {
	b.once.Do(func() { close(b.entered) })
	<-b.release
	return make(done, len(items)), nil
}

// TestShardSubscriptionPendingIsBounded: a shard subscription holds at most
// PendingMsgs received messages while its handler is busy; the NATS client
// drops the rest and Server.Dropped counts them.
func TestShardSubscriptionPendingIsBounded(t *testing.T) {
	nc := connectNATS(t, 0)
	b := &blocker{entered: make(chan struct{}), release: make(chan struct{})}
	s := newServer(t, ServerConfig{Conn: nc, Pusher: b, Count: 1, PendingMsgs: 2, PendingBytes: 1 << 20})
	require.NoError(t, s.ServeAll())
	defer s.Stop(context.Background()) //nolint:errcheck
	defer close(b.release)
	body := encodeItems(nil, []*queen.Item{{Queue: "q", Partition: "p", TransactionID: "t", Payload: []byte(`{}`)}})
	require.NoError(t, nc.Publish(wire.ShardPushSubject(0), body))
	<-b.entered // the handler is busy from now on
	require.Zero(t, s.Dropped())
	for range 10 {
		require.NoError(t, nc.Publish(wire.ShardPushSubject(0), body))
	}
	require.NoError(t, nc.Flush())
	// At most 2 of the 10 wait (the NATS client may keep fewer): 8 or more dropped.
	require.Eventually(t, func() bool { return s.Dropped() >= 8 }, 10*time.Second, time.Millisecond,
		"10 published to a busy subscription holding at most 2")
	require.LessOrEqual(t, s.Dropped(), uint64(10))
}

// subRecorder is a PartitionPusher recording each item's ProducerSub.
type subRecorder struct {
	mu   sync.Mutex
	subs map[string]string // transactionId → ProducerSub
}

func (r *subRecorder) Enqueue(_, _ string, items []*queen.Item) (Waiter, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(done, len(items))
	for i, it := range items {
		r.subs[it.TransactionID] = it.ProducerSub
		out[i] = queen.Result{Verdict: queen.Queued}
	}
	return out, nil
}

// TestHopCarriesTheProducer: the producer identity of a push (SPEC.md §14,
// queen.Item.ProducerSub) reaches the shard's owner in the hop header
// wire.HeaderProducerSub; items without one arrive without one.
func TestHopCarriesTheProducer(t *testing.T) {
	nc := connectNATS(t, 1<<20)
	rec := &subRecorder{subs: map[string]string{}}
	s := newServer(t, ServerConfig{Conn: nc, Pusher: rec, Count: 4})
	require.NoError(t, s.ServeAll())
	defer s.Stop(context.Background()) //nolint:errcheck
	r := newRouter(t, RouterConfig{Conn: nc, Count: 4})
	var items []*queen.Item
	for i := 0; i < 8; i++ {
		items = append(items, &queen.Item{Queue: "q", Partition: fmt.Sprintf("p%d", i), TransactionID: fmt.Sprintf("a%d", i), Payload: []byte(`1`), ProducerSub: "svc-a"})
	}
	items = append(items, &queen.Item{Queue: "q", Partition: "p0", TransactionID: "anon", Payload: []byte(`1`)})
	for _, res := range r.Push(context.Background(), items) {
		require.Equal(t, queen.Queued, res.Verdict)
	}
	for i := 0; i < 8; i++ {
		require.Equal(t, "svc-a", rec.subs[fmt.Sprintf("a%d", i)])
	}
	require.Contains(t, rec.subs, "anon")
	require.Empty(t, rec.subs["anon"])
}

// TestHopIsAuthenticated (SPEC.md §14): with ServerConfig.Authenticate set
// (JWT on), a hop in the brokers' encoding must carry a token that passes
// it: without one it is refused with the check's error and nothing reaches
// a partition; with a read-write token its items carry the token's
// producer whatever the hop's producer header says; with an admin token
// (a DLQ replay) the header's. The Router sends the request's token along.
func TestHopIsAuthenticated(t *testing.T) {
	nc := connectNATS(t, 1<<20)
	rec := &subRecorder{subs: map[string]string{}}
	tokens := map[string]struct {
		sub   string
		admin bool
	}{"Bearer rw": {"svc-a", false}, "Bearer boss": {"ops", true}}
	s := newServer(t, ServerConfig{Conn: nc, Pusher: rec, Count: 1,
		Authenticate: func(_ context.Context, authorization string) (string, bool, *queen.Error) {
			tk, ok := tokens[authorization]
			if !ok {
				return "", false, queen.ErrUnauthorized.With("no token")
			}
			return tk.sub, tk.admin, nil
		}})
	require.NoError(t, s.ServeAll())
	defer s.Stop(context.Background()) //nolint:errcheck
	hop := func(txn, authorization, producer string) *nats.Msg {
		t.Helper()
		req := nats.NewMsg(wire.ShardPushSubject(0))
		req.Data = encodeItems(nil, []*queen.Item{{Queue: "q", Partition: "p", TransactionID: txn, Payload: []byte(`1`)}})
		if authorization != "" {
			req.Header.Set(wire.HeaderAuthorization, authorization)
		}
		if producer != "" {
			req.Header.Set(wire.HeaderProducerSub, producer)
		}
		msg, err := nc.RequestMsg(req, 5*time.Second)
		require.NoError(t, err)
		return msg
	}
	for _, authorization := range []string{"", "Bearer forged"} {
		msg := hop("x", authorization, "spoof")
		require.Equal(t, "401", msg.Header.Get(ErrorCodeHeader), "%s", msg.Data)
	}
	require.Empty(t, rec.subs, "nothing reached a partition")
	hop("rw", "Bearer rw", "spoof")
	require.Equal(t, "svc-a", rec.subs["rw"], "the token's producer, not the header's")
	hop("replay", "Bearer boss", "original")
	require.Equal(t, "original", rec.subs["replay"], "an admin pushes on behalf of the header's producer")

	r := newRouter(t, RouterConfig{Conn: nc, Count: 1})
	it := &queen.Item{Queue: "q", Partition: "p", TransactionID: "routed", Payload: []byte(`1`), ProducerSub: "svc-a"}
	require.Equal(t, queen.ErrUnauthorized.Code, r.Push(context.Background(), []*queen.Item{it})[0].Err.Code, "no token in the context")
	res := r.Push(queen.WithAuthorization(context.Background(), "Bearer rw"), []*queen.Item{it})
	require.Equal(t, queen.Queued, res[0].Verdict)
	require.Equal(t, "svc-a", rec.subs["routed"])
}

package transport_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport"
)

// The handler tests drive the front doors (HTTP requests, NATS messages)
// of a transport.Service whose pusher, queues and consumer are fakes: they
// prove decoding, routing and reply encoding without PostgreSQL. The fakes
// record what reached them, so a refused request is seen to write nothing.

// fakeBroker is the Service's Pusher, Queues and Consumer in one.
type fakeBroker struct {
	dead []queen.DeadLetter // DeadLetters' list
	mu   sync.Mutex

	pushed [][]*queen.Item
	// verdict, when set, answers item i of a push; default queued at
	// offset i.
	verdict func(i int, it *queen.Item) queen.Result

	configured []queen.ConfigureRequest

	pops   []queen.PopRequest
	popRes queen.PopResult
	popErr error

	acks   [][]queen.AckItem
	ackErr error

	extended  []extendCall
	extendAt  time.Time
	extendErr error
}

type extendCall struct {
	lease   uuid.UUID
	seconds int64
}

func newFake() *fakeBroker { return &fakeBroker{} }

// service returns a Service over f; token is the admin token ("" none).
func (f *fakeBroker) service(t *testing.T, token string) *transport.Service {
	t.Helper()
	s := transport.NewService(transport.Config{Pusher: f, Queues: f, Consumer: f, AdminToken: token})
	t.Cleanup(s.StopPolls)
	return s
}

// calls reports how many requests reached the fake, of any kind.
func (f *fakeBroker) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pushed) + len(f.configured) + len(f.pops) + len(f.acks) + len(f.extended)
}

func (f *fakeBroker) Push(_ context.Context, items []*queen.Item) []queen.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pushed = append(f.pushed, items)
	out := make([]queen.Result, len(items))
	for i, it := range items {
		if f.verdict != nil {
			out[i] = f.verdict(i, it)
			continue
		}
		out[i] = queen.Result{Verdict: queen.Queued, MessageID: uuid.NewSHA1(uuid.NameSpaceOID, []byte(it.TransactionID)),
			PartitionID: uuid.NewSHA1(uuid.NameSpaceURL, []byte(it.Partition)), Offset: int64(i)}
	}
	return out
}

func (f *fakeBroker) Configure(_ context.Context, req queen.ConfigureRequest) (queen.ConfigureResult, error) {
	f.mu.Lock()
	f.configured = append(f.configured, req)
	f.mu.Unlock()
	created := true
	next := req.Options.Apply(queen.DefaultOptions())
	if req.Guard != nil {
		if err := req.Guard(created, queen.DefaultOptions(), next); err != nil {
			return queen.ConfigureResult{}, err
		}
	}
	return queen.ConfigureResult{Queue: req.Queue, Namespace: req.Namespace, Task: req.Task, Options: next, Created: created}, nil
}

func (f *fakeBroker) Queue(_ context.Context, name string) (queen.QueueInfo, error) {
	return queen.QueueInfo{}, queen.ErrNotFound.With("queue %q does not exist", name)
}

func (f *fakeBroker) Ping(context.Context) error { return nil }

func (f *fakeBroker) Pop(_ context.Context, req queen.PopRequest) (queen.PopResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pops = append(f.pops, req)
	return f.popRes, f.popErr
}

func (f *fakeBroker) Ack(_ context.Context, items []queen.AckItem) ([]queen.AckResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acks = append(f.acks, items)
	if f.ackErr != nil {
		return nil, f.ackErr
	}
	out := make([]queen.AckResult, len(items))
	for i, it := range items {
		off := it.Offset
		out[i] = queen.AckResult{Index: i, Success: true, Result: queen.Acked, TransactionID: it.TransactionID,
			PartitionID: it.PartitionID.String(), Offset: &off, Cursor: &off}
	}
	return out, nil
}

func (f *fakeBroker) ExtendLease(_ context.Context, lease uuid.UUID, seconds int64) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.extended = append(f.extended, extendCall{lease, seconds})
	return f.extendAt, f.extendErr
}

// DeadLetters pages f.dead as the store does (offset, limit; the total of
// the whole list).
func (f *fakeBroker) DeadLetters(_ context.Context, q queen.DLQFilter) ([]queen.DeadLetter, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	lo := min(q.Offset, len(f.dead))
	hi := min(lo+q.Limit, len(f.dead))
	return append([]queen.DeadLetter{}, f.dead[lo:hi]...), int64(len(f.dead)), nil
}

func (f *fakeBroker) DeleteQueue(context.Context, string) (bool, int64, error) { return false, 0, nil }

func (f *fakeBroker) ListQueues(context.Context) ([]queen.QueueSummary, error) { return nil, nil }

func (f *fakeBroker) DeleteGroup(context.Context, string) (int64, error) { return 0, nil }

func (f *fakeBroker) Seek(context.Context, string, string, queen.SeekRequest) (int, error) {
	return 0, nil
}

func (f *fakeBroker) SetSubscription(context.Context, string, time.Time) (int, error) { return 0, nil }

func (f *fakeBroker) Transaction(context.Context, *queen.TxnRequest) ([]queen.TxnOpResult, error) {
	return nil, queen.ErrUnavailable.With("not in the fake")
}

// apiError is the JSON error body of SPEC.md §10.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	Index *int   `json:"index"`
	Field string `json:"field"`
}

func decodeError(t *testing.T, body []byte) apiError {
	t.Helper()
	var e apiError
	require.NoError(t, json.Unmarshal(body, &e), "error body %s", body)
	require.NotEmpty(t, e.Code, "error body %s", body)
	require.NotEmpty(t, e.Error, "error body %s", body)
	return e
}

// badRequest is one refused request: its body (or query) and the answer.
type badRequest struct {
	name   string
	in     string
	status int
	code   string
	field  string
	index  int // -1: none
}

// pushRefusals are push bodies refused before any write (SPEC.md §10),
// shared by the HTTP and NATS tests.
var pushRefusals = []badRequest{
	{"invalid JSON", `{"items":[`, 400, "invalid_json", "", -1},
	{"not an object", `[1]`, 400, "", "", -1},
	{"missing items", `{}`, 400, "missing_field", "items", -1},
	{"missing queue", `{"items":[{"partition":"p"}]}`, 400, "missing_field", "items[0].queue", 0},
	{"queue of the wrong type", `{"items":[{"queue":"q"},{"queue":7}]}`, 400, "", "items[1].queue", 1},
	{"control character in a partition", `{"items":[{"queue":"q","partition":"a\u0001b"}]}`, 400, "", "items[0].partition", 0},
	{"transactionId over 1024 bytes", `{"items":[{"queue":"q","transactionId":"` + string(make1025()) + `"}]}`, 400, "", "items[0].transactionId", 0},
	{"lone surrogate", `{"items":[{"queue":"q","transactionId":"\ud800"}]}`, 400, "", "", -1},
	{"invalid UTF-8", "{\"items\":[{\"queue\":\"q\xff\"}]}", 400, "", "", -1},
}

func make1025() []byte {
	b := make([]byte, 1025)
	for i := range b {
		b[i] = 'x'
	}
	return b
}

// checkRefusal checks an error answer against r.
func checkRefusal(t *testing.T, r badRequest, status int, body []byte) {
	t.Helper()
	require.Equal(t, r.status, status, "%s: %s", r.name, body)
	e := decodeError(t, body)
	if r.code != "" {
		require.Equal(t, r.code, e.Code, "%s: %s", r.name, body)
	}
	if r.field != "" {
		require.Equal(t, r.field, e.Field, "%s: %s", r.name, body)
	}
	if r.index >= 0 {
		require.NotNil(t, e.Index, "%s: %s", r.name, body)
		require.Equal(t, r.index, *e.Index, "%s", r.name)
	}
}

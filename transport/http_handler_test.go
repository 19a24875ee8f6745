package transport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport"
)

// do sends one request to h and returns the status, headers and body.
func do(t *testing.T, h http.Handler, method, target, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, r)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code, w.Header(), w.Body.Bytes()
}

func TestHTTPPushRoutesAndEncodes(t *testing.T) {
	f := newFake()
	h := f.service(t, "").Handler()
	status, hdr, body := do(t, h, "POST", "/api/v1/push",
		`{"items":[{"queue":"q","transactionId":"t1","payload":{"a":1}},{"queue":"q","partition":"p","transactionId":"t2","data":[2],"traceId":"tr"},{"queue":"q"}]}`)
	require.Equal(t, http.StatusCreated, status, "%s", body)
	require.Equal(t, "application/json", hdr.Get("Content-Type"))
	require.Len(t, f.pushed, 1)
	items := f.pushed[0]
	require.Len(t, items, 3)
	require.Equal(t, "Default", items[0].Partition, "partition defaults to Default")
	require.JSONEq(t, `{"a":1}`, string(items[0].Payload))
	require.Equal(t, queen.HashTxn("t1"), items[0].Hash, "the transport hashes")
	require.JSONEq(t, `[2]`, string(items[1].Payload), "data is an alias of payload")
	require.Equal(t, "tr", *items[1].TraceID)
	require.NotEmpty(t, items[2].TransactionID, "an absent transactionId is generated")
	require.JSONEq(t, `{}`, string(items[2].Payload), "payload defaults to {}")

	var reply []map[string]any
	require.NoError(t, json.Unmarshal(body, &reply))
	require.Len(t, reply, 3)
	for i, r := range reply {
		require.Equal(t, float64(i), r["index"])
		require.Equal(t, "queued", r["status"])
		require.Equal(t, "q", r["queueName"], "the Queen wire's queueName")
		require.Equal(t, items[i].TransactionID, r["transaction_id"])
		require.Equal(t, items[i].Partition, r["partition"])
		require.NotEmpty(t, r["message_id"])
		require.NotEmpty(t, r["partition_id"])
	}
	require.Nil(t, reply[0]["trace_id"])
	require.Equal(t, "tr", reply[1]["trace_id"])
}

func TestHTTPPushEmptyAndAllFailed(t *testing.T) {
	f := newFake()
	h := f.service(t, "").Handler()
	status, _, body := do(t, h, "POST", "/api/v1/push", `{"items":[]}`)
	require.Equal(t, http.StatusCreated, status)
	require.JSONEq(t, `[]`, string(body))
	require.Zero(t, f.calls(), "an empty push reaches nobody")

	f.verdict = func(int, *queen.Item) queen.Result {
		return queen.FailedResult(uuid.Nil, queen.ErrOverloaded.With("busy"))
	}
	status, hdr, body := do(t, h, "POST", "/api/v1/push", `{"items":[{"queue":"q"},{"queue":"q"}]}`)
	require.Equal(t, http.StatusServiceUnavailable, status, "every item failed")
	require.NotEmpty(t, hdr.Get("Retry-After"))
	var reply []map[string]any
	require.NoError(t, json.Unmarshal(body, &reply))
	require.Len(t, reply, 2, "the same per-item array")
	require.Equal(t, "failed", reply[0]["status"])
	require.NotEmpty(t, reply[0]["code"])

	// One verdict among failures: 201.
	f.verdict = func(i int, it *queen.Item) queen.Result {
		if i == 0 {
			return queen.Result{Verdict: queen.Duplicate, MessageID: uuid.New(), Offset: 3}
		}
		return queen.FailedResult(uuid.Nil, queen.ErrUnavailable.With("down"))
	}
	status, _, _ = do(t, h, "POST", "/api/v1/push", `{"items":[{"queue":"q"},{"queue":"q"}]}`)
	require.Equal(t, http.StatusCreated, status)
}

func TestHTTPPushRefusalsWriteNothing(t *testing.T) {
	f := newFake()
	h := f.service(t, "").Handler()
	for _, r := range pushRefusals {
		t.Run(r.name, func(t *testing.T) {
			status, hdr, body := do(t, h, "POST", "/api/v1/push", r.in)
			require.Equal(t, "application/json", hdr.Get("Content-Type"))
			checkRefusal(t, r, status, body)
		})
	}
	t.Run("over 10000 items", func(t *testing.T) {
		status, _, body := do(t, h, "POST", "/api/v1/push", `{"items":[`+strings.Repeat(`{"queue":"q"},`, 10000)+`{"queue":"q"}]}`)
		checkRefusal(t, badRequest{"over 10000 items", "", 400, "", "", -1}, status, body)
	})
	t.Run("body over 16 MiB", func(t *testing.T) {
		big := `{"items":[{"queue":"q","payload":"` + strings.Repeat("x", queen.MaxBodyBytes) + `"}]}`
		status, _, body := do(t, h, "POST", "/api/v1/push", big)
		require.Equal(t, http.StatusRequestEntityTooLarge, status, "%.200s", body)
		decodeError(t, body)
	})
	require.Zero(t, f.calls(), "no refused request reached the broker")
}

func TestHTTPPopDecodesQueryAndEncodesReply(t *testing.T) {
	f := newFake()
	h := f.service(t, "").Handler()
	status, hdr, body := do(t, h, "GET", "/api/v1/pop/queue/q?batch=5&consumerGroup=g&autoAck=true&subscriptionMode=new-only&partitions=3", "")
	require.Equal(t, http.StatusNoContent, status, "nothing available")
	require.Empty(t, body)
	require.Empty(t, hdr.Get("Content-Type"))
	req := f.pops[0]
	require.Equal(t, queen.PopRequest{Queue: "q", Batch: 5, ConsumerGroup: "g", AutoAck: true, SubscriptionNew: true, Partitions: 3, Timeout: req.Timeout}, req)

	for mode, isNew := range map[string]bool{"all": false, "from_beginning": false, "new": true, "new-only": true} {
		f.pops = nil
		status, _, body = do(t, h, "GET", "/api/v1/pop/queue/q/partition/p?subscriptionMode="+mode, "")
		require.Equal(t, http.StatusNoContent, status, "%s", body)
		require.Equal(t, isNew, f.pops[0].SubscriptionNew, mode)
		require.Equal(t, "p", f.pops[0].Partition)
		require.Equal(t, 1, f.pops[0].Batch, "batch defaults to 1")
		require.Equal(t, queen.DefaultConsumerGroup, f.pops[0].ConsumerGroup)
	}

	f.pops = nil
	status, _, _ = do(t, h, "GET", "/api/v1/pop?namespace=n&task=t&wait=true&timeout=1", "")
	require.Equal(t, http.StatusNoContent, status)
	require.Equal(t, "n", f.pops[0].Namespace)
	require.Equal(t, "t", f.pops[0].Task)
	require.True(t, f.pops[0].Wait)
	require.Equal(t, time.Millisecond, f.pops[0].Timeout)

	lease := uuid.NewString()
	f.popRes = queen.PopResult{Messages: []queen.Message{{ID: uuid.NewString(), TransactionID: "t", Data: json.RawMessage(`{"x":1}`),
		PartitionID: uuid.NewString(), Partition: "p", Queue: "q", Offset: 7, LeaseID: &lease, ConsumerGroup: "g", RetryCount: 2}},
		LeaseID: &lease, Queue: "q", Partition: "p"}
	status, _, body = do(t, h, "GET", "/api/v1/pop/queue/q", "")
	require.Equal(t, http.StatusOK, status)
	var got map[string]any
	require.NoError(t, json.Unmarshal(body, &got))
	require.Equal(t, lease, got["leaseId"])
	m := got["messages"].([]any)[0].(map[string]any)
	require.Equal(t, "t", m["transactionId"])
	require.Equal(t, map[string]any{"x": float64(1)}, m["data"])
	require.Equal(t, float64(7), m["offset"])
	require.Equal(t, float64(2), m["retryCount"])
	require.Equal(t, lease, m["leaseId"])
}

func TestHTTPPopRefusals(t *testing.T) {
	f := newFake()
	h := f.service(t, "").Handler()
	for _, r := range []badRequest{
		{"batch not a number", "batch=abc", 400, "", "batch", -1},
		{"batch over 10000", "batch=10001", 400, "invalid_field", "batch", -1},
		{"consumerGroup with a control character", "consumerGroup=a%01", 400, "", "consumerGroup", -1},
		{"partitions negative", "partitions=-1", 400, "", "partitions", -1},
		{"partitions over 100", "partitions=101", 400, "invalid_field", "partitions", -1},
		{"wait not a boolean", "wait=maybe", 400, "invalid_field", "wait", -1},
		{"subscriptionFrom not a time", "subscriptionFrom=yesterday", 400, "", "subscriptionFrom", -1},
	} {
		t.Run(r.name, func(t *testing.T) {
			status, _, body := do(t, h, "GET", "/api/v1/pop/queue/q?"+r.in, "")
			checkRefusal(t, r, status, body)
		})
	}
	status, hdr, body := do(t, h, "GET", "/api/v1/pop", "")
	require.Equal(t, "application/json", hdr.Get("Content-Type"))
	checkRefusal(t, badRequest{"no queue and no label", "", 400, "missing_field", "queue", -1}, status, body)
	require.Zero(t, f.calls())
	f.popErr = queen.ErrUnavailable.With("database down")
	status, hdr, body = do(t, h, "GET", "/api/v1/pop/queue/q", "")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.NotEmpty(t, hdr.Get("Retry-After"))
	require.Equal(t, "unavailable", decodeError(t, body).Code)
}

func TestHTTPAck(t *testing.T) {
	f := newFake()
	h := f.service(t, "").Handler()
	pid, lease := uuid.New(), uuid.New()
	status, _, body := do(t, h, "POST", "/api/v1/ack",
		`{"partitionId":"`+pid.String()+`","offset":4,"status":"failed","error":"boom","leaseId":"`+lease.String()+`","consumerGroup":"g"}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	it := f.acks[0][0]
	require.Equal(t, queen.AckItem{PartitionID: pid, Offset: 4, Status: queen.AckFailed, Error: "boom", LeaseID: &lease, ConsumerGroup: "g"}, it)
	var res map[string]any
	require.NoError(t, json.Unmarshal(body, &res))
	require.Equal(t, "acked", res["result"])
	require.Equal(t, true, res["success"])

	f.acks = nil
	status, _, body = do(t, h, "POST", "/api/v1/ack", `{"partitionId":"`+pid.String()+`","transactionId":"t","status":"success"}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Equal(t, queen.AckCompleted, f.acks[0][0].Status, "success is completed")
	require.Equal(t, int64(-1), f.acks[0][0].Offset)
	require.Equal(t, queen.HashTxn("t"), f.acks[0][0].Hash)

	f.acks = nil
	status, _, body = do(t, h, "POST", "/api/v1/ack/batch",
		`{"consumerGroup":"g","acknowledgments":[{"partitionId":"`+pid.String()+`","offset":1},{"partitionId":"`+pid.String()+`","offset":2,"consumerGroup":"h"}]}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Equal(t, "g", f.acks[0][0].ConsumerGroup, "the body's group")
	require.Equal(t, "h", f.acks[0][1].ConsumerGroup, "the item's own group")
	var batch []map[string]any
	require.NoError(t, json.Unmarshal(body, &batch))
	require.Len(t, batch, 2)
	require.Equal(t, float64(1), batch[1]["index"])

	f.acks = nil
	for _, r := range []badRequest{
		{"missing partitionId", `{"offset":1}`, 400, "missing_field", "partitionId", -1},
		{"partitionId not a UUID", `{"partitionId":"x","offset":1}`, 400, "invalid_field", "partitionId", -1},
		{"negative offset", `{"partitionId":"` + pid.String() + `","offset":-2}`, 400, "invalid_field", "offset", -1},
		{"unknown status", `{"partitionId":"` + pid.String() + `","offset":1,"status":"maybe"}`, 400, "", "status", -1},
	} {
		t.Run(r.name, func(t *testing.T) {
			status, _, body := do(t, h, "POST", "/api/v1/ack", r.in)
			checkRefusal(t, r, status, body)
		})
	}
	status, _, body = do(t, h, "POST", "/api/v1/ack/batch", `{"acknowledgments":[{"partitionId":"`+pid.String()+`","offset":1},{"offset":1}]}`)
	checkRefusal(t, badRequest{"batch item", "", 400, "missing_field", "acknowledgments[1].partitionId", 1}, status, body)
	require.Empty(t, f.acks, "a refused ack reaches nobody")

	f.ackErr = queen.ErrInvalidField.With("transactionId is not the message at offset 1").At(0, "transactionId")
	status, _, body = do(t, h, "POST", "/api/v1/ack", `{"partitionId":"`+pid.String()+`","offset":1,"transactionId":"t"}`)
	checkRefusal(t, badRequest{"store refusal", "", 400, "invalid_field", "transactionId", 0}, status, body)
}

func TestHTTPLeaseExtend(t *testing.T) {
	f := newFake()
	h := f.service(t, "").Handler()
	lease := uuid.New()
	f.extendAt = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	status, _, body := do(t, h, "POST", "/api/v1/lease/"+lease.String()+"/extend", `{"seconds":60}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Equal(t, extendCall{lease, 60}, f.extended[0])
	require.JSONEq(t, `{"leaseId":"`+lease.String()+`","newExpiresAt":"2026-12-01T00:00:00Z","success":true}`, string(body))

	status, _, body = do(t, h, "POST", "/api/v1/lease/nope/extend", `{"seconds":60}`)
	checkRefusal(t, badRequest{"lease not a UUID", "", 400, "invalid_field", "leaseId", -1}, status, body)
	status, _, body = do(t, h, "POST", "/api/v1/lease/"+lease.String()+"/extend", `{"seconds":"a"}`)
	checkRefusal(t, badRequest{"seconds not a number", "", 400, "", "seconds", -1}, status, body)
	require.Len(t, f.extended, 1)

	f.extendErr = queen.ErrLeaseInvalid.With("lease %s is not live", lease)
	status, _, body = do(t, h, "POST", "/api/v1/lease/"+lease.String()+"/extend", `{}`)
	require.Equal(t, http.StatusConflict, status, "%s", body)
	require.Equal(t, "lease_invalid", decodeError(t, body).Code)
}

func TestHTTPConfigure(t *testing.T) {
	f := newFake()
	h := f.service(t, "").Handler()
	status, _, body := do(t, h, "POST", "/api/v1/configure", `{"queue":"q","namespace":"n","options":{"dedupWindowSeconds":60,"leaseTime":5}}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	req := f.configured[0]
	require.Equal(t, "q", req.Queue)
	require.Equal(t, "n", req.Namespace)
	require.True(t, req.NamespaceSet)
	require.False(t, req.TaskSet)
	require.False(t, req.Merge, "a full replace by default")
	var got map[string]any
	require.NoError(t, json.Unmarshal(body, &got))
	require.Equal(t, true, got["configured"])
	opts := got["options"].(map[string]any)
	require.Equal(t, float64(60), opts["dedupWindowSeconds"])
	require.Equal(t, float64(3), opts["retryLimit"], "every option in the reply")

	for _, r := range []badRequest{
		{"misspelt option", `{"queue":"q","options":{"dedupWindowSecond":60}}`, 400, "", "options.dedupWindowSecond", -1},
		{"negative number", `{"queue":"q","options":{"leaseTime":-1}}`, 400, "", "options.leaseTime", -1},
		{"wrong type", `{"queue":"q","options":{"dedupCheckPayload":"yes"}}`, 400, "", "options.dedupCheckPayload", -1},
		{"missing queue", `{"options":{}}`, 400, "missing_field", "queue", -1},
	} {
		t.Run(r.name, func(t *testing.T) {
			status, _, body := do(t, h, "POST", "/api/v1/configure", r.in)
			checkRefusal(t, r, status, body)
		})
	}
	require.Len(t, f.configured, 1, "refused configures reach nobody")
}

func TestHTTPRoutingErrors(t *testing.T) {
	f := newFake()
	h := f.service(t, "").Handler()
	status, _, body := do(t, h, "GET", "/api/v1/nope", "")
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, "not_found", decodeError(t, body).Code)
	status, hdr, body := do(t, h, "GET", "/api/v1/push", "")
	require.Equal(t, http.StatusMethodNotAllowed, status)
	require.Equal(t, "POST", hdr.Get("Allow"))
	decodeError(t, body)
	require.Zero(t, f.calls())
}

// With an admin token, admin routes need it; the message plane does not.
func TestHTTPAdminToken(t *testing.T) {
	f := newFake()
	h := f.service(t, "s3cret").Handler()
	status, _, body := do(t, h, "GET", "/api/v1/dlq?queue=q", "")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, "unauthorized", decodeError(t, body).Code)
	status, _, _ = do(t, h, "GET", "/api/v1/dlq?queue=q", "", "Authorization", "Bearer wrong")
	require.Equal(t, http.StatusUnauthorized, status)
	status, _, body = do(t, h, "GET", "/api/v1/dlq?queue=q", "", "Authorization", "Bearer s3cret")
	require.Equal(t, http.StatusOK, status, "%s", body)
	status, _, _ = do(t, h, "POST", "/api/v1/push", `{"items":[{"queue":"q"}]}`)
	require.Equal(t, http.StatusCreated, status, "push never asks for the token")
	status, _, _ = do(t, h, "GET", "/api/v1/pop/queue/q", "")
	require.Equal(t, http.StatusNoContent, status)
}

// A long poll parked in the consumer is answered (204) when the service
// stops its polls (a shutdown does not wait for poll timeouts).
func TestHTTPLongPollEndsAtStopPolls(t *testing.T) {
	f := &blockingPops{fakeBroker: newFake(), parked: make(chan struct{})}
	svc := transport.NewService(transport.Config{Pusher: f, Queues: f, Consumer: f})
	done := make(chan int, 1)
	go func() {
		w := httptest.NewRecorder()
		svc.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/api/v1/pop/queue/q?wait=true&timeout=600000", nil))
		done <- w.Code
	}()
	<-f.parked
	svc.StopPolls()
	require.Equal(t, http.StatusNoContent, <-done)
}

// blockingPops parks every pop until its context ends.
type blockingPops struct {
	*fakeBroker
	parked chan struct{}
}

func (b *blockingPops) Pop(ctx context.Context, _ queen.PopRequest) (queen.PopResult, error) {
	close(b.parked)
	<-ctx.Done()
	return queen.PopResult{}, nil
}

// countingPops signals each pop's arrival on parked and parks a long poll
// until its context ends (a pop without wait answers empty at once).
type countingPops struct {
	*fakeBroker
	parked chan struct{}
}

func (b *countingPops) Pop(ctx context.Context, req queen.PopRequest) (queen.PopResult, error) {
	b.parked <- struct{}{}
	if req.Wait {
		<-ctx.Done()
	}
	return queen.PopResult{}, nil
}

// TestHTTPParkedPollCaps (issue 38: 8,000 parked polls of one client took a
// broker from 31 to 317 MiB): long polls are capped per client (by address)
// and per broker; one over a cap is answered 429 too_many_polls with
// Retry-After and never reaches the consumer; a poll without wait is never
// capped; the slots come back when the polls are answered.
func TestHTTPParkedPollCaps(t *testing.T) {
	f := &countingPops{fakeBroker: newFake(), parked: make(chan struct{}, 16)}
	svc := transport.NewService(transport.Config{Pusher: f, Queues: f, Consumer: f, MaxParkedPolls: 3, MaxParkedPollsPerClient: 2})
	h := svc.Handler()
	poll := func(ctx context.Context, addr string, wait bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", fmt.Sprintf("/api/v1/pop/queue/q?wait=%v&timeout=600000", wait), nil).WithContext(ctx)
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	done := make(chan int, 8)
	park := func(addr string) context.CancelFunc {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { done <- poll(ctx, addr, true).Code }()
		<-f.parked
		return cancel
	}
	refused := func(addr, what string) {
		t.Helper()
		w := poll(context.Background(), addr, true)
		require.Equal(t, http.StatusTooManyRequests, w.Code, what)
		require.NotEmpty(t, w.Header().Get("Retry-After"), what)
		require.Contains(t, w.Body.String(), `"code":"too_many_polls"`, what)
		require.Len(t, f.parked, 0, "%s: a refused poll reaches the consumer", what)
	}
	first := park("192.0.2.1:1000")
	park("192.0.2.1:1001")
	refused("192.0.2.1:1002", "a third poll of one client")
	park("192.0.2.2:1000")
	refused("192.0.2.3:1000", "a fourth poll on the broker")
	require.Equal(t, http.StatusNoContent, poll(context.Background(), "192.0.2.1:1003", false).Code, "a pop without wait is never capped")
	<-f.parked
	first() // the client's first poll ends (its connection closed): its slot comes back
	require.Equal(t, http.StatusNoContent, <-done)
	park("192.0.2.1:1004")
	svc.StopPolls()
	for i := 0; i < 3; i++ {
		require.Equal(t, http.StatusNoContent, <-done)
	}
}

// TestHTTPHealthDegraded: /health answers 200 "degraded" while the NATS
// connection is down or the database's disk is full, naming which
// ("nats", "storage"), and 200 "healthy" with both "ok" otherwise; the
// build fields stay.
func TestHTTPHealthDegraded(t *testing.T) {
	f := newFake()
	natsState, full := "ok", false
	svc := transport.NewService(transport.Config{Pusher: f, Queues: f, Consumer: f,
		Build:       queen.Build{Release: "r1"},
		NATS:        func() string { return natsState },
		StorageFull: func() bool { return full }})
	t.Cleanup(svc.StopPolls)
	h := svc.Handler()
	health := func() (int, map[string]any) {
		t.Helper()
		status, _, body := do(t, h, "GET", "/health", "")
		var v map[string]any
		require.NoError(t, json.Unmarshal(body, &v), "%s", body)
		return status, v
	}
	status, v := health()
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "healthy", v["status"])
	require.Equal(t, "ok", v["database"])
	require.Equal(t, "ok", v["nats"])
	require.Equal(t, "ok", v["storage"])
	require.Equal(t, "r1", v["release"])

	natsState = "reconnecting"
	status, v = health()
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "degraded", v["status"])
	require.Equal(t, "reconnecting", v["nats"])
	require.Equal(t, "ok", v["storage"])

	natsState, full = "ok", true
	status, v = health()
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "degraded", v["status"])
	require.Equal(t, "full", v["storage"])
	require.Equal(t, "ok", v["nats"])
	require.Equal(t, "r1", v["release"])
}

// TestHTTPDeadLetterPages: the DLQ listing's nextOffset points at the next
// page while dead letters remain, and is absent on the last page (a client
// following it stops); total counts the whole list on every page.
func TestHTTPDeadLetterPages(t *testing.T) {
	f := newFake()
	for i := 0; i < 5; i++ {
		f.dead = append(f.dead, queen.DeadLetter{ID: int64(i + 1), Queue: "q"})
	}
	h := f.service(t, "").Handler()
	var pages [][]int64
	next := 0
	for n := 0; n < 10; n++ {
		status, _, body := do(t, h, "GET", fmt.Sprintf("/api/v1/dlq?queue=q&limit=2&offset=%d", next), "")
		require.Equal(t, http.StatusOK, status, "%s", body)
		var rep struct {
			Messages   []queen.DeadLetter `json:"messages"`
			Total      int64              `json:"total"`
			NextOffset *int               `json:"nextOffset"`
		}
		require.NoError(t, json.Unmarshal(body, &rep))
		require.Equal(t, int64(5), rep.Total)
		var ids []int64
		for _, d := range rep.Messages {
			ids = append(ids, d.ID)
		}
		pages = append(pages, ids)
		if rep.NextOffset == nil {
			break
		}
		next = *rep.NextOffset
	}
	require.Equal(t, [][]int64{{1, 2}, {3, 4}, {5}}, pages)
}

package broker

// End-to-end transactions (SPEC.md §5) over POST /api/v1/transaction, the
// NATS endpoint queen.v1.transaction and the Go client's builder: pushes
// and acks commit together or not at all; a duplicate push raises 409.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/client"
	"github.com/queen-mq/queen-go/transport/wire"
)

// txnReply is a committed transaction's reply.
type txnReply struct {
	Success *bool `json:"success"`
	Results []struct {
		Index         int     `json:"index"`
		Type          string  `json:"type"`
		Success       bool    `json:"success"`
		Items         []reply `json:"items"`
		Result        string  `json:"result"`
		TransactionID string  `json:"transactionId"`
		PartitionID   string  `json:"partitionId"`
		Offset        *int64  `json:"offset"`
		Cursor        *int64  `json:"cursor"`
		Error         string  `json:"error"`
	} `json:"results"`
	Error *string `json:"error"`
}

// txnErr is a rolled-back transaction's reply.
type txnErr struct {
	errBody
	Success       *bool  `json:"success"`
	Item          *int   `json:"item"`
	Queue         string `json:"queue"`
	Partition     string `json:"partition"`
	PartitionID   string `json:"partitionId"`
	TransactionID string `json:"transactionId"`
	MessageID     string `json:"messageId"`
	LeaseID       string `json:"leaseId"`
}

// txn sends a transaction body through via; it returns the status and the
// decoded success or error reply.
func (e *env) txn(t testing.TB, via string, body any) (int, *txnReply, *txnErr) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	raw, ok := body.([]byte)
	if !ok {
		raw = marshal(body)
	}
	r, err := e.tryTxn(ctx, via, raw)
	if err != nil {
		t.Fatalf("transaction via %s: %v", via, err)
	}
	checkTransportContract(t, via, r)
	if r.Status != http.StatusOK {
		var eb txnErr
		if err := json.Unmarshal(r.Raw, &eb); err != nil {
			t.Fatalf("transaction via %s: status %d, body %s: %v", via, r.Status, clip(r.Raw), err)
		}
		if eb.Success == nil || *eb.Success {
			t.Fatalf("transaction via %s: error reply without \"success\":false: %s", via, clip(r.Raw))
		}
		return r.Status, nil, &eb
	}
	var ok2 txnReply
	if err := json.Unmarshal(r.Raw, &ok2); err != nil {
		t.Fatalf("transaction via %s: reply %s: %v", via, clip(r.Raw), err)
	}
	if ok2.Success == nil || !*ok2.Success || ok2.Error != nil {
		t.Fatalf("transaction via %s: 200 without \"success\":true, or with an error: %s", via, clip(r.Raw))
	}
	return r.Status, &ok2, nil
}

func (e *env) tryTxn(ctx context.Context, via string, body []byte) (result, error) {
	return e.do(ctx, via, http.MethodPost, "/api/v1/transaction", wire.SubjectTransaction, body, http.StatusOK)
}

func (e *env) txnOK(t testing.TB, via string, body any) *txnReply {
	t.Helper()
	st, ok, eb := e.txn(t, via, body)
	if st != http.StatusOK {
		t.Fatalf("transaction via %s: status %d, error %+v", via, st, eb)
	}
	return ok
}

func (e *env) txnFail(t testing.TB, via string, body any, status int, code string) *txnErr {
	t.Helper()
	st, _, eb := e.txn(t, via, body)
	if st != status || eb.Code != code {
		t.Fatalf("transaction via %s: status %d code %q (%s), want %d %q", via, st, eb.Code, eb.Error, status, code)
	}
	return eb
}

func txnBody(os ...map[string]any) map[string]any { return map[string]any{"operations": os} }

func txnPush(its ...item) map[string]any { return map[string]any{"type": "push", "items": its} }

func txnAck(a map[string]any) map[string]any {
	out := map[string]any{"type": "ack"}
	for k, v := range a {
		out[k] = v
	}
	return out
}

// cursorOf reads a consumer group's cursor on a partition (-1: no row).
func (e *env) txnCursor(t testing.TB, partitionID, group string) int64 {
	t.Helper()
	var c int64 = -1
	err := e.db.QueryRow(context.Background(), `SELECT "cursor" FROM queen.consumers WHERE partition_id = $1 AND consumer_group = $2`, partitionID, group).Scan(&c)
	if err != nil && err.Error() != "no rows in result set" {
		t.Fatal(err)
	}
	return c
}

func TestTxnAckAndPushCommitTogether(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	for _, via := range transports {
		in, out := "tin-"+via, "tout-"+via
		e.pushOK(t, "http", items(it(in, "p", "m1"), it(in, "p", "m2")), 2)
		m := e.popHTTP(t, in, "p", nil).Messages[0]
		rep := e.txnOK(t, via, txnBody(txnAck(ackOf(m, "completed")), txnPush(it(out, "o", "x"))))
		if len(rep.Results) != 2 {
			t.Fatalf("%s: %d results", via, len(rep.Results))
		}
		a, p := rep.Results[0], rep.Results[1]
		if a.Index != 0 || a.Type != "ack" || !a.Success || a.Result != "acked" || a.TransactionID != "m1" || a.Offset == nil || *a.Offset != 0 {
			t.Fatalf("%s: ack result %+v", via, a)
		}
		if p.Index != 1 || p.Type != "push" || !p.Success || len(p.Items) != 1 {
			t.Fatalf("%s: push result %+v", via, p)
		}
		x := p.Items[0]
		mustV7(t, x.MessageID, "message_id")
		if x.Status != "queued" || x.TransactionID != "x" || x.QueueName != out || x.Partition != "o" || x.PartitionID == "" {
			t.Fatalf("%s: push item %+v", via, x)
		}
		if got := txnCounts(e.frames(t, out, "")); got["x"] != 1 || len(got) != 1 {
			t.Fatalf("%s: stored %v", via, got)
		}
		if c := e.txnCursor(t, m.PartitionID, queen.DefaultConsumerGroup); c != 0 {
			t.Fatalf("%s: cursor %d, want 0", via, c)
		}
		if next := e.popHTTP(t, in, "p", nil); txnsOf(next.Messages) != "m2" {
			t.Fatalf("%s: after the transaction pop = %s", via, txnsOf(next.Messages))
		}
		// The pushed message is consumable like any other.
		if got := e.popHTTP(t, out, "", nil); txnsOf(got.Messages) != "x" || got.Messages[0].ID != x.MessageID {
			t.Fatalf("%s: pop of the pushed message %+v", via, got.Messages)
		}
	}
}

func TestTxnDuplicateRollsBackEverything(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	for _, via := range transports {
		in, out := "din-"+via, "dout-"+via
		e.pushOK(t, "http", items(it(in, "p", "m1")), 1)
		orig := e.pushOK(t, "http", items(it(out, "o", "x")), 1)[0]
		m := e.popHTTP(t, in, "p", nil).Messages[0]

		// [ack m1, push y, push x (in the window)]: 409, nothing applied.
		eb := e.txnFail(t, via, txnBody(txnAck(ackOf(m, "completed")), txnPush(it(out, "o", "y")), txnPush(it(out, "o", "x"))), http.StatusConflict, "duplicate")
		if eb.Index == nil || *eb.Index != 2 || eb.Item == nil || *eb.Item != 0 || eb.Field != "operations[2].items[0].transactionId" {
			t.Fatalf("%s: error position %+v", via, eb)
		}
		if eb.Queue != out || eb.Partition != "o" || eb.TransactionID != "x" || eb.PartitionID != orig.PartitionID || eb.MessageID != orig.MessageID {
			t.Fatalf("%s: error names %+v; want queue %s partition o transactionId x original %s", via, eb, out, orig.MessageID)
		}
		if eb.Retryable == nil || *eb.Retryable {
			t.Fatalf("%s: a duplicate is not retryable: %+v", via, eb)
		}
		if got := txnCounts(e.frames(t, out, "")); got["y"] != 0 || got["x"] != 1 {
			t.Fatalf("%s: stored %v; y must not be written", via, got)
		}
		if c := e.txnCursor(t, m.PartitionID, queen.DefaultConsumerGroup); c != -1 {
			t.Fatalf("%s: cursor %d; the ack must not be applied", via, c)
		}
		if s := e.stats(t, out); s.LastOffsets != 1 || s.Segments != 1 {
			t.Fatalf("%s: %+v; no offset may be allocated", via, s)
		}

		// [push z, push z]: 409 too, naming the repeat.
		eb = e.txnFail(t, via, txnBody(txnPush(it(out, "o", "z")), txnPush(it(out, "o", "z"))), http.StatusConflict, "duplicate")
		if *eb.Index != 1 || eb.TransactionID != "z" || eb.MessageID != "" {
			t.Fatalf("%s: repeat error %+v", via, eb)
		}
		eb = e.txnFail(t, via, txnBody(txnPush(it(out, "o", "z"), it(out, "o", "z"))), http.StatusConflict, "duplicate")
		if *eb.Index != 0 || *eb.Item != 1 {
			t.Fatalf("%s: repeat in one operation %+v", via, eb)
		}
		if got := txnCounts(e.frames(t, out, "")); got["z"] != 0 {
			t.Fatalf("%s: z stored %d times", via, got["z"])
		}
		// The scope is one partition.
		rep := e.txnOK(t, via, txnBody(txnPush(it(out, "o", "z"), it(out, "o2", "z"))))
		wantStatuses(t, rep.Results[0].Items, "queued", "queued")
	}
}

func TestTxnWindowZeroChecksNothing(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	e.configureOK(t, "http", []byte(`{"queue":"w0","options":{"dedupWindowSeconds":0}}`))
	e.pushOK(t, "http", items(it("w0", "p", "z")), 1)
	rep := e.txnOK(t, "nats", txnBody(txnPush(it("w0", "p", "z")), txnPush(it("w0", "p", "z"))))
	if rep.Results[0].Items[0].Status != "queued" || rep.Results[1].Items[0].Status != "queued" {
		t.Fatalf("results %+v", rep.Results)
	}
	if got := txnCounts(e.frames(t, "w0", "")); got["z"] != 3 {
		t.Fatalf("stored %v", got)
	}
}

func TestTxnFailedAckRollsBackItsPush(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	for _, via := range transports {
		in, out := "fin-"+via, "fout-"+via
		e.pushOK(t, "http", items(it(in, "p", "m1")), 1)
		m := e.popHTTP(t, in, "p", nil).Messages[0]

		// An unknown message.
		eb := e.txnFail(t, via, txnBody(txnPush(it(out, "o", "w")), txnAck(map[string]any{"transactionId": "never", "partitionId": m.PartitionID})), http.StatusConflict, "unresolvable")
		if *eb.Index != 1 || eb.TransactionID != "never" || eb.PartitionID != m.PartitionID {
			t.Fatalf("%s: %+v", via, eb)
		}
		// A lease that is not live (in the operation, or required).
		wrong := uuid.NewString()
		a := ackOf(m, "completed")
		a["leaseId"] = wrong
		eb = e.txnFail(t, via, txnBody(txnPush(it(out, "o", "w")), txnAck(a)), http.StatusConflict, "lease_invalid")
		if *eb.Index != 1 || eb.LeaseID != wrong {
			t.Fatalf("%s: %+v", via, eb)
		}
		body := txnBody(txnAck(map[string]any{"transactionId": "m1", "partitionId": m.PartitionID}), txnPush(it(out, "o", "w")))
		body["requiredLeases"] = []string{wrong}
		eb = e.txnFail(t, via, body, http.StatusConflict, "lease_invalid")
		if eb.Field != "requiredLeases[0]" || eb.Index != nil {
			t.Fatalf("%s: %+v", via, eb)
		}
		if s := e.stats(t, out); s.Messages != 0 {
			t.Fatalf("%s: %+v; the push must be rolled back", via, s)
		}
		if c := e.txnCursor(t, m.PartitionID, queen.DefaultConsumerGroup); c != -1 {
			t.Fatalf("%s: cursor %d", via, c)
		}
		// As the Queen SDKs send it: the lease in requiredLeases only.
		body["requiredLeases"] = []string{*m.LeaseID}
		rep := e.txnOK(t, via, body)
		if rep.Results[0].Result != "acked" || rep.Results[1].Items[0].Status != "queued" {
			t.Fatalf("%s: %+v", via, rep.Results)
		}
	}
}

func TestTxnBadInput(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	pid := uuid.NewString()
	cases := []struct {
		body  string
		code  string
		field string
	}{
		{`not json`, "invalid_json", ""},
		{`{}`, "missing_field", "operations"},
		{`{"operations":[]}`, "invalid_field", "operations"},
		{`{"operations":[{"type":"pop"}]}`, "invalid_field", "operations[0].type"},
		{`{"operations":[{"type":"push","items":[{"queue":"bq","transactionId":"ok"}]},{"type":"push","items":[{"partition":"p"}]}]}`, "missing_field", "operations[1].items[0].queue"},
		{`{"operations":[{"type":"push","items":[{"queue":"bq"}]},{"type":"ack","transactionId":"m"}]}`, "missing_field", "operations[1].partitionId"},
		{`{"operations":[{"type":"push","items":[{"queue":"bq"}]},{"type":"ack","transactionId":"m","partitionId":"` + pid + `","status":"?"}]}`, "invalid_field", "operations[1].status"},
		{`{"operations":[{"type":"push","items":[{"queue":"bq"}]}],"requiredLeases":["x"]}`, "invalid_field", "requiredLeases[0]"},
	}
	for _, via := range transports {
		for _, c := range cases {
			eb := e.txnFail(t, via, []byte(c.body), http.StatusBadRequest, c.code)
			if c.field != "" && eb.Field != c.field {
				t.Fatalf("%s %s: field %q, want %q", via, c.body, eb.Field, c.field)
			}
		}
	}
	if n := e.totalRows(t); n != [3]int64{0, 0, 0} {
		t.Fatalf("rows written by refused transactions: %v", n)
	}
	st, b := e.httpDo(t, http.MethodGet, "/api/v1/transaction", nil)
	if st != http.StatusMethodNotAllowed {
		t.Fatalf("GET /api/v1/transaction: %d %s", st, b)
	}
}

// Two transactions touching the same two partitions in opposite orders, run
// concurrently 100 times (one over HTTP, one over NATS): locks are taken in
// one global order, so they never deadlock (PostgreSQL would abort one).
// Fresh consumer groups make the acks create their consumer rows inside the
// transactions.
func TestTxnOppositeOrdersNeverDeadlock(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	seed := e.pushOK(t, "http", items(it("dl", "A", "a0"), it("dl", "B", "b0")), 2)
	pa, pb := seed[0].PartitionID, seed[1].PartitionID
	ack := func(pid, group string) map[string]any {
		return txnAck(map[string]any{"partitionId": pid, "offset": 0, "consumerGroup": group})
	}
	for round := 0; round < 100; round++ {
		g := fmt.Sprintf("g%d", round)
		var bodies [2]map[string]any
		if round%2 == 0 { // both push to both partitions, in opposite orders
			bodies[0] = txnBody(txnPush(it("dl", "A", fmt.Sprintf("1a%d", round))), ack(pb, g), txnPush(it("dl", "B", fmt.Sprintf("1b%d", round))))
			bodies[1] = txnBody(txnPush(it("dl", "B", fmt.Sprintf("2b%d", round))), ack(pa, g), txnPush(it("dl", "A", fmt.Sprintf("2a%d", round))))
		} else { // each pushes to one and acks in the other
			bodies[0] = txnBody(txnPush(it("dl", "A", fmt.Sprintf("1a%d", round))), ack(pb, g))
			bodies[1] = txnBody(txnPush(it("dl", "B", fmt.Sprintf("2b%d", round))), ack(pa, g))
		}
		var wg sync.WaitGroup
		var res [2]result
		var errs [2]error
		for n := range bodies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				res[n], errs[n] = e.tryTxn(ctx, transports[n], marshal(bodies[n]))
			}()
		}
		wg.Wait()
		for n := range res {
			if errs[n] != nil || res[n].Status != http.StatusOK {
				t.Fatalf("round %d transaction %d via %s: %v status %d %s", round, n, transports[n], errs[n], res[n].Status, clip(res[n].Raw))
			}
		}
	}
	if s := e.stats(t, "dl"); s.Messages != 2+300 {
		t.Fatalf("stored %d messages, want %d", s.Messages, 2+300)
	}
}

func TestTxnGoClient(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	c := client.NewNATS(e.nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Push(ctx, []client.PushItem{{Queue: "gin", Partition: "p", TransactionID: "m1"}}); err != nil {
		t.Fatal(err)
	}
	pop, err := c.Pop(ctx, client.PopOptions{Queue: "gin"})
	if err != nil || len(pop.Messages) != 1 {
		t.Fatalf("pop: %v %+v", err, pop)
	}
	m := pop.Messages[0]
	res, err := c.Transaction().
		Ack(client.AckFor(m)).
		Push(client.PushItem{Queue: "gout", Partition: "o", TransactionID: "x", Payload: json.RawMessage(`{"from":"m1"}`)}).
		Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Result != queen.Acked || res[1].Items[0].Status != queen.Queued || res[1].Items[0].TransactionID != "x" {
		t.Fatalf("results %+v", res)
	}
	fs := e.frames(t, "gout", "")
	if len(fs) != 1 || string(fs[0].Payload) != `{"from":"m1"}` {
		t.Fatalf("stored %+v", fs)
	}

	// A duplicate: *wire.TxnAbort, errors.Is ErrDuplicate, nothing written.
	_, err = c.Transaction().Push(client.PushItem{Queue: "gout", Partition: "o", TransactionID: "y"}, client.PushItem{Queue: "gout", Partition: "o", TransactionID: "x"}).Commit(ctx)
	var ab *wire.TxnAbort
	if !errors.As(err, &ab) || !errors.Is(err, queen.ErrDuplicate) || ab.Queue != "gout" || ab.TransactionID != "x" || ab.MessageID != res[1].Items[0].MessageID || queen.AsError(err).Status != http.StatusConflict {
		t.Fatalf("duplicate: %T %v %+v", err, err, ab)
	}
	if got := txnCounts(e.frames(t, "gout", "")); got["y"] != 0 {
		t.Fatalf("y stored: %v", got)
	}
	// A required lease that is not live, and bad input.
	_, err = c.Transaction().Push(client.PushItem{Queue: "gout", TransactionID: "z"}).RequireLeases(uuid.NewString()).Commit(ctx)
	if !errors.Is(err, queen.ErrLeaseInvalid) {
		t.Fatalf("required lease: %v", err)
	}
	_, err = c.Transaction().Commit(ctx)
	if qe := queen.AsError(err); qe.Status != http.StatusBadRequest || qe.Code != "invalid_field" {
		t.Fatalf("empty transaction: %v", err)
	}
}

// A transaction's pushes wake long polls on their queue, as pushes do.
func TestTxnPushWakesLongPolls(t *testing.T) {
	t.Parallel()
	// The poll never re-checks on its own within its timeout: a reply with
	// the message is the wake-up's doing (no timing asserted).
	e := startEnv(t, func(c *Config) { c.PollRecheck = time.Hour })
	e.pushOK(t, "http", items(it("tw", "p", "seed")), 1)
	e.popHTTP(t, "tw", "", vals("autoAck", "true"))
	done := make(chan popReply, 1)
	go func() { done <- e.popHTTP(t, "tw", "", vals("wait", "true", "timeout", "60000")) }()
	waitParked(t, e)
	e.txnOK(t, "nats", txnBody(txnPush(it("tw", "q", "wake"))))
	if r := <-done; txnsOf(r.Messages) != "wake" {
		t.Fatalf("long poll returned %q; the transaction did not wake it", txnsOf(r.Messages))
	}
}

// TestTxnPushMovesAPartitionItsActorKnows (SPEC.md §2, §3; README,
// Architecture, "The write authority"): once a partition's actor knows it
// (its cache vouches, an outcome gave its number), the next push takes its
// row lock at the allocator's bump (with LockAtBumpFrom 1: by default only
// bundles of 128 such partitions or more do). A transaction that wrote to the
// partition meanwhile moved it: that push writes nothing at the bump and
// runs again with the row locked first, so a repeat of the transaction's id
// is a duplicate of it, the offsets continue after it, and the run again is
// counted in /metrics.
func TestTxnPushMovesAPartitionItsActorKnows(t *testing.T) {
	t.Parallel()
	// Every bundle locks its known partitions at the bump, however small.
	e := startEnv(t, func(c *Config) { c.LockAtBumpFrom = 1 })
	for _, via := range transports {
		q := "moved-" + via
		e.pushOK(t, via, items(it(q, "p", "w1")), 1)
		e.pushOK(t, via, items(it(q, "p", "w2")), 1)
		before := e.metricValue(t, `queen_push_moved_total`)
		rep := e.txnOK(t, via, txnBody(txnPush(it(q, "p", "t1"))))
		orig := rep.Results[0].Items[0]
		got := e.pushOK(t, via, items(it(q, "p", "t1"), it(q, "p", "n1")), 2)
		wantStatuses(t, got, "duplicate", "queued")
		eq(t, orig.MessageID, got[0].MessageID, "%s: the duplicate echoes the transaction's message", via)
		if after := e.metricValue(t, `queen_push_moved_total`); after != before+1 {
			t.Fatalf("%s: queen_push_moved_total %v -> %v, want one run again", via, before, after)
		}
		if got := txnCounts(e.frames(t, q, "")); got["t1"] != 1 || got["n1"] != 1 || len(got) != 4 {
			t.Fatalf("%s: stored %v", via, got)
		}
		// Known again: the next push needs no run again.
		e.pushOK(t, via, items(it(q, "p", "n2")), 1)
		if after := e.metricValue(t, `queen_push_moved_total`); after != before+1 {
			t.Fatalf("%s: queen_push_moved_total %v after a push nobody moved", via, after)
		}
	}
}

package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// TestInt64Edges (issue 29, item 6): the int64 edges (MaxInt64, MinInt64,
// one past them, MaxInt64-1) in every numeric field of the peek, pop, ack,
// lease extension, transaction and DLQ routes, over HTTP and NATS, are client
// input: each is answered 4xx or a success, never a 5xx (a retryable
// "database" error for a bad request), and none writes anything: the acks
// answered unresolvable leave no cursor row for the group, which never
// popped (a pop timeout of MaxInt64 ms used to overflow and pop).
func TestInt64Edges(t *testing.T) {
	e := startEnv(t, nil)
	q := "edges"
	e.pushOK(t, "http", items(it(q, "p", "e-1"), it(q, "p", "e-2")), 2)
	m := e.popHTTP(t, q, "p", vals("batch", "1")).Messages[0]
	before := e.totalRows(t)
	lease := *m.LeaseID
	edges := []string{"9223372036854775807", "9223372036854775806", "9223372036854775808", "-9223372036854775808", "-9223372036854775809", "2147483648", "-1", "1e3"}
	type probe struct{ via, method, path, subject, body string }
	var probes []probe
	for _, v := range edges {
		qv := url.QueryEscape(v)
		probes = append(probes,
			probe{"http", "GET", "/api/v1/queues/" + q + "/messages?partition=p&after=" + qv, "", ""},
			probe{"http", "GET", "/api/v1/queues/" + q + "/messages?partition=p&limit=" + qv, "", ""},
			probe{"nats", "", "", wire.SubjectPeek, fmt.Sprintf(`{"queue":%q,"partition":"p","after":%s}`, q, v)},
			probe{"nats", "", "", wire.SubjectPeek, fmt.Sprintf(`{"queue":%q,"partition":"p","limit":%s}`, q, v)},
			probe{"http", "GET", "/api/v1/pop/queue/" + q + "/partition/p?consumerGroup=edge&batch=" + qv, "", ""},
			probe{"http", "GET", "/api/v1/pop/queue/" + q + "/partition/p?consumerGroup=edge&wait=true&timeout=" + qv, "", ""},
			probe{"nats", "", "", wire.SubjectPop, fmt.Sprintf(`{"queue":%q,"partition":"p","consumerGroup":"edge","batch":%s}`, q, v)},
			probe{"nats", "", "", wire.SubjectPop, fmt.Sprintf(`{"queue":%q,"partition":"p","consumerGroup":"edge","wait":true,"timeout":%s}`, q, v)},
			probe{"http", "POST", "/api/v1/ack", wire.SubjectAck, fmt.Sprintf(`{"partitionId":%q,"offset":%s,"consumerGroup":"edge"}`, m.PartitionID, v)},
			probe{"http", "POST", "/api/v1/ack/batch", wire.SubjectAckBatch, fmt.Sprintf(`{"acknowledgments":[{"partitionId":%q,"offset":%s}],"consumerGroup":"edge"}`, m.PartitionID, v)},
			probe{"http", "POST", "/api/v1/lease/" + lease + "/extend", wire.SubjectLeaseExtend, fmt.Sprintf(`{"leaseId":%q,"seconds":%s}`, lease, v)},
			probe{"http", "GET", "/api/v1/dlq?queue=" + q + "&limit=" + qv, "", ""},
			probe{"http", "GET", "/api/v1/dlq?queue=" + q + "&offset=" + qv, "", ""},
			probe{"http", "POST", "/api/v1/dlq/replay", wire.SubjectDLQReplay, fmt.Sprintf(`{"queue":%q,"consumerGroup":"edge","ids":[%s]}`, q, v)},
			probe{"http", "POST", "/api/v1/dlq/replay", wire.SubjectDLQReplay, fmt.Sprintf(`{"queue":%q,"consumerGroup":"edge","partition":"p","limit":%s}`, q, v)},
			probe{"http", "POST", "/api/v1/transaction", wire.SubjectTransaction, fmt.Sprintf(`{"operations":[{"type":"ack","partitionId":%q,"offset":%s,"consumerGroup":"edge"}]}`, m.PartitionID, v)},
		)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, p := range probes {
		vias := []string{p.via}
		if p.method != "" && p.subject != "" {
			vias = []string{"http", "nats"}
		}
		for _, via := range vias {
			var body []byte
			if p.body != "" {
				body = []byte(p.body)
			}
			r, err := e.do(ctx, via, p.method, p.path, p.subject, body, http.StatusOK)
			what := fmt.Sprintf("%s %s %s%s %s", via, p.method, p.path, p.subject, p.body)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if r.Status >= 500 {
				t.Errorf("%s: status %d %s; want 4xx or a success", what, r.Status, clip(r.Raw))
			}
		}
	}
	eq(t, before, e.totalRows(t), "rows after the probes")
	// No probe made a cursor row for group edge, which never popped.
	var n int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM queen.consumers WHERE consumer_group = 'edge'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	eq(t, 0, n, "consumer rows of group edge")
	t.Logf("%d probes", len(probes))
}

// TestLeaseExtensionCapped (issue 29, item 6): an extension asks for at most
// the greater of the queue's leaseTime and queen.MaxLeaseExtendSeconds (12
// h): {"seconds":2147483647} (68 years, the largest accepted) ends the lease
// about 12 hours from now, not in 2094; a queue whose leaseTime is longer
// may extend to its leaseTime.
func TestLeaseExtensionCapped(t *testing.T) {
	e := startEnv(t, nil)
	for _, c := range []struct {
		queue     string
		leaseTime int64
		want      time.Duration
	}{{"cap-default", 300, queen.MaxLeaseExtendSeconds * time.Second}, {"cap-long", 2 * queen.MaxLeaseExtendSeconds, 2 * queen.MaxLeaseExtendSeconds * time.Second}} {
		e.configureOK(t, "http", marshal(map[string]any{"queue": c.queue, "options": map[string]any{"leaseTime": c.leaseTime}}))
		e.pushOK(t, "http", items(it(c.queue, "p", "x")), 1)
		m := e.popHTTP(t, c.queue, "p", vals("batch", "1")).Messages[0]
		before := time.Now()
		st, b := e.httpDo(t, http.MethodPost, "/api/v1/lease/"+*m.LeaseID+"/extend", map[string]any{"seconds": 1<<31 - 1})
		if st != http.StatusOK {
			t.Fatalf("%s: extend: %d %s", c.queue, st, b)
		}
		var ext struct {
			NewExpiresAt time.Time `json:"newExpiresAt"`
		}
		if err := json.Unmarshal(b, &ext); err != nil {
			t.Fatal(err)
		}
		// PostgreSQL's clock is this machine's: a minute either side is slack
		// for the clocks, not a timing assertion.
		if got := ext.NewExpiresAt.Sub(before); got < c.want-time.Minute || got > c.want+time.Minute {
			t.Fatalf("%s: the lease ends %v from now; want about %v", c.queue, got, c.want)
		}
	}
}

// TestAckOffsetAndTransactionIDDisagree (issue 29, item 6): an ack naming
// an offset and a transactionId of different messages is 400 invalid_field
// (index and field named) over HTTP and NATS, single or in a batch beside a
// good ack, and applies nothing; when they agree the ack completes and the
// reply echoes that transactionId.
func TestAckOffsetAndTransactionIDDisagree(t *testing.T) {
	e := startEnv(t, nil)
	q := "disagree"
	e.pushOK(t, "http", items(it(q, "p", "d-0"), it(q, "p", "d-1"), it(q, "p", "d-2")), 3)
	ms := e.popHTTP(t, q, "p", vals("batch", "3")).Messages
	pid := ms[0].PartitionID
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, via := range transports {
		for _, c := range []struct{ path, subject, body, field string }{
			{"/api/v1/ack", wire.SubjectAck, fmt.Sprintf(`{"partitionId":%q,"offset":1,"transactionId":"d-2"}`, pid), "transactionId"},
			{"/api/v1/ack/batch", wire.SubjectAckBatch, fmt.Sprintf(`{"acknowledgments":[{"partitionId":%q,"offset":0,"transactionId":"d-0"},{"partitionId":%q,"offset":2,"transactionId":"d-1"}]}`, pid, pid), "transactionId"},
		} {
			r, err := e.do(ctx, via, "POST", c.path, c.subject, []byte(c.body), http.StatusOK)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != http.StatusBadRequest || r.Err == nil || r.Err.Code != "invalid_field" || r.Err.Field != c.field {
				t.Fatalf("%s %s: status %d %s; want 400 invalid_field on %s", via, c.path, r.Status, clip(r.Raw), c.field)
			}
		}
	}
	var cursor int64
	if err := e.db.QueryRow(ctx, `SELECT "cursor" FROM queen.consumers WHERE consumer_group = '__QUEUE_MODE__'`).Scan(&cursor); err != nil {
		t.Fatal(err)
	}
	eq(t, int64(-1), cursor, "cursor after the refused acks")
	rs := ackBatch(t, e, "", map[string]any{"partitionId": pid, "offset": 1, "transactionId": "d-1"})
	if len(rs) != 1 || rs[0].Result != queen.Acked || rs[0].TransactionID != "d-1" {
		t.Fatalf("agreeing ack: %+v", rs)
	}
}

package broker

// Issue 29: the Go client, the shard-aware client, the async producer and
// the transaction builder refuse text the broker would refuse (invalid
// UTF-8, control characters, invisible characters in names) with the
// broker's code and field, before anything is encoded or sent. Before, JSON
// encoding turned "\xff\xfe" and "\xfe\xff" both into "\ufffd\ufffd" and the
// second push was answered duplicate: a silent loss. Real broker,
// PostgreSQL and NATS; a spy subscription proves no request left the client.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/client"
	"github.com/queen-mq/queen-go/transport/wire"
)

// requestSpy records every message a client sends on the request subjects
// a push, pop, ack or transaction uses (the brokers serve them in queue
// groups; the spy gets a copy of each).
type requestSpy struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func spyRequests(t *testing.T, e *env) *requestSpy {
	t.Helper()
	nc, err := nats.Connect(e.b.NATSURL(), nats.Name("queen-request-spy"))
	if err != nil {
		t.Fatalf("connect the spy: %v", err)
	}
	t.Cleanup(nc.Close)
	s := &requestSpy{}
	for _, subj := range []string{wire.SubjectPush, "queen.v1.shard.*.push", wire.SubjectTransaction,
		wire.SubjectPop, wire.SubjectAckBatch} {
		if _, err := nc.Subscribe(subj, func(m *nats.Msg) {
			s.mu.Lock()
			s.msgs = append(s.msgs, m)
			s.mu.Unlock()
		}); err != nil {
			t.Fatalf("subscribe %s: %v", subj, err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush the spy: %v", err)
	}
	return s
}

// onlyMessageIs waits until the spy has seen a message holding marker and
// checks it is the only one it saw. NATS keeps one connection's messages in
// order, so a request sent before the marker's would have come first.
func (s *requestSpy) onlyMessageIs(t *testing.T, marker string) {
	t.Helper()
	eventually(t, 30*time.Second, 5*time.Millisecond, "the spy sees the marker push", func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, m := range s.msgs {
			if strings.Contains(string(m.Data), marker) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d messages", len(s.msgs))
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.msgs) != 1 {
		for _, m := range s.msgs {
			t.Logf("sent on %s: %q", m.Subject, m.Data)
		}
		t.Fatalf("the clients sent %d requests; want only the marker push", len(s.msgs))
	}
}

// wantRefused checks err is the broker's 400 code naming field (index -1:
// none), as the broker's own refusal would be.
func wantRefused(t *testing.T, what string, err error, code, field string, index int) {
	t.Helper()
	var e *queen.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: got %v (%T), want a *queen.Error %s", what, err, err, code)
	}
	if e.Code != code || e.Field != field || e.Status != http.StatusBadRequest || e.Retryable {
		t.Fatalf("%s: got %s %q (status %d, %q), want %s %q", what, e.Code, e.Field, e.Status, e.Message, code, field)
	}
	switch {
	case index < 0 && e.Index != nil:
		t.Fatalf("%s: index %d, want none", what, *e.Index)
	case index >= 0 && (e.Index == nil || *e.Index != index):
		t.Fatalf("%s: index %v, want %d", what, e.Index, index)
	}
}

func TestClientsRefuseBadTextBeforeSending(t *testing.T) {
	e := startEnv(t, nil)
	spy := spyRequests(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const q = "badtext"
	plain := client.NewNATS(e.nc)
	sharded := client.NewNATS(e.nc, client.ShardAware(client.ShardOptions{}))
	before := e.totalRows(t)

	bad := []struct {
		name        string
		it          client.PushItem
		code, field string // field without the "items[i]." prefix
	}{
		{"txn ff fe", client.PushItem{Queue: q, Partition: "p", TransactionID: "\xff\xfe"}, "invalid_utf8", "transactionId"},
		{"txn fe ff", client.PushItem{Queue: q, Partition: "p", TransactionID: "\xfe\xff"}, "invalid_utf8", "transactionId"},
		{"partition ff fe", client.PushItem{Queue: q, Partition: "\xff\xfe", TransactionID: "t"}, "invalid_utf8", "partition"},
		{"partition fe ff", client.PushItem{Queue: q, Partition: "\xfe\xff", TransactionID: "t"}, "invalid_utf8", "partition"},
		{"queue invalid", client.PushItem{Queue: q + "\xff", TransactionID: "t"}, "invalid_utf8", "queue"},
		{"trace invalid", client.PushItem{Queue: q, TransactionID: "t", TraceID: "\xfe\xff"}, "invalid_utf8", "traceId"},
		{"queue BOM", client.PushItem{Queue: "\ufeff" + q, TransactionID: "t"}, "control_character", "queue"},
		{"partition line separator", client.PushItem{Queue: q, Partition: "p\u2028", TransactionID: "t"}, "control_character", "partition"},
		{"partition C1", client.PushItem{Queue: q, Partition: "p\u0085", TransactionID: "t"}, "control_character", "partition"},
		{"txn C1", client.PushItem{Queue: q, Partition: "p", TransactionID: "t\u009b"}, "control_character", "transactionId"},
		{"txn newline", client.PushItem{Queue: q, Partition: "p", TransactionID: "t\n"}, "control_character", "transactionId"},
		{"no queue", client.PushItem{Partition: "p", TransactionID: "t"}, "missing_field", "queue"},
		{"partition too long", client.PushItem{Queue: q, Partition: strings.Repeat("p", 256), TransactionID: "t"}, "too_long", "partition"},
	}
	good := client.PushItem{Queue: q, Partition: "p", TransactionID: "good-0", Payload: []byte(`{}`)}
	for _, c := range bad {
		for _, cl := range []struct {
			name string
			c    *client.Client
		}{{"client", plain}, {"shard-aware client", sharded}} {
			rs, err := cl.c.Push(ctx, []client.PushItem{c.it})
			wantRefused(t, cl.name+" "+c.name, err, c.code, "items[0]."+c.field, 0)
			if rs != nil {
				t.Fatalf("%s %s: replies %+v", cl.name, c.name, rs)
			}
			// A good item before it: the push is refused whole, naming
			// the bad item's index.
			_, err = cl.c.Push(ctx, []client.PushItem{good, c.it})
			wantRefused(t, cl.name+" "+c.name+" (second item)", err, c.code, "items[1]."+c.field, 1)
		}
		for _, pcl := range []struct {
			name string
			c    *client.Client
		}{{"producer", plain}, {"shard-aware producer", sharded}} {
			p := client.NewProducer(pcl.c, client.ProducerOptions{Linger: time.Millisecond})
			_, err := p.Publish(ctx, c.it)
			wantRefused(t, pcl.name+" Publish "+c.name, err, c.code, c.field, -1)
			err = p.PublishFunc(ctx, c.it, func(r wire.PushReply, err error) {
				t.Errorf("%s PublishFunc %s: the callback ran (%+v, %v)", pcl.name, c.name, r, err)
			})
			wantRefused(t, pcl.name+" PublishFunc "+c.name, err, c.code, c.field, -1)
			if err := p.Close(ctx); err != nil {
				t.Fatalf("close the producer: %v", err)
			}
			if st := p.Stats(); st.Published != 0 || st.Requests != 0 {
				t.Fatalf("%s %s: stats %+v, want nothing published", pcl.name, c.name, st)
			}
		}
		_, err := plain.Transaction().Push(good, c.it).Commit(ctx)
		wantRefused(t, "transaction "+c.name, err, c.code, "items[1]."+c.field, 1)
	}
	// Pop and ack names and ids.
	_, err := plain.Pop(ctx, client.PopOptions{Queue: q, Partition: "\xff\xfe"})
	wantRefused(t, "pop partition", err, "invalid_utf8", "partition", -1)
	_, err = plain.Pop(ctx, client.PopOptions{Queue: q, ConsumerGroup: "g\ufeff"})
	wantRefused(t, "pop group", err, "control_character", "consumerGroup", -1)
	off := int64(0)
	_, err = plain.Ack(ctx, "", []client.Ack{{PartitionID: zeroUUID, Offset: &off}, {PartitionID: zeroUUID, TransactionID: "\xfe\xff"}})
	wantRefused(t, "ack transactionId", err, "invalid_utf8", "acknowledgments[1].transactionId", 1)

	// Nothing reached the broker: the spy sees only the marker push, and
	// the database holds only its message.
	rs, err := plain.Push(ctx, []client.PushItem{good})
	if err != nil || len(rs) != 1 || rs[0].Status != queen.Queued {
		t.Fatalf("the marker push: %+v, %v", rs, err)
	}
	spy.onlyMessageIs(t, "good-0")
	eq(t, int64(1), e.stats(t, q).Messages, "messages stored in %s", q)
	after := e.totalRows(t)
	eq(t, before[0]+1, after[0], "segments")
	eq(t, before[2]+1, after[2], "queues (only %s was created)", q)
}

package broker

// SPEC.md §14: with JWT on, every stored message carries the pushing
// token's "sub" as producerSub, shown by pops, peeks and the DLQ and kept by
// a DLQ replay; a producerSub in a push body is never read, with JWT on or
// off; with JWT off a message has none (the field is left out).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/shards"
	"github.com/queen-mq/queen-go/transport/auth"
	"github.com/queen-mq/queen-go/transport/auth/authtest"
	"github.com/queen-mq/queen-go/transport/wire"
)

// spoofed is a push body whose items each claim a producer.
func spoofed(queue string, txns ...string) []byte {
	its := make([]map[string]any, len(txns))
	for i, txn := range txns {
		its[i] = map[string]any{"queue": queue, "partition": "p", "transactionId": txn, "payload": map[string]any{"i": i}, "producerSub": "spoofed"}
	}
	return marshal(map[string]any{"items": its})
}

// producers lists the messages' producerSub ("-" for none).
func producers[M queen.Message | queen.PeekMessage | queen.DeadLetter](ms []M) string {
	out := make([]string, len(ms))
	for i, m := range ms {
		var p *string
		switch m := any(m).(type) {
		case queen.Message:
			p = m.ProducerSub
		case queen.PeekMessage:
			p = m.ProducerSub
		case queen.DeadLetter:
			p = m.ProducerSub
		}
		out[i] = "-"
		if p != nil {
			out[i] = *p
		}
	}
	return strings.Join(out, ",")
}

func TestJWTProducerSubStored(t *testing.T) {
	t.Parallel()
	e := startJWTEnv(t)
	rw := "Bearer " + e.keys.Sign(t, auth.RS256, jwtClaims("svc-orders", "read-write"))
	admin := e.token(t, auth.HS256, "admin") // sub "sub-admin"
	get := func(path, authz string, out any) []byte {
		t.Helper()
		st, _, b := e.httpAuth(t, http.MethodGet, path, authz, nil)
		if st != http.StatusOK || json.Unmarshal(b, out) != nil {
			t.Fatalf("GET %s: %d %s", path, st, clip(b))
		}
		return b
	}
	for _, via := range transports {
		q := "jwt-producer-" + via
		if st, b := e.pushAuth(t, via, rw, spoofed(q, "a", "b")); st != map[string]int{"http": http.StatusCreated, "nats": http.StatusOK}[via] {
			t.Fatalf("push via %s: %d %s", via, st, b)
		}
		// A transaction's push is stamped the same way.
		txn := `{"operations":[{"type":"push","items":[{"queue":"` + q + `","partition":"p","transactionId":"c","producerSub":"spoofed"}]}]}`
		if st, _, b := e.httpAuth(t, http.MethodPost, "/api/v1/transaction", rw, json.RawMessage(txn)); st != http.StatusOK {
			t.Fatalf("transaction: %d %s", st, b)
		}

		var peek queen.PeekResult
		raw := get("/api/v1/queues/"+q+"/messages?partition=p", rw, &peek)
		eq(t, "svc-orders,svc-orders,svc-orders", producers(peek.Messages), "peek of %s", q)
		if strings.Contains(string(raw), "spoofed") {
			t.Fatalf("a body's producerSub was stored: %s", raw)
		}
		st, b := e.natsAuth(t, wire.SubjectPeek, rw, marshal(map[string]any{"queue": q, "partition": "p"}))
		if st != http.StatusOK || json.Unmarshal(b, &peek) != nil {
			t.Fatalf("peek over NATS: %d %s", st, b)
		}
		eq(t, "svc-orders,svc-orders,svc-orders", producers(peek.Messages), "peek of %s over NATS", q)

		// Pops over both front doors: group g over HTTP, h over NATS.
		var pop queen.PopResult
		get("/api/v1/pop/queue/"+q+"/partition/p?consumerGroup=g&batch=10&wait=false", rw, &pop)
		eq(t, "svc-orders,svc-orders,svc-orders", producers(pop.Messages), "HTTP pop of %s", q)
		st, b = e.natsAuth(t, wire.SubjectPop, rw, marshal(map[string]any{"queue": q, "partition": "p", "consumerGroup": "h", "batch": 10}))
		var npop queen.PopResult
		if st != http.StatusOK || json.Unmarshal(b, &npop) != nil {
			t.Fatalf("pop over NATS: %d %s", st, b)
		}
		eq(t, "svc-orders,svc-orders,svc-orders", producers(npop.Messages), "NATS pop of %s", q)

		// Dead-lettered, the message keeps it; replayed by an admin, it
		// goes back with the producer's identity, not the admin's.
		a := ackOf(pop.Messages[0], "dlq")
		body := marshal(map[string]any{"acknowledgments": []any{a}, "consumerGroup": "g"})
		if st, _, b := e.httpAuth(t, http.MethodPost, "/api/v1/ack/batch", rw, json.RawMessage(body)); st != http.StatusOK {
			t.Fatalf("ack dlq: %d %s", st, b)
		}
		var dlq struct {
			Messages []queen.DeadLetter `json:"messages"`
		}
		get("/api/v1/dlq?queue="+url.QueryEscape(q), admin, &dlq)
		eq(t, "svc-orders", producers(dlq.Messages), "the DLQ of %s", q)
		replay := marshal(map[string]any{"queue": q, "ids": []int64{dlq.Messages[0].ID}})
		if st, _, b := e.httpAuth(t, http.MethodPost, "/api/v1/dlq/replay", admin, json.RawMessage(replay)); st != http.StatusOK || !strings.Contains(string(b), `"moved"`) {
			t.Fatalf("replay: %d %s", st, b)
		}
		get("/api/v1/queues/"+q+"/messages?partition=p", rw, &peek)
		eq(t, "svc-orders,svc-orders,svc-orders,svc-orders", producers(peek.Messages), "peek of %s after the replay", q)
	}
}

func TestProducerSubIgnoredWithJWTOff(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	for _, via := range transports {
		q := "producer-off-" + via
		e.pushOK(t, via, spoofed(q, "a", "b"), 2)
		st, b := e.httpDo(t, http.MethodGet, "/api/v1/queues/"+q+"/messages?partition=p", nil)
		if st != http.StatusOK || strings.Contains(string(b), "producerSub") {
			t.Fatalf("peek with JWT off: %d %s; want no producerSub", st, b)
		}
		pop := e.popHTTP(t, q, "p", url.Values{"batch": {"10"}, "consumerGroup": {"g"}})
		eq(t, "-,-", producers(pop.Messages), "pop of %s", q)
		e.deadLetter(t, q, "p", "d")
		eq(t, "-", producers(e.dlq(t, q)), "the DLQ of %s", q)
	}
}

// TestJWTHopToTheShardOwner (SPEC.md §14, §9): in a cluster with JWT on, a
// push that enters one broker for a partition another broker owns is
// verified again by the owner with the request's token (sent along on the
// hop), stored with the token's producer, and a hop in the brokers' own
// encoding published without a token (any NATS client could) is refused
// 401 and writes nothing.
func TestJWTHopToTheShardOwner(t *testing.T) {
	t.Parallel()
	keys := authtest.NewKeys(t, jwtSecret)
	withJWT := func(c *Config) {
		c.ShardLease = 6 * time.Second
		c.JWT = &auth.Config{Algorithm: "HS256", Secret: jwtSecret, Issuer: jwtIssuer, Audience: jwtAudience}
	}
	first := startEnv(t, withJWT)
	second := startEnvOn(t, first.url, func(c *Config) { withJWT(c); c.NATSURL = first.b.NATSURL() })
	eventually(t, 30*time.Second, 20*time.Millisecond, "the second broker serves shards the first routes to it", func() (bool, string) {
		held := second.b.members.Held()
		if len(held) == 0 || !slices.Equal(held, second.b.shardSrv.Serving()) {
			return false, fmt.Sprintf("second holds %v, serves %v", held, second.b.shardSrv.Serving())
		}
		owners := first.b.members.Owners()
		for _, s := range held {
			if owners[s] != second.id() {
				return false, fmt.Sprintf("first routes shard %d to %q", s, owners[s])
			}
		}
		return true, ""
	})
	const q = "jwt-hop"
	part, _ := partitionOwnedBy(t, second, q, "own")
	rw := "Bearer " + keys.Sign(t, auth.HS256, jwtClaims("svc-orders", "read-write"))
	body := marshal(map[string]any{"items": []any{map[string]any{"queue": q, "partition": part, "transactionId": "a", "producerSub": "spoofed"}}})
	st, _, b := first.httpAuth(t, http.MethodPost, "/api/v1/push", rw, json.RawMessage(body))
	if st != http.StatusCreated || !strings.Contains(string(b), `"queued"`) {
		t.Fatalf("push through the first broker: %d %s", st, clip(b))
	}
	if s := first.b.router.Stats(); s.Remote == 0 {
		t.Fatalf("entry broker routed %+v: want a hop to the owner", s)
	}
	var peek queen.PeekResult
	st, _, b = second.httpAuth(t, http.MethodGet, "/api/v1/queues/"+q+"/messages?partition="+url.QueryEscape(part), rw, nil)
	if st != http.StatusOK || json.Unmarshal(b, &peek) != nil {
		t.Fatalf("peek: %d %s", st, clip(b))
	}
	eq(t, "svc-orders", producers(peek.Messages), "stored through the hop with the token's producer")

	// A hop forged by a NATS client: the brokers' encoding, no token, a
	// producer of its choice (a router of its own, every shard remote).
	forger, err := shards.NewRouter(shards.RouterConfig{Conn: first.nc, Count: first.b.cfg.ShardCount})
	if err != nil {
		t.Fatal(err)
	}
	res := forger.Push(context.Background(), []*queen.Item{{Queue: q, Partition: part, TransactionID: "forged", Payload: []byte(`1`), ProducerSub: "forged"}})
	if res[0].Err == nil || res[0].Err.Code != queen.ErrUnauthorized.Code {
		t.Fatalf("a hop without a token: %+v", res[0])
	}
	st, _, b = second.httpAuth(t, http.MethodGet, "/api/v1/queues/"+q+"/messages?partition="+url.QueryEscape(part), rw, nil)
	if st != http.StatusOK || json.Unmarshal(b, &peek) != nil || len(peek.Messages) != 1 {
		t.Fatalf("peek after the forged hop: %d %s", st, clip(b))
	}
}

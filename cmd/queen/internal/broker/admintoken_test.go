package broker

// Issue 29: with QUEEN_ADMIN_TOKEN set, a configure of an existing queue
// that deletes data or gives up dedup, and the DLQ listing (payloads), need
// the token, over HTTP and NATS, with the 401 of the other admin routes;
// creating a queue, configures that keep or widen, and push/pop stay open.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queen-mq/queen-go/transport/wire"
)

// storedOptions reads a queue's stored options from the database.
func (e *env) storedOptions(t *testing.T, queue string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var raw []byte
	if err := e.db.QueryRow(ctx, `SELECT options FROM queen.queues WHERE name = $1`, queue).Scan(&raw); err != nil {
		t.Fatalf("options of %s: %v", queue, err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("options of %s: %v", queue, err)
	}
	return m
}

// configureAuth sends a configure through via with an Authorization value
// ("" for none) and returns the status, the body and (HTTP) the headers.
func (e *env) configureAuth(t *testing.T, via, auth string, body string) (int, []byte, http.Header) {
	t.Helper()
	if via == "http" {
		st, h, b := e.httpAuth(t, http.MethodPost, "/api/v1/configure", auth, json.RawMessage(body))
		return st, b, h
	}
	st, b := e.natsAuth(t, wire.SubjectConfigure, auth, []byte(body))
	return st, b, nil
}

func TestAdminTokenGuardsData(t *testing.T) {
	t.Parallel()
	const token = "s3cret"
	e := startEnv(t, func(c *Config) { c.AdminToken = token })
	for _, via := range transports {
		t.Run(via, func(t *testing.T) {
			q, q0 := "guard-"+via, "guard0-"+via
			conf := func(queue, mode, opts string) string {
				return fmt.Sprintf(`{"queue":%q,"mode":%q,"options":%s}`, queue, mode, opts)
			}
			// Creating a queue stays open, whatever its options.
			for _, c := range []string{
				conf(q, "replace", `{"retentionSeconds":3600,"completedRetentionSeconds":3600,"dedupWindowSeconds":600}`),
				conf(q0, "replace", `{}`),
			} {
				if st, b, _ := e.configureAuth(t, via, "", c); st != http.StatusOK || !strings.Contains(string(b), `"created":true`) {
					t.Fatalf("create without the token: %d %s", st, b)
				}
			}
			e.pushOK(t, via, items(it(q, "p", "a"), it(q, "p", "b"), it(q, "p", "c")), 3)
			e.pushOK(t, via, items(it(q0, "p", "a")), 1)

			destructive := []struct{ queue, body, field string }{
				{q, conf(q, "merge", `{"retentionSeconds":1}`), "options.retentionSeconds"},
				{q, conf(q, "merge", `{"completedRetentionSeconds":1}`), "options.completedRetentionSeconds"},
				{q, conf(q, "merge", `{"dedupWindowSeconds":0}`), "options.dedupWindowSeconds"},
				{q, conf(q, "merge", `{"dedupWindowSeconds":599}`), "options.dedupWindowSeconds"},
				{q, conf(q, "replace", `{"retentionSeconds":60,"completedRetentionSeconds":3600,"dedupWindowSeconds":600}`), "options.retentionSeconds"},
				{q0, conf(q0, "merge", `{"retentionSeconds":86400}`), "options.retentionSeconds"},                   // 0 (keep) -> a retention
				{q0, conf(q0, "merge", `{"completedRetentionSeconds":86400}`), "options.completedRetentionSeconds"}, // likewise
				{q0, conf(q0, "replace", `{"dedupWindowSeconds":10}`), "options.dedupWindowSeconds"},                // the default 3600 -> 10
			}
			before := map[string]map[string]any{q: e.storedOptions(t, q), q0: e.storedOptions(t, q0)}
			for _, c := range destructive {
				for _, auth := range []string{"", "Bearer wrong", "Basic " + token} {
					st, b, h := e.configureAuth(t, via, auth, c.body)
					var eb errBody
					if st != http.StatusUnauthorized || json.Unmarshal(b, &eb) != nil || eb.Code != "unauthorized" || eb.Field != c.field {
						t.Fatalf("%s with %q: %d %s, want 401 unauthorized naming %s", c.body, auth, st, b, c.field)
					}
					if via == "http" && h.Get("WWW-Authenticate") == "" {
						t.Fatalf("%s: no WWW-Authenticate", c.body)
					}
				}
				eq(t, before[c.queue], e.storedOptions(t, c.queue), "options of %s after a refused %s", c.queue, c.body)
			}
			eq(t, int64(3), e.stats(t, q).Messages, "messages of %s", q)

			// A queue a push created exists: its first configure is guarded too.
			qp := "guard-pushed-" + via
			e.pushOK(t, via, items(it(qp, "p", "a")), 1)
			if st, b, _ := e.configureAuth(t, via, "", conf(qp, "merge", `{"retentionSeconds":1}`)); st != http.StatusUnauthorized {
				t.Fatalf("retention on a pushed queue without the token: %d %s", st, b)
			}
			if st, b, _ := e.configureAuth(t, via, "", conf(qp, "merge", `{"leaseTime":30}`)); st != http.StatusOK {
				t.Fatalf("leaseTime on a pushed queue without the token: %d %s", st, b)
			}

			// Keeping or widening stays open.
			for _, c := range []string{
				conf(q, "merge", `{"retentionSeconds":3600}`),
				conf(q, "merge", `{"retentionSeconds":7200,"completedRetentionSeconds":7200,"dedupWindowSeconds":1200}`),
				conf(q, "merge", `{"leaseTime":10,"retryLimit":0,"delayedProcessing":0,"dedupCheckPayload":true}`),
				conf(q, "replace", `{"retentionSeconds":7200,"completedRetentionSeconds":7200,"dedupWindowSeconds":1200}`),
				conf(q0, "replace", `{}`),
				conf(q0, "merge", `{"dedupWindowSeconds":7200}`),
			} {
				if st, b, _ := e.configureAuth(t, via, "", c); st != http.StatusOK {
					t.Fatalf("%s without the token: %d %s", c, st, b)
				}
			}
			// With the token every destructive configure runs.
			for _, c := range destructive {
				if st, b, _ := e.configureAuth(t, via, "Bearer "+token, c.body); st != http.StatusOK || !strings.Contains(string(b), `"changed"`) {
					t.Fatalf("%s with the token: %d %s", c.body, st, b)
				}
			}
			if got := e.storedOptions(t, q0)["dedupWindowSeconds"]; got != float64(10) {
				t.Fatalf("the window of %s after the token's configure: %v", q0, got)
			}
		})
	}

	// The DLQ listing holds payloads: admin, like the peek.
	e.pushOK(t, "http", items(it("guard-dlq", "p", "x")), 1)
	e.deadLetter(t, "guard-dlq", "p", "g")
	for _, auth := range []string{"", "Bearer wrong"} {
		st, h, b := e.httpAuth(t, http.MethodGet, "/api/v1/dlq?queue=guard-dlq", auth, nil)
		if st != http.StatusUnauthorized || !strings.Contains(string(b), `"unauthorized"`) || h.Get("WWW-Authenticate") == "" {
			t.Fatalf("the DLQ listing with %q: %d %s", auth, st, b)
		}
	}
	st, _, b := e.httpAuth(t, http.MethodGet, "/api/v1/dlq?queue=guard-dlq", "Bearer "+token, nil)
	if st != http.StatusOK || !strings.Contains(string(b), `"total":1`) {
		t.Fatalf("the DLQ listing with the token: %d %s", st, b)
	}
}

package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/transport/client"
)

// TestTokenGoesWithEveryRequest: client.Token is sent on the message plane
// and on admin routes; AdminToken, when given too, wins on admin routes.
func TestTokenGoesWithEveryRequest(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Method+" "+r.URL.Path] = r.Header.Get("Authorization")
		mu.Unlock()
		switch r.URL.Path {
		case "/api/v1/push":
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`[{"index":0,"status":"queued","transactionId":"t","message_id":"00000000-0000-0000-0000-000000000000"}]`)) //nolint:errcheck
		default:
			w.Write([]byte(`{}`)) //nolint:errcheck
		}
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()

	c := client.NewHTTP(client.HTTPConfig{URLs: []string{srv.URL}}, client.Token("jwt-1"))
	_, _ = c.Push(ctx, []client.PushItem{{Queue: "q", TransactionID: "t"}})
	_, _, _ = c.Queue(ctx, "q")
	mu.Lock()
	require.Equal(t, "Bearer jwt-1", seen["POST /api/v1/push"])
	require.Equal(t, "Bearer jwt-1", seen["GET /api/v1/resources/queues/q"])
	mu.Unlock()

	both := client.NewHTTP(client.HTTPConfig{URLs: []string{srv.URL}}, client.Token("jwt-2"), client.AdminToken("admin"))
	_, _ = both.Push(ctx, []client.PushItem{{Queue: "q", TransactionID: "t"}})
	_, _, _ = both.Queue(ctx, "q")
	mu.Lock()
	require.Equal(t, "Bearer jwt-2", seen["POST /api/v1/push"])
	require.Equal(t, "Bearer admin", seen["GET /api/v1/resources/queues/q"])
	mu.Unlock()

	none := client.NewHTTP(client.HTTPConfig{URLs: []string{srv.URL}})
	_, _ = none.Push(ctx, []client.PushItem{{Queue: "q", TransactionID: "t"}})
	mu.Lock()
	require.Empty(t, seen["POST /api/v1/push"])
	mu.Unlock()
}

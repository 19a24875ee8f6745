package transport_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport"
	"github.com/queen-mq/queen-go/transport/auth"
	"github.com/queen-mq/queen-go/transport/auth/authtest"
	"github.com/queen-mq/queen-go/transport/natstest"
)

// With JWT on (SPEC.md §14) the front doors check the token before the
// body reaches anything, and a push's items carry the token's sub as
// queen.Item.ProducerSub, never a producerSub from the body.

const jwtSecret = "transport-test-secret-of-32-bytes!!"

// jwtFake is fakeBroker recording transactions too.
type jwtFake struct {
	*fakeBroker
	mu   sync.Mutex
	txns []*queen.TxnRequest
}

func (f *jwtFake) Transaction(_ context.Context, req *queen.TxnRequest) ([]queen.TxnOpResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.txns = append(f.txns, req)
	out := make([]queen.TxnOpResult, len(req.Ops))
	for i, op := range req.Ops {
		for range op.Items {
			out[i].Push = append(out[i].Push, queen.Result{Verdict: queen.Queued})
		}
	}
	return out, nil
}

func jwtService(t *testing.T, f transportBroker) *transport.Service {
	t.Helper()
	v, err := auth.New(auth.Config{Algorithm: auth.HS256, Secret: jwtSecret})
	require.NoError(t, err)
	t.Cleanup(v.Close)
	s := transport.NewService(transport.Config{Pusher: f, Queues: f, Consumer: f, JWT: v, AdminToken: "ignored-with-jwt"})
	t.Cleanup(s.StopPolls)
	return s
}

func bearer(t *testing.T, sub, role string) string {
	keys := &authtest.Keys{Secret: []byte(jwtSecret)}
	return "Bearer " + keys.Sign(t, auth.HS256, jwt.MapClaims{"sub": sub, "role": role, "exp": time.Now().Add(time.Hour).Unix()})
}

const spoofedPush = `{"items":[{"queue":"q","partition":"p","transactionId":"t1","producerSub":"spoofed","payload":{"producerSub":"in-payload"}},{"queue":"q","transactionId":"t2","producerSub":"spoofed"}]}`

func TestJWTHTTPPushStampsTheTokensSub(t *testing.T) {
	t.Parallel()
	f := &jwtFake{fakeBroker: newFake()}
	h := jwtService(t, f).Handler()

	// Refused before anything is read: no token, a bad one, a read-only one.
	for auth, want := range map[string]int{
		"":                                 http.StatusUnauthorized,
		"Bearer nope":                      http.StatusUnauthorized,
		"Bearer ignored-with-jwt":          http.StatusUnauthorized, // QUEEN_ADMIN_TOKEN is not a JWT
		bearer(t, "reader", "read-only"):   http.StatusForbidden,
		bearer(t, "nobody", "no-such-one"): http.StatusForbidden,
	} {
		st, hdr, body := do(t, h, "POST", "/api/v1/push", spoofedPush, "Authorization", auth)
		require.Equal(t, want, st, "%q: %s", auth, body)
		e := decodeError(t, body)
		require.Equal(t, map[int]string{401: "unauthorized", 403: "forbidden"}[want], e.Code)
		require.NotEmpty(t, hdr.Get("WWW-Authenticate"))
	}
	require.Zero(t, f.calls(), "a refused push reaches nothing")

	st, _, body := do(t, h, "POST", "/api/v1/push", spoofedPush, "Authorization", bearer(t, "svc-orders", "read-write"))
	require.Equal(t, http.StatusCreated, st, "%s", body)
	require.Len(t, f.pushed, 1)
	for _, it := range f.pushed[0] {
		require.Equal(t, "svc-orders", it.ProducerSub, "the token's sub, never the body's producerSub")
	}

	// A transaction's pushes carry it too.
	st, _, body = do(t, h, "POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"q","transactionId":"x","producerSub":"spoofed"}]}]}`,
		"Authorization", bearer(t, "svc-txn", "admin"))
	require.Equal(t, http.StatusOK, st, "%s", body)
	require.Len(t, f.txns, 1)
	require.Equal(t, "svc-txn", f.txns[0].Ops[0].Items[0].ProducerSub)

	// Public routes need nothing.
	st, _, _ = do(t, h, "GET", "/health", "")
	require.Equal(t, http.StatusOK, st)
	st, _, _ = do(t, h, "GET", "/metrics", "")
	require.Equal(t, http.StatusOK, st)
}

// TestJWTOffIgnoresProducerSub: with JWT off nothing is stamped and the
// body's producerSub is not read.
func TestJWTOffIgnoresProducerSub(t *testing.T) {
	t.Parallel()
	f := newFake()
	st, _, body := do(t, f.service(t, "").Handler(), "POST", "/api/v1/push", spoofedPush)
	require.Equal(t, http.StatusCreated, st, "%s", body)
	for _, it := range f.pushed[0] {
		require.Empty(t, it.ProducerSub)
	}
}

func TestJWTNATSPushStampsTheTokensSub(t *testing.T) {
	t.Parallel()
	f := &jwtFake{fakeBroker: newFake()}
	srv := natstest.StartCluster(t, 1, nil)[0]
	svc := jwtService(t, f)
	bc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(bc.Close)
	ns, err := svc.NewNATS(transport.NATSConfig{Conn: bc, Version: "1.0.0"})
	require.NoError(t, err)
	require.NoError(t, ns.Start(context.Background()))
	t.Cleanup(func() { ns.Stop(context.Background()) }) //nolint:errcheck
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)

	for auth, want := range map[string]int{
		"":                               http.StatusUnauthorized,
		"Bearer x.y.z":                   http.StatusUnauthorized,
		bearer(t, "reader", "read-only"): http.StatusForbidden,
	} {
		var hdr []string
		if auth != "" {
			hdr = []string{"Authorization", auth}
		}
		st, body := request(t, nc, "queen.v1.push", spoofedPush, hdr...)
		require.Equal(t, want, st, "%q: %s", auth, body)
		st, body = request(t, nc, "queen.v1.pop", `{"queue":"q"}`, hdr...)
		require.Equal(t, want, st, "pop %q: %s", auth, body)
	}
	require.Zero(t, f.calls(), "a refused request reaches nothing")

	st, body := request(t, nc, "queen.v1.push", spoofedPush, "Authorization", bearer(t, "svc-nats", "read-write"))
	require.Equal(t, http.StatusOK, st, "%s", body)
	require.Len(t, f.pushed, 1)
	for _, it := range f.pushed[0] {
		require.Equal(t, "svc-nats", it.ProducerSub)
	}
	// A read-only token reads: queen.v1.queue.
	st, body = request(t, nc, "queen.v1.queue", "q", "Authorization", bearer(t, "reader", "read-only"))
	require.NotEqual(t, http.StatusUnauthorized, st, "%s", body)
	require.NotEqual(t, http.StatusForbidden, st, "%s", body)
}

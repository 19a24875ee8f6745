package transport_test

import (
	"context"
	"encoding/json"
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
	"github.com/queen-mq/queen-go/transport/wire"
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
	nc := serveNATS(t, jwtService(t, f))

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

// TestWhoamiNATS: queen.v1.auth.whoami answers what GET
// /api/v1/auth/whoami answers, from the message's Authorization header:
// with JWT on the token's sub and level, 401 without a valid token; with
// JWT off the admin token's access (401 without it), or an open broker.
func TestWhoamiNATS(t *testing.T) {
	t.Parallel()
	whoami := func(nc *nats.Conn, authz string) (int, wire.WhoamiReply, []byte) {
		var hdr []string
		if authz != "" {
			hdr = []string{"Authorization", authz}
		}
		st, body := request(t, nc, wire.SubjectWhoami, "", hdr...)
		var w wire.WhoamiReply
		if st == http.StatusOK {
			require.NoError(t, json.Unmarshal(body, &w), "%s", body)
		}
		return st, w, body
	}

	nc := serveNATS(t, jwtService(t, &jwtFake{fakeBroker: newFake()}))
	st, got, body := whoami(nc, bearer(t, "svc-nats", "read-write"))
	require.Equal(t, http.StatusOK, st, "%s", body)
	require.Equal(t, wire.AccessJWT, got.Access)
	require.Equal(t, "svc-nats", got.Sub)
	require.Equal(t, "read-write", got.Role)
	for _, authz := range []string{"", "Bearer x.y.z"} {
		st, _, body := whoami(nc, authz)
		require.Equal(t, http.StatusUnauthorized, st, "%q: %s", authz, body)
		require.Equal(t, "unauthorized", decodeError(t, body).Code)
	}
	// Each service on a NATS server of its own (two on one server would
	// share the queue group).
	nc = serveNATS(t, newFake().service(t, "s3cret"))
	st, got, body = whoami(nc, "Bearer s3cret")
	require.Equal(t, http.StatusOK, st, "%s", body)
	require.Equal(t, wire.WhoamiReply{Access: wire.AccessAdminToken, Role: "admin", Roles: []string{}}, got)
	st, _, body = whoami(nc, "")
	require.Equal(t, http.StatusUnauthorized, st, "%s", body)
	nc = serveNATS(t, newFake().service(t, ""))
	st, got, body = whoami(nc, "")
	require.Equal(t, http.StatusOK, st, "%s", body)
	require.Equal(t, wire.AccessOpen, got.Access)
}

// TestWhoamiHandler: GET /api/v1/auth/whoami describes the presented
// credential (wire.WhoamiReply) as the broker decides access: with JWT on
// the token's sub, level, roles and expiry, 401 without a valid token (also
// on a JWT_SKIP_PATHS path: it verifies the token itself); with JWT off
// admin for the admin token (401 without it) and admin for an open broker.
func TestWhoamiHandler(t *testing.T) {
	t.Parallel()
	const path = "/api/v1/auth/whoami"
	whoami := func(t *testing.T, h http.Handler, authz string) (int, http.Header, wire.WhoamiReply, []byte) {
		t.Helper()
		var hdr []string
		if authz != "" {
			hdr = []string{"Authorization", authz}
		}
		st, h2, body := do(t, h, "GET", path, "", hdr...)
		var w wire.WhoamiReply
		if st == http.StatusOK {
			require.NoError(t, json.Unmarshal(body, &w), "%s", body)
			var raw map[string]any
			require.NoError(t, json.Unmarshal(body, &raw))
			for _, k := range []string{"access", "sub", "role", "roles", "expiresAt"} {
				require.Contains(t, raw, k, "every field is present: %s", body)
			}
		}
		return st, h2, w, body
	}
	keys := &authtest.Keys{Secret: []byte(jwtSecret)}
	exp := time.Now().Add(time.Hour).Truncate(time.Second)

	for _, skip := range []bool{false, true} {
		v, err := auth.New(auth.Config{Algorithm: auth.HS256, Secret: jwtSecret, SkipPaths: map[bool][]string{true: {path}}[skip]})
		require.NoError(t, err)
		t.Cleanup(v.Close)
		f := newFake()
		s := transport.NewService(transport.Config{Pusher: f, Queues: f, Consumer: f, JWT: v, AdminToken: "ignored-with-jwt"})
		t.Cleanup(s.StopPolls)
		h := s.Handler()
		for _, c := range []struct {
			claims jwt.MapClaims
			want   wire.WhoamiReply
		}{
			{jwt.MapClaims{"sub": "ro", "role": "read-only", "exp": exp.Unix()}, wire.WhoamiReply{Sub: "ro", Role: "read-only", Roles: []string{"read-only"}}},
			{jwt.MapClaims{"sub": "rw", "roles": []string{"read-only", "read-write"}, "exp": exp.Unix()}, wire.WhoamiReply{Sub: "rw", Role: "read-write", Roles: []string{"read-only", "read-write"}}},
			{jwt.MapClaims{"sub": "boss", "role": "admin", "exp": exp.Unix()}, wire.WhoamiReply{Sub: "boss", Role: "admin", Roles: []string{"admin"}}},
			{jwt.MapClaims{"sub": "norole", "exp": exp.Unix()}, wire.WhoamiReply{Sub: "norole", Role: "read-only", Roles: []string{}}},
			{jwt.MapClaims{"sub": "forever", "role": "read-write"}, wire.WhoamiReply{Sub: "forever", Role: "read-write", Roles: []string{"read-write"}}},
		} {
			st, _, got, body := whoami(t, h, "Bearer "+keys.Sign(t, auth.HS256, c.claims))
			require.Equal(t, http.StatusOK, st, "skip %v, %v: %s", skip, c.claims, body)
			c.want.Access = wire.AccessJWT
			if _, ok := c.claims["exp"]; ok {
				require.NotNil(t, got.ExpiresAt, "%s", body)
				require.True(t, exp.Equal(*got.ExpiresAt), "expiresAt %v, want %v", got.ExpiresAt, exp)
				c.want.ExpiresAt = got.ExpiresAt
			}
			require.Equal(t, c.want, got, "skip %v: %s", skip, body)
		}
		for authz, why := range map[string]string{
			"":                        "no token",
			"Bearer ignored-with-jwt": "malformed",
			"Bearer " + keys.Sign(t, auth.HS256, jwt.MapClaims{"sub": "old", "role": "admin", "exp": time.Now().Add(-time.Hour).Unix()}): "expired",
		} {
			st, hdr, _, body := whoami(t, h, authz)
			require.Equal(t, http.StatusUnauthorized, st, "skip %v, %q: %s", skip, authz, body)
			e := decodeError(t, body)
			require.Equal(t, "unauthorized", e.Code)
			require.Contains(t, e.Error, why)
			require.Equal(t, `Bearer realm="queen"`, hdr.Get("WWW-Authenticate"))
		}
	}

	// JWT off: the admin token is admin; without it 401 as on the other
	// admin routes. No admin token: the broker is open.
	f := newFake()
	h := f.service(t, "s3cret").Handler()
	st, _, got, body := whoami(t, h, "Bearer s3cret")
	require.Equal(t, http.StatusOK, st, "%s", body)
	require.Equal(t, wire.WhoamiReply{Access: wire.AccessAdminToken, Role: "admin", Roles: []string{}}, got)
	for _, authz := range []string{"", "Bearer wrong"} {
		st, hdr, _, body := whoami(t, h, authz)
		require.Equal(t, http.StatusUnauthorized, st, "%q: %s", authz, body)
		require.Equal(t, "unauthorized", decodeError(t, body).Code)
		require.NotEmpty(t, hdr.Get("WWW-Authenticate"))
	}
	st, _, got, body = whoami(t, newFake().service(t, "").Handler(), "Bearer anything")
	require.Equal(t, http.StatusOK, st, "%s", body)
	require.Equal(t, wire.WhoamiReply{Access: wire.AccessOpen, Role: "admin", Roles: []string{}}, got)
	st, hdr, _ := do(t, h, "POST", path, "")
	require.Equal(t, http.StatusMethodNotAllowed, st)
	require.Equal(t, "GET", hdr.Get("Allow"))
}

package broker

// SPEC.md §14: with JWT on, a broker answers every route and NATS subject
// but the public ones only for a valid token whose role reaches the route's
// level: 401 unauthorized (saying why) without one, 403 forbidden below the
// level, and a refused request writes nothing. The broker here accepts
// HS256 (JWT_SECRET), RS256 and EdDSA (a JWKS served by the test on
// 127.0.0.1), JWT_ALGORITHM=auto, with an issuer and an audience.

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/auth"
	"github.com/queen-mq/queen-go/transport/auth/authtest"
	"github.com/queen-mq/queen-go/transport/client"
	"github.com/queen-mq/queen-go/transport/wire"
)

const (
	jwtIssuer   = "https://idp.queen.test/"
	jwtAudience = "queen-api"
	jwtSecret   = "broker-test-secret-of-32-bytes-or-more"
)

// jwtEnv is a broker with JWT on and the identity provider's keys.
type jwtEnv struct {
	*env
	keys, other *authtest.Keys
}

func startJWTEnv(t *testing.T) *jwtEnv {
	t.Helper()
	keys, other := authtest.NewKeys(t, jwtSecret), authtest.NewKeys(t, jwtSecret+"-other")
	jwks := keys.ServeJWKS(t)
	e := startEnv(t, func(c *Config) {
		c.AdminToken = "admin-token-ignored-with-jwt"
		c.JWT = &auth.Config{Algorithm: "auto", Secret: jwtSecret, JWKSURL: jwks, Issuer: jwtIssuer, Audience: jwtAudience,
			SkipPaths: []string{"/api/v1/stats"}}
	})
	return &jwtEnv{env: e, keys: keys, other: other}
}

// claims are valid claims for sub with role ("" none).
func jwtClaims(sub, role string) jwt.MapClaims {
	c := jwt.MapClaims{"sub": sub, "iss": jwtIssuer, "aud": jwtAudience, "exp": time.Now().Add(time.Hour).Unix()}
	if role != "" {
		c["role"] = role
	}
	return c
}

// token is "Bearer <JWT>" for role ("" none) signed with alg.
func (e *jwtEnv) token(t testing.TB, alg, role string) string {
	return "Bearer " + e.keys.Sign(t, alg, jwtClaims("sub-"+role, role))
}

// TestJWTTokenMatrixOverHTTPAndNATS: every algorithm, valid and broken in
// each way, on a push over both front doors: 201 (NATS: 200) for a valid
// read-write token, 401 unauthorized saying why otherwise, and nothing
// written by a refused push.
func TestJWTTokenMatrixOverHTTPAndNATS(t *testing.T) {
	t.Parallel()
	e := startJWTEnv(t)
	now := time.Now()
	good := jwtClaims("svc-a", "read-write")
	set := func(kv ...any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for k, v := range good {
			c[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			c[kv[i].(string)] = kv[i+1]
		}
		return c
	}
	rsaPEM := publicPEM(t, &e.keys.RSA.PublicKey)
	type tc struct{ name, auth, why string }
	cases := []tc{
		{"no token", "", "no token"},
		{"not a JWT", "Bearer abc", "malformed"},
		{"alg none", "Bearer " + authtest.SignNone(t, good), `algorithm "none" is not accepted`},
		{"HS256 signed with the RSA public key", "Bearer " + authtest.SignHMACWith(t, rsaPEM, authtest.KIDRSA, good), "signature does not verify"},
		{"RS256 unknown kid", "Bearer " + e.keys.SignKID(t, auth.RS256, "rsa-9", good), `key id (kid) "rsa-9" is unknown`},
		{"EdDSA unknown kid", "Bearer " + e.keys.SignKID(t, auth.EdDSA, "ed-9", good), `key id (kid) "ed-9" is unknown`},
		{"the admin token is not a JWT", "Bearer admin-token-ignored-with-jwt", "malformed"},
	}
	for _, alg := range []string{auth.HS256, auth.RS256, auth.EdDSA} {
		cases = append(cases,
			tc{alg + " expired", "Bearer " + e.keys.Sign(t, alg, set("exp", now.Add(-time.Hour).Unix())), "expired"},
			tc{alg + " not yet valid", "Bearer " + e.keys.Sign(t, alg, set("nbf", now.Add(time.Hour).Unix())), "not valid yet"},
			tc{alg + " wrong issuer", "Bearer " + e.keys.Sign(t, alg, set("iss", "https://other.test/")), "issuer"},
			tc{alg + " wrong audience", "Bearer " + e.keys.Sign(t, alg, set("aud", "other-api")), "audience"},
			tc{alg + " wrong signature", "Bearer " + e.other.Sign(t, alg, good), "signature does not verify"},
		)
	}
	const refusedQueue = "jwt-refused"
	body := items(it(refusedQueue, "p", "t1"), it(refusedQueue, "p2", "t2"))
	for _, via := range transports {
		for _, c := range cases {
			st, b := e.pushAuth(t, via, c.auth, body)
			var eb errBody
			if st != http.StatusUnauthorized || json.Unmarshal(b, &eb) != nil || eb.Code != "unauthorized" || !strings.Contains(eb.Error, c.why) {
				t.Fatalf("%s, %s: %d %s; want 401 unauthorized saying %q", via, c.name, st, b, c.why)
			}
		}
	}
	eq(t, stats{}, e.stats(t, refusedQueue), "what the refused pushes wrote")

	for _, via := range transports {
		for _, alg := range []string{auth.HS256, auth.RS256, auth.EdDSA} {
			q := "jwt-ok-" + via
			st, b := e.pushAuth(t, via, "Bearer "+e.keys.Sign(t, alg, good), items(it(q, "p", alg)))
			if want := map[string]int{"http": http.StatusCreated, "nats": http.StatusOK}[via]; st != want {
				t.Fatalf("%s, %s valid: %d %s", via, alg, st, b)
			}
		}
		eq(t, int64(3), e.stats(t, "jwt-ok-"+via).Messages, "messages pushed with valid tokens over %s", via)
	}
}

// pushAuth pushes body with an Authorization value ("" none).
func (e *jwtEnv) pushAuth(t testing.TB, via, authz string, body []byte) (int, []byte) {
	t.Helper()
	if via == "http" {
		st, _, b := e.httpAuth(t, http.MethodPost, "/api/v1/push", authz, json.RawMessage(body))
		return st, b
	}
	return e.natsAuth(t, wire.SubjectPush, authz, body)
}

// jwtRoute is one route of the access matrix: the level it needs and the
// status it answers a caller who reaches it.
type jwtRoute struct {
	method, path string
	body         string
	level        auth.Level
	ok           int
	// gate, when set, is the level of the route itself, below level: the
	// destructive configure is a read-write route whose change needs admin.
	gate auth.Level
}

// TestJWTRouteLevels: each route family × each role (no token, read-only,
// read-write, admin, and a token without a role), the exact status and
// error code; nothing pushed by a refused push.
func TestJWTRouteLevels(t *testing.T) {
	t.Parallel()
	e := startJWTEnv(t)
	admin := e.token(t, auth.HS256, "admin")
	const q = "jwt-routes"
	// A queue with a message, a dead letter, and a consumer group.
	st, b := e.pushAuth(t, "http", admin, items(it(q, "p", "m1"), it(q, "p", "m2")))
	eq(t, http.StatusCreated, st, "seed push: %s", b)
	st, _, b = e.httpAuth(t, http.MethodPost, "/api/v1/configure", admin, json.RawMessage(`{"queue":"jwt-deleted","options":{}}`))
	eq(t, http.StatusOK, st, "seed configure: %s", b)

	lease := "0195f9a0-0000-7000-8000-000000000001"
	routes := []jwtRoute{
		// public
		{"GET", "/health", "", auth.Public, 200, 0},
		{"GET", "/metrics", "", auth.Public, 200, 0},
		{"GET", "/ui/", "", auth.Public, 200, 0},
		{"GET", "/", "", auth.Public, 302, 0},
		{"GET", "/api/v1/stats", "", auth.Public, 200, 0}, // JWT_SKIP_PATHS
		// read-only: status and resource reads
		{"GET", "/api/v1/resources/queues", "", auth.ReadOnly, 200, 0},
		{"GET", "/api/v1/resources/queues/" + q, "", auth.ReadOnly, 200, 0},
		{"GET", "/api/v1/queues/" + q, "", auth.ReadOnly, 200, 0},
		{"GET", "/api/v1/queues/" + q + "/messages?partition=p", "", auth.ReadOnly, 200, 0},
		{"GET", "/api/v1/cluster", "", auth.ReadOnly, 200, 0},
		// read-write: the message plane
		{"POST", "/api/v1/push", string(items(it("jwt-rw-push", "p", "x"))), auth.ReadWrite, 201, 0},
		{"GET", "/api/v1/pop/queue/jwt-empty?wait=false", "", auth.ReadWrite, 204, 0},
		{"GET", "/api/v1/pop/queue/jwt-empty/partition/p?wait=false", "", auth.ReadWrite, 204, 0},
		{"POST", "/api/v1/ack", `{"partitionId":"` + lease + `","offset":0,"leaseId":"` + lease + `","status":"completed"}`, auth.ReadWrite, 200, 0},
		{"POST", "/api/v1/ack/batch", `{"acknowledgments":[]}`, auth.ReadWrite, 200, 0},
		{"POST", "/api/v1/lease/" + lease + "/extend", `{"seconds":10}`, auth.ReadWrite, 409, 0},
		{"POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"jwt-rw-txn"}]}]}`, auth.ReadWrite, 200, 0},
		{"POST", "/api/v1/configure", `{"queue":"jwt-rw-conf","options":{"leaseTime":30}}`, auth.ReadWrite, 200, 0},
		{"POST", "/api/v1/traces", `{"transactionId":"m1","partitionId":"` + lease + `","traceNames":"t","data":{}}`, auth.ReadWrite, 202, 0},
		{"POST", "/api/v1/consumer-groups/g1/queues/" + q + "/seek", `{"toEnd":true}`, auth.ReadWrite, 200, 0},
		// admin: the DLQ, the operator API, destructive configures, deletes
		{"GET", "/api/v1/dlq?queue=" + q, "", auth.Admin, 200, 0},
		{"POST", "/api/v1/dlq/replay", `{"queue":"` + q + `","ids":[424242]}`, auth.Admin, 200, 0},
		{"GET", "/api/v1/dedup?queue=" + q + "&partition=p&transactionId=m1", "", auth.Admin, 200, 0},
		{"GET", "/api/v1/admin/dedup-cache", "", auth.Admin, 200, 0},
		{"POST", "/api/v1/configure", `{"queue":"` + q + `","mode":"merge","options":{"retentionSeconds":60}}`, auth.Admin, 200, auth.ReadWrite},
		{"DELETE", "/api/v1/consumer-groups/g-none", "", auth.Admin, 200, 0},
		{"DELETE", "/api/v1/resources/queues/jwt-deleted", "", auth.Admin, 200, 0},
	}
	roles := []struct {
		name, auth string
		level      auth.Level // what the token reaches; -1: no token
	}{
		{"no token", "", -1},
		{"no role", "Bearer " + e.keys.Sign(t, auth.EdDSA, jwtClaims("norole", "")), auth.ReadOnly},
		{"read-only", e.token(t, auth.RS256, "read-only"), auth.ReadOnly},
		{"read-write", e.token(t, auth.EdDSA, "read-write"), auth.ReadWrite},
		{"admin", admin, auth.Admin},
	}
	for _, r := range routes {
		for _, role := range roles {
			var body any
			if r.body != "" {
				body = json.RawMessage(r.body)
			}
			st, h, b := e.httpAuthNoRedirect(t, r.method, r.path, role.auth, body)
			name := fmt.Sprintf("%s %s as %s", r.method, r.path, role.name)
			switch {
			case r.level == auth.Public || role.level >= r.level:
				if st != r.ok {
					t.Fatalf("%s: %d %s, want %d", name, st, clip(b), r.ok)
				}
			case role.level < 0:
				var eb errBody
				if st != http.StatusUnauthorized || json.Unmarshal(b, &eb) != nil || eb.Code != "unauthorized" || !strings.Contains(eb.Error, "no token") ||
					h.Get("WWW-Authenticate") != `Bearer realm="queen"` {
					t.Fatalf("%s: %d %s %v, want 401 unauthorized", name, st, b, h)
				}
			default:
				need := r.level
				if r.gate != 0 && role.level < r.gate {
					need = r.gate
				}
				var eb errBody
				if st != http.StatusForbidden || json.Unmarshal(b, &eb) != nil || eb.Code != "forbidden" ||
					!strings.Contains(eb.Error, "needs the "+need.String()+" level") {
					t.Fatalf("%s: %d %s, want 403 forbidden naming the %s level", name, st, b, need)
				}
			}
		}
	}
	// Only the allowed pushes wrote (read-write and admin: one message and
	// a duplicate); the destructive configure ran once, as admin.
	eq(t, int64(1), e.stats(t, "jwt-rw-push").Messages, "messages of the route matrix's push")
	if got := e.storedOptions(t, q)["retentionSeconds"]; got != float64(60) {
		t.Fatalf("retentionSeconds of %s: %v", q, got)
	}
	// A destructive configure by a read-write token: 403 naming the option.
	st, _, b = e.httpAuth(t, http.MethodPost, "/api/v1/configure", e.token(t, auth.HS256, "read-write"),
		json.RawMessage(`{"queue":"`+q+`","mode":"merge","options":{"retentionSeconds":30}}`))
	var eb errBody
	if st != http.StatusForbidden || json.Unmarshal(b, &eb) != nil || eb.Code != "forbidden" || eb.Field != "options.retentionSeconds" {
		t.Fatalf("a destructive configure as read-write: %d %s", st, b)
	}
	if got := e.storedOptions(t, q)["retentionSeconds"]; got != float64(60) {
		t.Fatalf("retentionSeconds of %s after a refused configure: %v", q, got)
	}
}

// TestJWTOverNATS: the subjects' levels with the same codes as HTTP, for
// push and pop and a read-only and an admin subject.
func TestJWTOverNATS(t *testing.T) {
	t.Parallel()
	e := startJWTEnv(t)
	const q = "jwt-nats"
	subjects := []struct {
		subject string
		body    string
		level   auth.Level
	}{
		{wire.SubjectPush, string(items(it(q, "p", "n1"))), auth.ReadWrite},
		{wire.SubjectPop, `{"queue":"` + q + `","batch":1}`, auth.ReadWrite},
		{wire.SubjectQueueDetail, `{"queue":"` + q + `"}`, auth.ReadOnly},
		{wire.SubjectPeek, `{"queue":"` + q + `","partition":"p"}`, auth.ReadOnly},
		{wire.SubjectDedup, `{"queue":"` + q + `","partition":"p","transactionId":"n1"}`, auth.Admin},
	}
	roles := []struct {
		name, auth string
		level      auth.Level
	}{
		{"no token", "", -1},
		{"expired", "Bearer " + e.keys.Sign(t, auth.HS256, func() jwt.MapClaims {
			c := jwtClaims("old", "admin")
			c["exp"] = time.Now().Add(-time.Hour).Unix()
			return c
		}()), -1},
		{"read-only", e.token(t, auth.EdDSA, "read-only"), auth.ReadOnly},
		{"read-write", e.token(t, auth.RS256, "read-write"), auth.ReadWrite},
		{"admin", e.token(t, auth.HS256, "admin"), auth.Admin},
	}
	popped := 0
	for _, s := range subjects {
		for _, role := range roles {
			st, b := e.natsAuth(t, s.subject, role.auth, []byte(s.body))
			name := s.subject + " as " + role.name
			var eb errBody
			switch {
			case role.level >= s.level:
				if st != http.StatusOK {
					t.Fatalf("%s: %d %s", name, st, clip(b))
				}
				if s.subject == wire.SubjectPop && len(b) > 0 {
					popped++
				}
			case role.level < 0:
				if st != http.StatusUnauthorized || json.Unmarshal(b, &eb) != nil || eb.Code != "unauthorized" {
					t.Fatalf("%s: %d %s, want 401", name, st, b)
				}
			default:
				if st != http.StatusForbidden || json.Unmarshal(b, &eb) != nil || eb.Code != "forbidden" {
					t.Fatalf("%s: %d %s, want 403", name, st, b)
				}
			}
		}
	}
	eq(t, int64(1), e.stats(t, q).Messages, "one message (read-write's push; admin's was its duplicate)")
	eq(t, 1, popped, "pops that got the message (read-write's; admin's found it leased)")
}

// httpAuthNoRedirect is httpAuth without following redirects.
func (e *env) httpAuthNoRedirect(t testing.TB, method, path, authz string, body any) (int, http.Header, []byte) {
	t.Helper()
	hc := *e.hc
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	saved := e.hc
	e.hc = &hc
	defer func() { e.hc = saved }()
	if _, err := url.Parse(e.base + path); err != nil {
		t.Fatal(err)
	}
	return e.httpAuth(t, method, path, authz, body)
}

// publicPEM is pub as a PEM "PUBLIC KEY".
func publicPEM(t testing.TB, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// whoamiReply is GET /api/v1/auth/whoami's body (wire.WhoamiReply), with
// ExpiresAt as sent.
type whoamiReply struct {
	Access    string   `json:"access"`
	Sub       string   `json:"sub"`
	Role      string   `json:"role"`
	Roles     []string `json:"roles"`
	ExpiresAt *string  `json:"expiresAt"`
}

// whoami asks GET /api/v1/auth/whoami with an Authorization value ("" none).
func (e *env) whoami(t testing.TB, authz string) (int, http.Header, whoamiReply, []byte) {
	t.Helper()
	st, h, b := e.httpAuth(t, http.MethodGet, "/api/v1/auth/whoami", authz, nil)
	var w whoamiReply
	if st == http.StatusOK {
		if err := json.Unmarshal(b, &w); err != nil {
			t.Fatalf("whoami: %s: %v", b, err)
		}
	}
	return st, h, w, b
}

// TestWhoamiMatrix: GET /api/v1/auth/whoami against real brokers, plain
// HTTP. JWT on: no token, a token of each role (and none) in each
// algorithm, with and without exp, expired, and the admin token (not a
// JWT); JWT off with QUEEN_ADMIN_TOKEN: none, a wrong one, the right one;
// JWT off without it: the open answer.
func TestWhoamiMatrix(t *testing.T) {
	t.Parallel()
	e := startJWTEnv(t)
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	for _, c := range []struct {
		alg, role, want string
		roles           []string
	}{
		{auth.HS256, "read-only", "read-only", []string{"read-only"}},
		{auth.RS256, "read-write", "read-write", []string{"read-write"}},
		{auth.EdDSA, "admin", "admin", []string{"admin"}},
		{auth.HS256, "", "read-only", []string{}},
		{auth.EdDSA, "no-such-role", "read-only", []string{"no-such-role"}},
	} {
		claims := jwtClaims("sub-"+c.alg+"-"+c.role, c.role)
		claims["exp"] = exp.Unix()
		st, _, w, b := e.whoami(t, "Bearer "+e.keys.Sign(t, c.alg, claims))
		if st != http.StatusOK {
			t.Fatalf("%s %q: %d %s", c.alg, c.role, st, b)
		}
		if w.ExpiresAt == nil {
			t.Fatalf("%s %q: no expiresAt: %s", c.alg, c.role, b)
		}
		got, err := time.Parse(time.RFC3339, *w.ExpiresAt)
		if err != nil || !got.Equal(exp) {
			t.Fatalf("%s %q: expiresAt %s, want %s", c.alg, c.role, *w.ExpiresAt, exp.UTC().Format(time.RFC3339))
		}
		w.ExpiresAt = nil
		eq(t, whoamiReply{Access: "jwt", Sub: "sub-" + c.alg + "-" + c.role, Role: c.want, Roles: c.roles}, w, "whoami of %s %q", c.alg, c.role)
	}
	// A token without exp: expiresAt null.
	forever := jwtClaims("forever", "read-write")
	delete(forever, "exp")
	st, _, w, b := e.whoami(t, "Bearer "+e.keys.Sign(t, auth.HS256, forever))
	if st != http.StatusOK || !strings.Contains(string(b), `"expiresAt":null`) {
		t.Fatalf("a token without exp: %d %s", st, b)
	}
	eq(t, whoamiReply{Access: "jwt", Sub: "forever", Role: "read-write", Roles: []string{"read-write"}}, w, "whoami without exp")

	expired := jwtClaims("old", "admin")
	expired["exp"] = time.Now().Add(-time.Hour).Unix()
	for _, c := range []struct{ name, authz, why string }{
		{"no token", "", "no token"},
		{"expired", "Bearer " + e.keys.Sign(t, auth.HS256, expired), "the token expired at"},
		{"wrong signature", "Bearer " + e.other.Sign(t, auth.RS256, jwtClaims("x", "admin")), "signature does not verify"},
		{"wrong audience", "Bearer " + e.keys.Sign(t, auth.EdDSA, func() jwt.MapClaims { c := jwtClaims("x", "admin"); c["aud"] = "other"; return c }()), "audience"},
		{"the admin token (JWT on)", "Bearer admin-token-ignored-with-jwt", "malformed"},
	} {
		st, h, _, b := e.whoami(t, c.authz)
		var eb errBody
		if st != http.StatusUnauthorized || json.Unmarshal(b, &eb) != nil || eb.Code != "unauthorized" || !strings.Contains(eb.Error, c.why) ||
			h.Get("WWW-Authenticate") != `Bearer realm="queen"` || h.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %v %s, want 401 unauthorized saying %q", c.name, st, h, b, c.why)
		}
	}

	// The Go client asks over both front doors (queen.v1.auth.whoami, GET
	// /api/v1/auth/whoami): the token's identity, 401 without a token.
	tok := e.keys.Sign(t, auth.EdDSA, jwtClaims("svc-client", "read-write"))
	for name, tr := range map[string]client.Transport{"nats": client.NATS(e.nc), "http": client.HTTP(client.HTTPConfig{URLs: []string{e.base}})} {
		w, _, err := client.New(tr, client.Token(tok)).Whoami(context.Background())
		if err != nil || w.Access != wire.AccessJWT || w.Sub != "svc-client" || w.Role != "read-write" {
			t.Fatalf("client whoami over %s: %+v %v", name, w, err)
		}
		_, _, err = client.New(tr).Whoami(context.Background())
		if qe := queen.AsError(err); err == nil || qe.Status != http.StatusUnauthorized {
			t.Fatalf("client whoami over %s without a token: %v, want 401", name, err)
		}
	}

	// JWT off, QUEEN_ADMIN_TOKEN set: 401 without the token, admin with it.
	et := startEnv(t, func(c *Config) { c.AdminToken = "s3cret" })
	for _, authz := range []string{"", "Bearer wrong", "s3cret"} {
		st, h, _, b := et.whoami(t, authz)
		var eb errBody
		if st != http.StatusUnauthorized || json.Unmarshal(b, &eb) != nil || eb.Code != "unauthorized" || !strings.Contains(eb.Error, "QUEEN_ADMIN_TOKEN") ||
			h.Get("WWW-Authenticate") == "" {
			t.Fatalf("admin token broker, %q: %d %s", authz, st, b)
		}
	}
	st, _, w, b = et.whoami(t, "Bearer s3cret")
	if st != http.StatusOK {
		t.Fatalf("the admin token: %d %s", st, b)
	}
	eq(t, whoamiReply{Access: "admin-token", Role: "admin", Roles: []string{}}, w, "whoami of the admin token")

	// JWT off, no admin token: open, whatever is sent.
	eo := startEnv(t, nil)
	for _, authz := range []string{"", "Bearer anything"} {
		st, _, w, b := eo.whoami(t, authz)
		if st != http.StatusOK {
			t.Fatalf("open broker, %q: %d %s", authz, st, b)
		}
		eq(t, whoamiReply{Access: "open", Role: "admin", Roles: []string{}}, w, "whoami of an open broker")
	}
}

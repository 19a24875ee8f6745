package auth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/lifecycle"
	"github.com/queen-mq/queen-go/transport/auth"
	"github.com/queen-mq/queen-go/transport/auth/authtest"
)

const (
	issuer   = "https://idp.test/"
	audience = "queen"
	secret   = "a-secret-of-thirty-two-bytes-at-least!"
)

// claims are a valid token's claims for sub with role.
func claims(sub, role string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"sub": sub, "iss": issuer, "aud": audience, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "role": role}
}

// with returns c with the changes (nil value: the claim removed).
func with(c jwt.MapClaims, kv ...any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

// fixture is an identity provider: an HS256 secret, an RSA and an Ed25519
// key published in a JWKS served on 127.0.0.1, and keys it does not publish.
type fixture struct {
	keys       *authtest.Keys
	other      *authtest.Keys // same kids, other keys: bad signatures
	jwks       *httptest.Server
	fetches    atomic.Int64
	mu         sync.Mutex
	extra      []jwkset.JWK
	rsaPEM     []byte
	ed25519PEM []byte
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{keys: authtest.NewKeys(t, secret), other: authtest.NewKeys(t, secret+"-other")}
	f.jwks = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.fetches.Add(1)
		f.mu.Lock()
		extra := f.extra
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write(f.keys.JWKS(t, extra...)) //nolint:errcheck
	}))
	t.Cleanup(f.jwks.Close)
	f.rsaPEM = pemOf(t, &f.keys.RSA.PublicKey)
	f.ed25519PEM = pemOf(t, f.keys.Ed25519.Public())
	return f
}

func pemOf(t testing.TB, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// verifier is an auto verifier of f's secret and JWKS, issuer and audience.
func (f *fixture) verifier(t *testing.T, mod func(*auth.Config)) *auth.Verifier {
	t.Helper()
	cfg := auth.Config{Algorithm: "auto", Secret: secret, JWKSURL: f.jwks.URL, Issuer: issuer, Audience: audience}
	if mod != nil {
		mod(&cfg)
	}
	v, err := auth.New(cfg)
	require.NoError(t, err)
	t.Cleanup(v.Close)
	return v
}

// TestTokenMatrix: each algorithm (HS256 with JWT_SECRET, RS256 and EdDSA
// through a JWKS served by the test), valid or broken in each way, is
// accepted or refused 401 unauthorized with the reason in the message.
func TestTokenMatrix(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	v := f.verifier(t, nil)
	good := claims("alice", "read-write")
	now := time.Now()
	type tc struct {
		name, token, why string // why "": valid
	}
	var cases []tc
	for _, alg := range []string{auth.HS256, auth.RS256, auth.EdDSA} {
		k, o := f.keys, f.other
		cases = append(cases,
			tc{alg + " valid", k.Sign(t, alg, good), ""},
			tc{alg + " expired", k.Sign(t, alg, with(good, "exp", now.Add(-time.Hour).Unix())), "the token expired at"},
			tc{alg + " expired within the skew", k.Sign(t, alg, with(good, "exp", now.Add(-10*time.Second).Unix())), ""},
			tc{alg + " not yet valid", k.Sign(t, alg, with(good, "nbf", now.Add(time.Hour).Unix())), "not valid yet"},
			tc{alg + " wrong issuer", k.Sign(t, alg, with(good, "iss", "https://evil.test/")), `issuer "https://evil.test/" is not JWT_ISSUER`},
			tc{alg + " wrong audience", k.Sign(t, alg, with(good, "aud", []string{"other", "api"})), `audience ["other" "api"] does not include JWT_AUDIENCE "queen"`},
			tc{alg + " no audience", k.Sign(t, alg, with(good, "aud", nil)), `does not include JWT_AUDIENCE`},
			tc{alg + " wrong signature", o.Sign(t, alg, good), "signature does not verify"},
			tc{alg + " tampered payload", tamper(k.Sign(t, alg, good)), "signature does not verify"},
		)
	}
	cases = append(cases,
		tc{"RS256 unknown kid", f.keys.SignKID(t, auth.RS256, "rsa-unknown", good), `key id (kid) "rsa-unknown" is unknown`},
		tc{"EdDSA unknown kid", f.keys.SignKID(t, auth.EdDSA, "ed-unknown", good), `key id (kid) "ed-unknown" is unknown`},
		tc{"alg none", authtest.SignNone(t, good), `algorithm "none" is not accepted`},
		tc{"alg none with an empty signature and a kid", authtest.SignNone(t, with(good, "kid", "rsa-1")), `algorithm "none" is not accepted`},
		// HS/RS confusion: an HS256 token whose HMAC key is the RSA public
		// key the broker publishes, with the RSA key's kid. auto verifies
		// HS256 only with JWT_SECRET, never with a public key.
		tc{"HS256 signed with the RSA public key (confusion)", authtest.SignHMACWith(t, f.rsaPEM, "rsa-1", good), "signature does not verify"},
		tc{"HS384 not accepted", authtest.SignHMACAlg(t, jwt.SigningMethodHS384, []byte(secret), good), `algorithm "HS384" is not accepted`},
		tc{"RS512 not accepted", authtest.SignRSAAlg(t, jwt.SigningMethodRS512, f.keys.RSA, "rsa-1", good), `algorithm "RS512" is not accepted`},
		tc{"malformed", "not.a.jwt", "malformed"},
		tc{"two parts", "abc.def", "malformed"},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, header := range []string{"Bearer " + c.token, "bearer " + c.token, c.token} {
				id, e := v.Verify(context.Background(), header)
				if c.why == "" {
					require.Nil(t, e, "%s", header)
					require.Equal(t, "alice", id.Subject)
					require.Equal(t, auth.ReadWrite, id.Level)
					continue
				}
				require.NotNil(t, e, "want refused: %s", c.why)
				require.Equal(t, 401, e.Status)
				require.Equal(t, "unauthorized", e.Code)
				require.Contains(t, e.Message, c.why)
				require.True(t, errors.Is(e, queen.ErrUnauthorized))
			}
		})
	}
}

// tamper changes a token's payload (its sub), keeping its signature.
func tamper(token string) string {
	p := strings.Split(token, ".")
	b, err := base64.RawURLEncoding.DecodeString(p[1])
	if err != nil {
		panic(err)
	}
	b = []byte(strings.Replace(string(b), `"alice"`, `"mallory"`, 1))
	return p[0] + "." + base64.RawURLEncoding.EncodeToString(b) + "." + p[2]
}

// TestMissingToken: no header, an empty bearer, other schemes.
func TestMissingToken(t *testing.T) {
	t.Parallel()
	v := newFixture(t).verifier(t, nil)
	for header, why := range map[string]string{
		"":             "no token",
		"   ":          "no token",
		"Bearer":       "no token after Bearer",
		"Bearer   ":    "no token after Bearer",
		"Basic abc":    "malformed",
		"Bearer a.b.c": "malformed",
	} {
		_, e := v.Verify(context.Background(), header)
		require.NotNil(t, e, "%q", header)
		require.Equal(t, "unauthorized", e.Code, "%q", header)
		require.Contains(t, e.Message, why, "%q", header)
	}
}

// TestAlgorithmConfusionWithAStaticKey: RS256 (or EdDSA) with a PEM
// public key refuses HS256 tokens whatever their key, the public key's
// bytes included, and the other asymmetric algorithm.
func TestAlgorithmConfusionWithAStaticKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	good := claims("bob", "admin")
	for _, c := range []struct {
		alg string
		pem []byte
		ok  string // a valid token
	}{
		{auth.RS256, f.rsaPEM, f.keys.Sign(t, auth.RS256, good)},
		{auth.EdDSA, f.ed25519PEM, f.keys.Sign(t, auth.EdDSA, good)},
	} {
		t.Run(c.alg, func(t *testing.T) {
			v, err := auth.New(auth.Config{Algorithm: c.alg, PublicKey: string(c.pem)})
			require.NoError(t, err)
			defer v.Close()
			id, e := v.Verify(context.Background(), "Bearer "+c.ok)
			require.Nil(t, e)
			require.Equal(t, auth.Admin, id.Level)
			for _, bad := range []string{
				authtest.SignHMACWith(t, c.pem, "", good),
				authtest.SignHMACWith(t, []byte(secret), "", good),
				f.keys.Sign(t, map[string]string{auth.RS256: auth.EdDSA, auth.EdDSA: auth.RS256}[c.alg], good),
				authtest.SignNone(t, good),
			} {
				_, e := v.Verify(context.Background(), "Bearer "+bad)
				require.NotNil(t, e)
				require.Equal(t, "unauthorized", e.Code)
				require.Contains(t, e.Message, "is not accepted: JWT_ALGORITHM="+c.alg+" accepts "+c.alg)
			}
		})
	}
	// The PEM with "\n" escapes, as an environment variable carries it.
	v, err := auth.New(auth.Config{Algorithm: auth.RS256, PublicKey: strings.ReplaceAll(string(f.rsaPEM), "\n", `\n`)})
	require.NoError(t, err)
	v.Close()
}

// TestRolesAndLevels: the role claim, the roles array, custom claim and
// role names, nested claims; Check's 403 below the level.
func TestRolesAndLevels(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	v := f.verifier(t, nil)
	for _, c := range []struct {
		name   string
		claims jwt.MapClaims
		level  auth.Level
	}{
		{"role admin", claims("a", "admin"), auth.Admin},
		{"role read-write", claims("a", "read-write"), auth.ReadWrite},
		{"role read-only", claims("a", "read-only"), auth.ReadOnly},
		{"no role", with(claims("a", ""), "role", nil), auth.ReadOnly},
		{"unknown role", claims("a", "superuser"), auth.ReadOnly},
		{"roles array", with(claims("a", ""), "role", nil, "roles", []string{"read-only", "admin"}), auth.Admin},
		{"role and roles", with(claims("a", "read-only"), "roles", []string{"read-write"}), auth.ReadWrite},
		{"role as an array", with(claims("a", ""), "role", []string{"read-write"}), auth.ReadWrite},
	} {
		id, e := v.Verify(context.Background(), "Bearer "+f.keys.Sign(t, auth.HS256, c.claims))
		require.Nil(t, e, c.name)
		require.Equal(t, c.level, id.Level, c.name)
	}

	custom := f.verifier(t, func(c *auth.Config) {
		c.RolesClaim, c.RolesArrayClaim = "scope", "realm_access.roles"
		c.RoleAdmin, c.RoleReadWrite, c.RoleReadOnly = "queen:admin", "queen:write", "queen:read"
	})
	tok := f.keys.Sign(t, auth.RS256, with(claims("svc", "admin"), "realm_access", map[string]any{"roles": []string{"queen:write"}}))
	id, e := custom.Verify(context.Background(), "Bearer "+tok)
	require.Nil(t, e)
	require.Equal(t, auth.ReadWrite, id.Level, "the role claim is not JWT_ROLES_CLAIM here; queen:write in realm_access.roles is read-write")
	require.Equal(t, []string{"queen:write"}, id.Roles)

	ro := "Bearer " + f.keys.Sign(t, auth.HS256, claims("reader", "read-only"))
	for _, need := range []auth.Level{auth.Public, auth.ReadOnly} {
		_, e := v.Check(context.Background(), ro, need, "GET /x")
		require.Nil(t, e)
	}
	for _, need := range []auth.Level{auth.ReadWrite, auth.Admin} {
		_, e := v.Check(context.Background(), ro, need, "POST /api/v1/push")
		require.NotNil(t, e)
		require.Equal(t, 403, e.Status)
		require.Equal(t, "forbidden", e.Code)
		require.Contains(t, e.Message, "POST /api/v1/push needs the "+need.String()+" level")
		require.Contains(t, e.Message, `sub "reader"`)
	}
	_, e = v.Check(context.Background(), "", auth.Public, "GET /health")
	require.Nil(t, e, "public needs no token")
	_, e = v.Check(context.Background(), "", auth.ReadOnly, "GET /api/v1/stats")
	require.Equal(t, "unauthorized", e.Code)
}

// TestIdentityExpiry: the identity carries the token's "exp" (UTC), and
// the zero time for a token without one.
func TestIdentityExpiry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	v := f.verifier(t, nil)
	exp := time.Now().Add(42 * time.Minute).Truncate(time.Second)
	id, e := v.Verify(context.Background(), "Bearer "+f.keys.Sign(t, auth.EdDSA, with(claims("exp", "admin"), "exp", exp.Unix())))
	require.Nil(t, e)
	require.True(t, exp.Equal(id.ExpiresAt), "ExpiresAt %v, want %v", id.ExpiresAt, exp)
	require.Equal(t, time.UTC, id.ExpiresAt.Location())
	id, e = v.Verify(context.Background(), "Bearer "+f.keys.Sign(t, auth.HS256, with(claims("forever", "read-only"), "exp", nil)))
	require.Nil(t, e)
	require.True(t, id.ExpiresAt.IsZero(), "a token without exp: ExpiresAt %v", id.ExpiresAt)
	require.Equal(t, "forever", id.Subject)
}

// TestJWKSRefreshOnUnknownKID: a key the identity provider publishes after
// the broker fetched the set is found by fetching it again.
func TestJWKSRefreshOnUnknownKID(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	v := f.verifier(t, nil)
	first := f.fetches.Load()
	require.GreaterOrEqual(t, first, int64(1), "the set is fetched at start")
	rotated, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	jwk, err := jwkset.NewJWKFromKey(&rotated.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: "rsa-2", ALG: jwkset.AlgRS256}})
	require.NoError(t, err)
	f.mu.Lock()
	f.extra = append(f.extra, jwk)
	f.mu.Unlock()
	tok := authtest.SignRSAAlg(t, jwt.SigningMethodRS256, rotated, "rsa-2", claims("carol", "admin"))
	id, e := v.Verify(context.Background(), "Bearer "+tok)
	require.Nil(t, e)
	require.Equal(t, "carol", id.Subject)
	require.Greater(t, f.fetches.Load(), first)
}

// TestSkipPaths: exact entries, and entries ending in "/" longer than "/"
// cover the paths under them.
func TestSkipPaths(t *testing.T) {
	t.Parallel()
	v := newFixture(t).verifier(t, func(c *auth.Config) { c.SkipPaths = []string{"/", "/docs/", "/api/v1/stats"} })
	for path, skip := range map[string]bool{
		"/": true, "/docs/": true, "/docs/a/b": true, "/api/v1/stats": true,
		"/api/v1/stats/x": false, "/docs": false, "/api/v1/push": false, "/x": false,
	} {
		require.Equal(t, skip, v.Skip(path), path)
	}
}

// TestSettingsRefused: settings auth.New refuses, each naming its variable.
func TestSettingsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg     auth.Config
		setting string
	}{
		{auth.Config{Algorithm: "HS512", Secret: "x"}, "JWT_ALGORITHM"},
		{auth.Config{}, "JWT_SECRET"},
		{auth.Config{Algorithm: "RS256"}, "JWT_PUBLIC_KEY or JWT_JWKS_URL"},
		{auth.Config{Algorithm: "EdDSA"}, "JWT_PUBLIC_KEY or JWT_JWKS_URL"},
		{auth.Config{Algorithm: "auto"}, "JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_URL"},
		{auth.Config{Algorithm: "RS256", PublicKey: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"}, "JWT_PUBLIC_KEY"},
		{auth.Config{Algorithm: "RS256", PublicKey: "/no/such/file.pem"}, "JWT_PUBLIC_KEY"},
		{auth.Config{Algorithm: "RS256", JWKSURL: "idp.test/jwks"}, "JWT_JWKS_URL"},
		{auth.Config{Secret: "x", ClockSkew: -time.Second}, "JWT_CLOCK_SKEW"},
	} {
		_, err := auth.New(c.cfg)
		var se *lifecycle.SettingError
		require.ErrorAs(t, err, &se, "%+v", c.cfg)
		require.Equal(t, c.setting, se.Setting, "%+v", c.cfg)
	}
	k := authtest.NewKeys(t, secret)
	_, err := auth.New(auth.Config{Algorithm: "EdDSA", PublicKey: string(pemOf(t, &k.RSA.PublicKey))})
	require.ErrorContains(t, err, "a key for EdDSA")
}

// TestContext: the identity a front door verified travels in the context.
func TestContext(t *testing.T) {
	t.Parallel()
	_, ok := auth.FromContext(context.Background())
	require.False(t, ok)
	id := auth.Identity{Subject: "s", Level: auth.Admin}
	got, ok := auth.FromContext(auth.NewContext(context.Background(), id))
	require.True(t, ok)
	require.Equal(t, id, got)
	require.Equal(t, "read-write", auth.ReadWrite.String())
}

// FuzzVerify: whatever the Authorization value, Verify answers a verified
// identity or a 401 unauthorized, never a panic or another error.
func FuzzVerify(f *testing.F) {
	keys := authtest.NewKeys(f, secret)
	good := claims("fuzz", "admin")
	for _, s := range []string{
		"", "Bearer", "Bearer ", "bearer x", "Basic abc", "a.b.c", "..", "Bearer ...",
		"Bearer " + keys.Sign(f, auth.HS256, good),
		"Bearer " + keys.Sign(f, auth.RS256, good),
		"Bearer " + keys.Sign(f, auth.EdDSA, good),
		"Bearer " + authtest.SignNone(f, good),
		"Bearer eyJhbGciOiJIUzI1NiJ9.e30.",
		"Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
	} {
		f.Add(s)
	}
	v, err := auth.New(auth.Config{Algorithm: "auto", Secret: secret, PublicKey: string(pemOf(f, &keys.RSA.PublicKey))})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, header string) {
		id, e := v.Verify(context.Background(), header)
		if e != nil {
			if e.Status != 401 || e.Code != "unauthorized" {
				t.Fatalf("%q: %d %s", header, e.Status, e.Code)
			}
			return
		}
		if id.Level < auth.ReadOnly {
			t.Fatalf("%q: verified with level %v", header, id.Level)
		}
	})
}

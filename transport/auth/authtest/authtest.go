// Package authtest mints the JWTs and serves the JWK Sets that tests of
// JWT authentication need (SPEC.md §14, package transport/auth): an HS256
// secret, an RSA key (kid "rsa-1") and an Ed25519 key (kid "ed-1"), tokens
// signed with each, and the broken tokens a verifier must refuse (alg
// "none", an HMAC signed with a public key). For tests only.
package authtest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// The key ids of Keys' asymmetric keys.
const (
	KIDRSA     = "rsa-1"
	KIDEd25519 = "ed-1"
)

// Keys are an identity provider's signing keys.
type Keys struct {
	Secret  []byte
	RSA     *rsa.PrivateKey
	Ed25519 ed25519.PrivateKey
}

// NewKeys generates an RSA (2048 bits) and an Ed25519 key beside the HS256
// secret.
func NewKeys(t testing.TB, secret string) *Keys {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	_, ek, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &Keys{Secret: []byte(secret), RSA: rk, Ed25519: ek}
}

// Sign signs claims with alg (HS256, RS256 or EdDSA) and the key of that
// kind, its kid in the header (none for HS256).
func (k *Keys) Sign(t testing.TB, alg string, claims jwt.MapClaims) string {
	t.Helper()
	switch alg {
	case "RS256":
		return k.SignKID(t, alg, KIDRSA, claims)
	case "EdDSA":
		return k.SignKID(t, alg, KIDEd25519, claims)
	}
	return k.SignKID(t, alg, "", claims)
}

// SignKID is Sign with kid in the header ("" none).
func (k *Keys) SignKID(t testing.TB, alg, kid string, claims jwt.MapClaims) string {
	t.Helper()
	switch alg {
	case "HS256":
		return sign(t, jwt.SigningMethodHS256, k.Secret, kid, claims)
	case "RS256":
		return sign(t, jwt.SigningMethodRS256, k.RSA, kid, claims)
	case "EdDSA":
		return sign(t, jwt.SigningMethodEdDSA, k.Ed25519, kid, claims)
	}
	t.Fatalf("authtest: no key for %q", alg)
	return ""
}

// JWKS is the JWK Set of k's public keys (RS256 "rsa-1", EdDSA "ed-1")
// and extra, as JSON.
func (k *Keys) JWKS(t testing.TB, extra ...jwkset.JWK) []byte {
	t.Helper()
	ctx := context.Background()
	st := jwkset.NewMemoryStorage()
	for _, m := range []struct {
		key any
		kid string
		alg jwkset.ALG
	}{{&k.RSA.PublicKey, KIDRSA, jwkset.AlgRS256}, {k.Ed25519.Public(), KIDEd25519, jwkset.AlgEdDSA}} {
		jwk, err := jwkset.NewJWKFromKey(m.key, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: m.kid, ALG: m.alg, USE: jwkset.UseSig}})
		if err != nil {
			t.Fatal(err)
		}
		extra = append(extra, jwk)
	}
	for _, jwk := range extra {
		if err := st.KeyWrite(ctx, jwk); err != nil {
			t.Fatal(err)
		}
	}
	b, err := st.JSONPublic(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ServeJWKS serves k's JWK Set on 127.0.0.1 until the test ends and
// returns its URL.
func (k *Keys) ServeJWKS(t testing.TB) string {
	t.Helper()
	body := k.JWKS(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body) //nolint:errcheck // the verifier went away
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// SignNone is claims with alg "none" and an empty signature.
func SignNone(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	return sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", claims)
}

// SignHMACWith is an HS256 token whose HMAC key is key (the algorithm
// confusion attack passes a public key's PEM), kid in its header.
func SignHMACWith(t testing.TB, key []byte, kid string, claims jwt.MapClaims) string {
	t.Helper()
	return sign(t, jwt.SigningMethodHS256, key, kid, claims)
}

// SignHMACAlg is a token of another HMAC algorithm (HS384, HS512).
func SignHMACAlg(t testing.TB, m *jwt.SigningMethodHMAC, key []byte, claims jwt.MapClaims) string {
	t.Helper()
	return sign(t, m, key, "", claims)
}

// SignRSAAlg is a token of an RSA algorithm with key, kid in its header.
func SignRSAAlg(t testing.TB, m *jwt.SigningMethodRSA, key *rsa.PrivateKey, kid string, claims jwt.MapClaims) string {
	t.Helper()
	return sign(t, m, key, kid, claims)
}

func sign(t testing.TB, m jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatalf("authtest: sign %s: %v", m.Alg(), err)
	}
	return s
}

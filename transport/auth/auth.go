// Package auth decides who may call the broker (SPEC.md §14): it verifies
// JWT bearer tokens as upstream Queen configures them (JWT_ENABLED,
// JWT_ALGORITHM, JWT_SECRET, JWT_PUBLIC_KEY, JWT_JWKS_URL, ...), reads the
// caller's roles from the token, and says whether they reach the access
// level a route or subject needs. Tokens are parsed and verified by
// github.com/golang-jwt/jwt/v5; a JWKS is fetched and refreshed by
// github.com/MicahParks/keyfunc/v3. The front doors (package transport)
// call it before reading a request's body, so a refused request reaches
// nothing and writes nothing.
package auth

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/lifecycle"
)

// Level is an access level (SPEC.md §14), each including the ones below it.
type Level int

// The access levels of SPEC.md §14, lowest first.
const (
	// Public needs no token: /health, /metrics, the console's files, and
	// the paths of Config.SkipPaths.
	Public Level = iota
	// ReadOnly needs any valid token, whatever its roles: status and
	// resource reads.
	ReadOnly
	// ReadWrite needs the read-write or the admin role: push, pop, ack,
	// lease extension, transactions, configures that delete nothing.
	ReadWrite
	// Admin needs the admin role: the operator API, the DLQ, configures
	// that delete data, deletes.
	Admin
)

// String is the level's name as the error messages and the README give it:
// public, read-only, read-write, admin.
func (l Level) String() string {
	switch l {
	case Public:
		return "public"
	case ReadOnly:
		return "read-only"
	case ReadWrite:
		return "read-write"
	case Admin:
		return "admin"
	}
	return fmt.Sprintf("level(%d)", int(l))
}

// The algorithms JWT_ALGORITHM names (Config.Algorithm).
const (
	HS256 = "HS256"
	RS256 = "RS256"
	EdDSA = "EdDSA"
	// Auto accepts HS256 tokens when a Secret is set and RS256 and EdDSA
	// tokens when a PublicKey or a JWKSURL is: each token is verified only
	// with the key of its own kind (never an RSA public key as an HMAC
	// secret), so algorithm confusion is refused.
	Auto = "auto"
)

// Defaults of Config's zero fields (upstream Queen's).
const (
	DefaultAlgorithm           = HS256
	DefaultClockSkew           = 30 * time.Second
	DefaultJWKSRefreshInterval = time.Hour
	DefaultJWKSTimeout         = 5 * time.Second
	DefaultRolesClaim          = "role"
	DefaultRolesArrayClaim     = "roles"
	DefaultRoleAdmin           = "admin"
	DefaultRoleReadWrite       = "read-write"
	DefaultRoleReadOnly        = "read-only"
)

// Config is the JWT settings of SPEC.md §14, under upstream Queen's
// environment variable names (cmd/queen reads them). Zero values take the
// defaults named.
type Config struct {
	// Algorithm is JWT_ALGORITHM: HS256 (default), RS256, EdDSA or auto.
	// A token signed with any other algorithm, "none" included, is refused
	// 401 naming its algorithm.
	Algorithm string
	// Secret is JWT_SECRET, the HMAC key of HS256 tokens (its bytes as
	// given); required for HS256.
	Secret string
	// PublicKey is JWT_PUBLIC_KEY: a PEM public key (RSA for RS256,
	// Ed25519 for EdDSA; "\n" escapes are read as line breaks, as
	// environment variables often carry them), or the path of a file
	// holding one. RS256 and EdDSA need it or JWKSURL.
	PublicKey string
	// JWKSURL is JWT_JWKS_URL, an identity provider's JWK Set, fetched at
	// start (a failed first fetch is logged, not fatal), every
	// JWKSRefreshInterval, and when a token names a key id the set does not
	// hold (at most once every 5 minutes). A token whose key id is in
	// neither the set nor a refetch is refused 401 "unknown key id".
	JWKSURL string
	// JWKSRefreshInterval is JWT_JWKS_REFRESH_INTERVAL; default 1 h.
	JWKSRefreshInterval time.Duration
	// JWKSTimeout bounds one fetch of the JWK Set; default 5 s.
	JWKSTimeout time.Duration
	// HTTPClient fetches the JWK Set; default http.DefaultClient.
	HTTPClient *http.Client
	// Issuer is JWT_ISSUER: when set, a token's "iss" must equal it.
	Issuer string
	// Audience is JWT_AUDIENCE: when set, a token's "aud" (a string or an
	// array) must include it.
	Audience string
	// ClockSkew is JWT_CLOCK_SKEW, the leeway on "exp" and "nbf"; default
	// 30 s. A token without "exp" does not expire.
	ClockSkew time.Duration
	// SkipPaths is JWT_SKIP_PATHS: HTTP paths that need no token, besides
	// the public ones (/health, /metrics, the console's files). An entry
	// matches the path itself, and an entry longer than "/" ending in "/"
	// also every path under it (upstream's rule).
	SkipPaths []string
	// RolesClaim is JWT_ROLES_CLAIM, the claim holding one role (default
	// "role"); RolesArrayClaim is JWT_ROLES_ARRAY_CLAIM, the claim holding
	// an array of roles (default "roles"). Either may hold a string or an
	// array of strings; a dotted name ("realm_access.roles") reaches into
	// nested objects when the token has no claim of that exact name.
	RolesClaim, RolesArrayClaim string
	// RoleAdmin, RoleReadWrite and RoleReadOnly are JWT_ROLE_ADMIN,
	// JWT_ROLE_READ_WRITE and JWT_ROLE_READ_ONLY, the role names of the
	// levels (default "admin", "read-write", "read-only").
	RoleAdmin, RoleReadWrite, RoleReadOnly string
	// Logger receives the JWK Set's refresh failures; default slog.Default().
	Logger *slog.Logger
	// now, when set, is the verifier's clock (tests).
	now func() time.Time
}

// Identity is the verified caller of a request.
type Identity struct {
	// Subject is the token's "sub" ("" when it has none): the producer
	// identity stamped on pushed messages (SPEC.md §14, producerSub).
	Subject string
	// Roles are the token's roles (RolesClaim, then RolesArrayClaim).
	Roles []string
	// Level is the highest level the roles reach: Admin, ReadWrite, or
	// ReadOnly for any other valid token.
	Level Level
	// ExpiresAt is the token's "exp" (UTC, whole seconds); the zero time
	// when the token has none (it does not expire).
	ExpiresAt time.Time
}

// Verifier checks bearer tokens against a Config. It is safe for
// concurrent use. Close ends its JWK Set refreshes.
type Verifier struct {
	cfg    Config
	algs   []string // the accepted algorithms
	parser *jwt.Parser
	secret []byte           // HS256's key; nil: no HS256
	static crypto.PublicKey // JWT_PUBLIC_KEY; nil: none
	jwks   keyfunc.Keyfunc  // JWT_JWKS_URL; nil: none
	cancel context.CancelFunc
	skip   []string

	// verified caches the tokens that verified (verifiedTTL): a producer
	// sends one token with every request, and with shards on several
	// brokers each hop of a request is verified again (the shard server's
	// check), so most checks are a map lookup instead of a signature.
	mu       sync.Mutex
	verified map[string]verifiedToken
}

// A verified token is taken again without checking its signature until
// its "exp" or verifiedTTL after it verified, whichever is first: a key
// removed from the JWK Set stops its tokens within that time. At most
// verifiedMax tokens are kept; past that the cache starts again empty.
const (
	verifiedTTL = time.Minute
	verifiedMax = 4096
)

// verifiedToken is one entry of Verifier.verified.
type verifiedToken struct {
	id    Identity
	until time.Time
}

// New returns a Verifier for cfg, or a *lifecycle.SettingError naming the
// JWT_* variable that is wrong: an unknown Algorithm, HS256 without Secret,
// RS256 or EdDSA without PublicKey or JWKSURL, auto with none of the three,
// a PublicKey that is not a PEM public key of the algorithm's kind, a
// JWKSURL that is not a URL, negative durations. The JWK Set's first fetch
// runs here; its failure is logged, not returned (the set is fetched again
// on refresh and on an unknown key id).
func New(cfg Config) (*Verifier, error) {
	cfg.defaults()
	v := &Verifier{cfg: cfg, skip: cfg.SkipPaths}
	bad := func(setting string, value any, want string) error {
		return &lifecycle.SettingError{Setting: setting, Value: value, Want: want}
	}
	if cfg.ClockSkew < 0 {
		return nil, bad("JWT_CLOCK_SKEW", cfg.ClockSkew, "0 or more seconds")
	}
	if cfg.JWKSRefreshInterval < 0 {
		return nil, bad("JWT_JWKS_REFRESH_INTERVAL", cfg.JWKSRefreshInterval, "a positive number of seconds")
	}
	var keyKinds []string // the algorithms the public keys can verify
	if cfg.PublicKey != "" {
		key, alg, err := parsePublicKey(cfg.PublicKey)
		if err != nil {
			return nil, bad("JWT_PUBLIC_KEY", "not a PEM public key", "an RSA or Ed25519 public key in PEM, or the path of a file holding one ("+err.Error()+")")
		}
		v.static = key
		keyKinds = append(keyKinds, alg)
	}
	if cfg.JWKSURL != "" {
		if !strings.HasPrefix(cfg.JWKSURL, "http://") && !strings.HasPrefix(cfg.JWKSURL, "https://") {
			return nil, bad("JWT_JWKS_URL", fmt.Sprintf("%q", cfg.JWKSURL), "an http:// or https:// URL")
		}
		keyKinds = append(keyKinds, RS256, EdDSA)
	}
	switch cfg.Algorithm {
	case HS256:
		if cfg.Secret == "" {
			return nil, bad("JWT_SECRET", "unset", "set with JWT_ALGORITHM=HS256")
		}
		v.algs = []string{HS256}
	case RS256, EdDSA:
		if cfg.PublicKey == "" && cfg.JWKSURL == "" {
			return nil, bad("JWT_PUBLIC_KEY or JWT_JWKS_URL", "unset", "set with JWT_ALGORITHM="+cfg.Algorithm)
		}
		if cfg.JWKSURL == "" && !slices.Contains(keyKinds, cfg.Algorithm) {
			return nil, bad("JWT_PUBLIC_KEY", "a key of another kind", "a key for "+cfg.Algorithm+" (RSA for RS256, Ed25519 for EdDSA)")
		}
		v.algs = []string{cfg.Algorithm}
	case Auto:
		if cfg.Secret != "" {
			v.algs = append(v.algs, HS256)
		}
		for _, a := range []string{RS256, EdDSA} {
			if slices.Contains(keyKinds, a) {
				v.algs = append(v.algs, a)
			}
		}
		if len(v.algs) == 0 {
			return nil, bad("JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_URL", "unset", "at least one set with JWT_ALGORITHM=auto")
		}
	default:
		return nil, bad("JWT_ALGORITHM", fmt.Sprintf("%q", cfg.Algorithm), "HS256, RS256, EdDSA or auto")
	}
	if slices.Contains(v.algs, HS256) {
		v.secret = []byte(cfg.Secret)
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(v.algs), jwt.WithLeeway(cfg.ClockSkew)}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	if cfg.now != nil {
		opts = append(opts, jwt.WithTimeFunc(cfg.now))
	}
	v.parser = jwt.NewParser(opts...)
	if cfg.JWKSURL != "" && (slices.Contains(v.algs, RS256) || slices.Contains(v.algs, EdDSA)) {
		ctx, cancel := context.WithCancel(context.Background())
		log := cfg.Logger
		kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{
			Client:          cfg.HTTPClient,
			HTTPTimeout:     cfg.JWKSTimeout,
			RefreshInterval: cfg.JWKSRefreshInterval,
			RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
				return func(_ context.Context, err error) {
					log.Warn("JWT: fetching the JWK Set failed; tokens signed with keys it does not hold are refused", "url", u, "err", err)
				}
			},
		})
		if err != nil {
			cancel()
			return nil, bad("JWT_JWKS_URL", fmt.Sprintf("%q", cfg.JWKSURL), "a JWK Set URL ("+err.Error()+")")
		}
		v.jwks, v.cancel = kf, cancel
	}
	return v, nil
}

func (c *Config) defaults() {
	if c.Algorithm == "" {
		c.Algorithm = DefaultAlgorithm
	}
	if strings.EqualFold(c.Algorithm, Auto) {
		c.Algorithm = Auto
	}
	if strings.EqualFold(c.Algorithm, EdDSA) {
		c.Algorithm = EdDSA
	}
	if c.ClockSkew == 0 {
		c.ClockSkew = DefaultClockSkew
	}
	if c.JWKSRefreshInterval == 0 {
		c.JWKSRefreshInterval = DefaultJWKSRefreshInterval
	}
	if c.JWKSTimeout <= 0 {
		c.JWKSTimeout = DefaultJWKSTimeout
	}
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	for p, d := range map[*string]string{&c.RolesClaim: DefaultRolesClaim, &c.RolesArrayClaim: DefaultRolesArrayClaim,
		&c.RoleAdmin: DefaultRoleAdmin, &c.RoleReadWrite: DefaultRoleReadWrite, &c.RoleReadOnly: DefaultRoleReadOnly} {
		if *p == "" {
			*p = d
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// parsePublicKey reads JWT_PUBLIC_KEY: PEM text (with "\n" escapes read as
// line breaks) or a file holding it; the key and the algorithm it verifies.
func parsePublicKey(s string) (crypto.PublicKey, string, error) {
	pem := strings.ReplaceAll(s, `\n`, "\n")
	if !strings.Contains(pem, "-----BEGIN") {
		b, err := os.ReadFile(s)
		if err != nil {
			return nil, "", err
		}
		pem = string(b)
	}
	if k, err := jwt.ParseRSAPublicKeyFromPEM([]byte(pem)); err == nil {
		return k, RS256, nil
	}
	k, err := jwt.ParseEdPublicKeyFromPEM([]byte(pem))
	if err != nil {
		return nil, "", errors.New("neither an RSA nor an Ed25519 public key")
	}
	return k, EdDSA, nil
}

// Close ends the JWK Set's refreshes; the Verifier still verifies with the
// keys it holds. A second Close does nothing.
func (v *Verifier) Close() {
	if v.cancel != nil {
		v.cancel()
	}
}

// Algorithms are the token algorithms v accepts.
func (v *Verifier) Algorithms() []string { return slices.Clone(v.algs) }

// Skip reports whether an HTTP path is one of Config.SkipPaths (the path
// itself, or under an entry longer than "/" that ends in "/").
func (v *Verifier) Skip(path string) bool {
	for _, p := range v.skip {
		if path == p || (len(p) > 1 && strings.HasSuffix(p, "/") && strings.HasPrefix(path, p)) {
			return true
		}
	}
	return false
}

// Check verifies the Authorization value of a request that needs level
// need (for route, the route's name for messages) and returns the caller:
//
//   - 401 queen.ErrUnauthorized when the value is empty, not a token, or
//     the token is malformed, signed with an algorithm not accepted ("none"
//     included), with an unknown key id, a signature that does not verify,
//     expired, not yet valid, or of another issuer or audience; the message
//     says which.
//   - 403 queen.ErrForbidden when the token is valid and its roles do not
//     reach need; the message names the level and the roles.
//
// Public needs nothing: the identity is then empty and no error.
func (v *Verifier) Check(ctx context.Context, authorization string, need Level, route string) (Identity, *queen.Error) {
	if need <= Public {
		return Identity{}, nil
	}
	id, e := v.Verify(ctx, authorization)
	if e != nil {
		return Identity{}, e
	}
	if id.Level < need {
		roles := "no role"
		if len(id.Roles) > 0 {
			roles = "roles " + strings.Join(id.Roles, ", ")
		}
		return id, queen.ErrForbidden.With("%s needs the %s level (role %s) and this token (sub %q) has %s", route, need, v.roleOf(need), id.Subject, roles)
	}
	return id, nil
}

// roleOf is the role name that grants level l.
func (v *Verifier) roleOf(l Level) string {
	switch l {
	case Admin:
		return v.cfg.RoleAdmin
	case ReadWrite:
		return v.cfg.RoleReadWrite + " or " + v.cfg.RoleAdmin
	}
	return "any"
}

// Verify reads "Bearer <token>" (the scheme in any case; a bare token is
// taken too, as upstream does), verifies the token and returns its caller,
// or a 401 queen.ErrUnauthorized saying why (see Check). A token that
// verified is taken again from a cache until its "exp" or verifiedTTL
// (one minute), whichever is first; a refused one is checked every time.
func (v *Verifier) Verify(ctx context.Context, authorization string) (Identity, *queen.Error) {
	raw := strings.TrimSpace(authorization)
	if raw == "" {
		return Identity{}, unauthorized("no token: send the header Authorization: Bearer <JWT> (JWT_ENABLED is on)")
	}
	const scheme = "bearer "
	if len(raw) >= len(scheme) && strings.EqualFold(raw[:len(scheme)], scheme) {
		raw = strings.TrimSpace(raw[len(scheme):])
	} else if strings.EqualFold(raw, strings.TrimSpace(scheme)) {
		raw = ""
	}
	if raw == "" {
		return Identity{}, unauthorized("no token after Bearer: send the header Authorization: Bearer <JWT>")
	}
	now := time.Now()
	if v.cfg.now != nil {
		now = v.cfg.now()
	}
	v.mu.Lock()
	hit, ok := v.verified[raw]
	v.mu.Unlock()
	if ok && now.Before(hit.until) {
		return hit.id, nil
	}
	claims := jwt.MapClaims{}
	tok, err := v.parser.ParseWithClaims(raw, claims, v.keyfunc(ctx))
	if err != nil {
		return Identity{}, v.why(tok, claims, err)
	}
	id := Identity{Roles: v.roles(claims)}
	id.Subject, _ = claims.GetSubject()
	if exp, _ := claims.GetExpirationTime(); exp != nil {
		id.ExpiresAt = exp.UTC()
	}
	id.Level = ReadOnly
	for _, r := range id.Roles {
		switch r {
		case v.cfg.RoleAdmin:
			id.Level = Admin
		case v.cfg.RoleReadWrite:
			id.Level = max(id.Level, ReadWrite)
		}
	}
	until := now.Add(verifiedTTL)
	if !id.ExpiresAt.IsZero() && id.ExpiresAt.Before(until) {
		until = id.ExpiresAt
	}
	v.mu.Lock()
	if v.verified == nil || len(v.verified) >= verifiedMax {
		v.verified = map[string]verifiedToken{}
	}
	v.verified[raw] = verifiedToken{id: id, until: until}
	v.mu.Unlock()
	return id, nil
}

// errUnknownKID is the keyfunc's error for a key id in no key held.
var errUnknownKID = errors.New("unknown key id")

// errNoKey is the keyfunc's error for an accepted algorithm without a key
// configured for it (cannot happen: algs follow the keys).
var errNoKey = errors.New("no key for the algorithm")

// keyfunc returns the key that verifies tok: the secret for HS256, the
// JWK Set's key of tok's key id, else JWT_PUBLIC_KEY, for RS256 and EdDSA.
// The parser has already refused algorithms not accepted, and each
// algorithm only ever gets a key of its own kind (golang-jwt refuses an
// RSA key for HMAC and the reverse), so algorithm confusion fails here.
func (v *Verifier) keyfunc(ctx context.Context) jwt.Keyfunc {
	return func(tok *jwt.Token) (any, error) {
		alg := tok.Method.Alg()
		if alg == HS256 {
			if v.secret == nil {
				return nil, errNoKey
			}
			return v.secret, nil
		}
		kid, hasKID := tok.Header["kid"].(string)
		if v.jwks != nil && hasKID {
			ctx, cancel := context.WithTimeout(ctx, v.cfg.JWKSTimeout)
			defer cancel()
			key, err := v.jwks.KeyfuncCtx(ctx)(tok)
			if err == nil {
				return key, nil
			}
			if v.static == nil || !matches(v.static, alg) {
				return nil, fmt.Errorf("%w %q: %w", errUnknownKID, kid, err)
			}
		}
		if v.static != nil && matches(v.static, alg) {
			return v.static, nil
		}
		if v.jwks != nil {
			return v.jwks.KeyfuncCtx(ctx)(tok)
		}
		return nil, errNoKey
	}
}

// matches reports whether key verifies algorithm alg.
func matches(key crypto.PublicKey, alg string) bool {
	switch key.(type) {
	case *rsa.PublicKey:
		return alg == RS256
	case ed25519.PublicKey:
		return alg == EdDSA
	}
	return false
}

// why turns a parse error into the 401 saying why the token was refused.
func (v *Verifier) why(tok *jwt.Token, claims jwt.MapClaims, err error) *queen.Error {
	alg := ""
	if tok != nil {
		alg, _ = tok.Header["alg"].(string)
	}
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return unauthorized("the token is malformed (want a JWT: three base64url parts separated by dots)")
	case tok != nil && !slices.Contains(v.algs, alg):
		return unauthorized("the token's algorithm %q is not accepted: JWT_ALGORITHM=%s accepts %s", alg, v.cfg.Algorithm, strings.Join(v.algs, ", "))
	case errors.Is(err, errUnknownKID):
		kid, _ := tok.Header["kid"].(string)
		return unauthorized("the token's key id (kid) %q is unknown: no key of JWT_JWKS_URL has it", kid)
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return unauthorized("the token cannot be verified: no key of JWT_JWKS_URL or JWT_PUBLIC_KEY matches it")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return unauthorized("the token's signature does not verify with the broker's %s key", alg)
	case errors.Is(err, jwt.ErrTokenExpired):
		exp, _ := claims.GetExpirationTime()
		return unauthorized("the token expired at %s (clock skew allowed %s)", stamp(exp), v.cfg.ClockSkew)
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		nbf, _ := claims.GetNotBefore()
		return unauthorized("the token is not valid yet: not before %s (clock skew allowed %s)", stamp(nbf), v.cfg.ClockSkew)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		iss, _ := claims.GetIssuer()
		return unauthorized("the token's issuer %q is not JWT_ISSUER %q", iss, v.cfg.Issuer)
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing) && v.cfg.Issuer != "" && claims["iss"] == nil:
		return unauthorized("the token has no issuer (iss): JWT_ISSUER %q is required", v.cfg.Issuer)
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing) && v.cfg.Audience != "" && claims["aud"] == nil:
		return unauthorized("the token has no audience (aud): it does not include JWT_AUDIENCE %q", v.cfg.Audience)
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		aud, _ := claims.GetAudience()
		return unauthorized("the token's audience %q does not include JWT_AUDIENCE %q", []string(aud), v.cfg.Audience)
	}
	return unauthorized("the token is invalid: %v", err)
}

func stamp(t *jwt.NumericDate) string {
	if t == nil {
		return "?"
	}
	return t.UTC().Format(time.RFC3339)
}

func unauthorized(format string, args ...any) *queen.Error {
	return queen.ErrUnauthorized.With(format, args...)
}

// roles reads the role claims: RolesClaim, then RolesArrayClaim, each a
// string or an array of strings (other values are ignored).
func (v *Verifier) roles(claims jwt.MapClaims) []string {
	var out []string
	for _, name := range []string{v.cfg.RolesClaim, v.cfg.RolesArrayClaim} {
		switch c := claim(claims, name).(type) {
		case string:
			out = append(out, c)
		case []any:
			for _, r := range c {
				if s, ok := r.(string); ok {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// claim is claims[name], or, when there is no claim of that name and name
// has dots, the value at that path through nested objects.
func claim(claims map[string]any, name string) any {
	if c, ok := claims[name]; ok {
		return c
	}
	head, rest, ok := strings.Cut(name, ".")
	if !ok {
		return nil
	}
	if sub, ok := claims[head].(map[string]any); ok {
		return claim(sub, rest)
	}
	return nil
}

// identityKey carries a request's Identity in its context.
type identityKey struct{}

// NewContext returns ctx carrying id (the caller a front door verified).
func NewContext(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// FromContext returns the Identity NewContext put in ctx; ok is false when
// the request was not verified (JWT off, or a public route).
func FromContext(ctx context.Context) (id Identity, ok bool) {
	id, ok = ctx.Value(identityKey{}).(Identity)
	return id, ok
}

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/queen-mq/queen-go/transport/auth"
)

// jwtFlags are serve's JWT settings (SPEC.md §14), each a flag whose default
// is upstream Queen's environment variable of the same meaning, so an
// upstream deployment's settings carry over. JWT_SECRET has no flag: like
// QUEEN_ADMIN_TOKEN, a secret on the command line shows in ps.
type jwtFlags struct {
	enabled       bool
	algorithm     string
	publicKey     string
	jwksURL       string
	jwksRefresh   time.Duration
	issuer        string
	audience      string
	clockSkew     time.Duration
	skipPaths     string
	rolesClaim    string
	rolesArray    string
	roleAdmin     string
	roleReadWrite string
	roleReadOnly  string
}

func (j *jwtFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&j.enabled, "jwt-enabled", false, "require a JWT on every route and NATS subject but /health, /metrics and the console's files (env JWT_ENABLED=true; README, Access control)")
	f.StringVar(&j.algorithm, "jwt-algorithm", envOr("JWT_ALGORITHM", auth.DefaultAlgorithm), "token algorithm: HS256 (JWT_SECRET), RS256 or EdDSA (JWT_PUBLIC_KEY or JWT_JWKS_URL), or auto (each token by its own kind) (env JWT_ALGORITHM)")
	f.StringVar(&j.publicKey, "jwt-public-key", os.Getenv("JWT_PUBLIC_KEY"), "PEM public key (RSA or Ed25519) verifying RS256/EdDSA tokens, or a file holding one (env JWT_PUBLIC_KEY)")
	f.StringVar(&j.jwksURL, "jwt-jwks-url", os.Getenv("JWT_JWKS_URL"), "an identity provider's JWK Set URL verifying RS256/EdDSA tokens by key id (env JWT_JWKS_URL)")
	f.DurationVar(&j.jwksRefresh, "jwt-jwks-refresh-interval", auth.DefaultJWKSRefreshInterval, "how often the JWK Set is fetched again (env JWT_JWKS_REFRESH_INTERVAL, whole seconds or a Go duration)")
	f.StringVar(&j.issuer, "jwt-issuer", os.Getenv("JWT_ISSUER"), "required token issuer (iss); empty: any (env JWT_ISSUER)")
	f.StringVar(&j.audience, "jwt-audience", os.Getenv("JWT_AUDIENCE"), "required token audience (aud); empty: any (env JWT_AUDIENCE)")
	f.DurationVar(&j.clockSkew, "jwt-clock-skew", auth.DefaultClockSkew, "leeway on the tokens' exp and nbf (env JWT_CLOCK_SKEW, whole seconds or a Go duration)")
	f.StringVar(&j.skipPaths, "jwt-skip-paths", os.Getenv("JWT_SKIP_PATHS"), "comma-separated HTTP paths that need no token besides /health, /metrics and the console's; an entry ending in / covers the paths under it (env JWT_SKIP_PATHS)")
	f.StringVar(&j.rolesClaim, "jwt-roles-claim", envOr("JWT_ROLES_CLAIM", auth.DefaultRolesClaim), "claim holding the token's role (env JWT_ROLES_CLAIM)")
	f.StringVar(&j.rolesArray, "jwt-roles-array-claim", envOr("JWT_ROLES_ARRAY_CLAIM", auth.DefaultRolesArrayClaim), "claim holding the token's roles as an array (env JWT_ROLES_ARRAY_CLAIM)")
	f.StringVar(&j.roleAdmin, "jwt-role-admin", envOr("JWT_ROLE_ADMIN", auth.DefaultRoleAdmin), "role name of the admin level (env JWT_ROLE_ADMIN)")
	f.StringVar(&j.roleReadWrite, "jwt-role-read-write", envOr("JWT_ROLE_READ_WRITE", auth.DefaultRoleReadWrite), "role name of the read-write level (env JWT_ROLE_READ_WRITE)")
	f.StringVar(&j.roleReadOnly, "jwt-role-read-only", envOr("JWT_ROLE_READ_ONLY", auth.DefaultRoleReadOnly), "role name of the read-only level (env JWT_ROLE_READ_ONLY)")
}

// jwtSettings applies JWT_ENABLED, JWT_JWKS_REFRESH_INTERVAL and
// JWT_CLOCK_SKEW where their flags were not given (cmd nil: the
// environment alone, loadtest --embedded) and returns the verifier's
// settings, nil when JWT is off. A malformed value is an error naming its
// variable; the rest is checked by auth.New when the broker starts.
func (j *jwtFlags) settings(cmd *cobra.Command) (*auth.Config, error) {
	changed := func(flag string) bool { return cmd != nil && cmd.Flags().Changed(flag) }
	if v := os.Getenv("JWT_ENABLED"); v != "" && !changed("jwt-enabled") {
		on, err := parseSwitch(v)
		if err != nil {
			return nil, fmt.Errorf("JWT_ENABLED=%q: want true or false", v)
		}
		j.enabled = on
	}
	for _, d := range []struct {
		flag, env string
		dst       *time.Duration
	}{
		{"jwt-jwks-refresh-interval", "JWT_JWKS_REFRESH_INTERVAL", &j.jwksRefresh},
		{"jwt-clock-skew", "JWT_CLOCK_SKEW", &j.clockSkew},
	} {
		if v := os.Getenv(d.env); v != "" && !changed(d.flag) {
			n, err := secondsOrDuration(v)
			if err != nil {
				return nil, fmt.Errorf("%s=%q is not whole seconds or a Go duration (for example 30 or 30s)", d.env, v)
			}
			*d.dst = n
		}
	}
	if !j.enabled {
		return nil, nil
	}
	if j.jwksRefresh <= 0 {
		return nil, fmt.Errorf("JWT JWKS refresh interval %v (--jwt-jwks-refresh-interval, JWT_JWKS_REFRESH_INTERVAL): want a positive duration, for example 3600", j.jwksRefresh)
	}
	if j.clockSkew < 0 {
		return nil, fmt.Errorf("JWT clock skew %v (--jwt-clock-skew, JWT_CLOCK_SKEW): want 0 or more, for example 30", j.clockSkew)
	}
	c := &auth.Config{
		Algorithm: j.algorithm, Secret: os.Getenv("JWT_SECRET"), PublicKey: j.publicKey, JWKSURL: j.jwksURL,
		JWKSRefreshInterval: j.jwksRefresh, Issuer: j.issuer, Audience: j.audience, ClockSkew: j.clockSkew,
		RolesClaim: j.rolesClaim, RolesArrayClaim: j.rolesArray,
		RoleAdmin: j.roleAdmin, RoleReadWrite: j.roleReadWrite, RoleReadOnly: j.roleReadOnly,
	}
	if c.ClockSkew == 0 {
		// auth.Config's zero takes the default: 0 s asked for is 1 ns.
		c.ClockSkew = time.Nanosecond
	}
	for _, p := range strings.Split(j.skipPaths, ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.SkipPaths = append(c.SkipPaths, p)
		}
	}
	return c, nil
}

// parseSwitch reads an on/off setting: true, 1, on, yes or false, 0, off,
// no, in any case.
func parseSwitch(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1", "on", "yes":
		return true, nil
	case "false", "0", "off", "no":
		return false, nil
	}
	return false, fmt.Errorf("not a switch: %q", v)
}

// secondsOrDuration reads upstream's whole seconds ("30") or a Go
// duration ("30s").
func secondsOrDuration(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	return time.ParseDuration(strings.TrimSpace(v))
}

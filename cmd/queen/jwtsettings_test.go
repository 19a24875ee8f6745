package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/queen-mq/queen-go/transport/auth"
)

// TestJWTSettings: serve reads upstream Queen's JWT_* variables (whole
// seconds or Go durations), flags win over them, JWT_ENABLED off gives no
// verifier settings, and malformed values name their variable.
func TestJWTSettings(t *testing.T) {
	for k, v := range map[string]string{
		"JWT_ENABLED": "true", "JWT_ALGORITHM": "RS256", "JWT_SECRET": "s", "JWT_JWKS_URL": "https://idp.test/jwks",
		"JWT_JWKS_REFRESH_INTERVAL": "600", "JWT_ISSUER": "https://idp.test/", "JWT_AUDIENCE": "queen",
		"JWT_SKIP_PATHS": " /docs/ , /x,", "JWT_ROLES_CLAIM": "r", "JWT_ROLES_ARRAY_CLAIM": "rs",
		"JWT_ROLE_ADMIN": "A", "JWT_ROLE_READ_WRITE": "RW", "JWT_ROLE_READ_ONLY": "RO",
	} {
		t.Setenv(k, v)
	}
	cmd := &cobra.Command{}
	var j jwtFlags
	j.register(cmd.Flags())
	if err := cmd.ParseFlags([]string{"--jwt-issuer", "https://flag.test/", "--jwt-clock-skew", "45s"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JWT_CLOCK_SKEW", "5") // the flag given wins
	c, err := j.settings(cmd)
	if err != nil {
		t.Fatal(err)
	}
	want := auth.Config{Algorithm: "RS256", Secret: "s", JWKSURL: "https://idp.test/jwks", JWKSRefreshInterval: 10 * time.Minute,
		Issuer: "https://flag.test/", Audience: "queen", ClockSkew: 45 * time.Second, SkipPaths: []string{"/docs/", "/x"},
		RolesClaim: "r", RolesArrayClaim: "rs", RoleAdmin: "A", RoleReadWrite: "RW", RoleReadOnly: "RO"}
	if c == nil || c.Algorithm != want.Algorithm || c.Secret != want.Secret || c.JWKSURL != want.JWKSURL ||
		c.JWKSRefreshInterval != want.JWKSRefreshInterval || c.Issuer != want.Issuer || c.Audience != want.Audience ||
		c.ClockSkew != want.ClockSkew || strings.Join(c.SkipPaths, "|") != "/docs/|/x" || c.RolesClaim != "r" ||
		c.RolesArrayClaim != "rs" || c.RoleAdmin != "A" || c.RoleReadWrite != "RW" || c.RoleReadOnly != "RO" {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}

	t.Setenv("JWT_ENABLED", "false")
	var off jwtFlags
	off.register(pflag.NewFlagSet("t", pflag.ContinueOnError))
	if c, err := off.settings(nil); err != nil || c != nil {
		t.Fatalf("JWT_ENABLED=false: %+v %v", c, err)
	}
	for k, v := range map[string]string{"JWT_ENABLED": "maybe", "JWT_CLOCK_SKEW": "soon", "JWT_JWKS_REFRESH_INTERVAL": "1x"} {
		t.Run(k, func(t *testing.T) {
			t.Setenv("JWT_ENABLED", "true")
			t.Setenv(k, v)
			var bad jwtFlags
			bad.register(pflag.NewFlagSet("t", pflag.ContinueOnError))
			if _, err := bad.settings(nil); err == nil || !strings.Contains(err.Error(), k) {
				t.Fatalf("%s=%s: %v", k, v, err)
			}
		})
	}
}

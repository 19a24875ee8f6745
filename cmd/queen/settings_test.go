package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestEnvInt: a whole number overrides the default, unset or empty keeps it,
// a given flag wins over the environment, and a malformed value is refused
// with an error naming the variable (not silently replaced by the default).
func TestEnvInt(t *testing.T) {
	const name = "QUEEN_DEDUP_CACHE_MB"
	// The range checks are the setting's own (dedupCacheSettings): -3 is read.
	for env, want := range map[string]int{"": 512, "64": 64, "-3": -3} {
		t.Setenv(name, env)
		n := 512
		if err := envInt(nil, "", name, &n); err != nil || n != want {
			t.Errorf("%s=%q: %d, %v; want %d", name, env, n, err, want)
		}
	}
	for _, env := range []string{"64MiB", "1e3", " 64", "0x40"} {
		t.Setenv(name, env)
		n := 512
		if err := envInt(nil, "", name, &n); err == nil || !strings.Contains(err.Error(), name) || n != 512 {
			t.Errorf("%s=%q: %d, %v; want an error naming the variable, the value untouched", name, env, n, err)
		}
	}

	// The flag, when given, wins; the malformed variable is not read then.
	cmd := &cobra.Command{}
	n := 512
	cmd.Flags().IntVar(&n, "dedup-cache-mb", 512, "")
	if err := cmd.Flags().Set("dedup-cache-mb", "32"); err != nil {
		t.Fatal(err)
	}
	t.Setenv(name, "lots")
	if err := envInt(cmd, "dedup-cache-mb", name, &n); err != nil || n != 32 {
		t.Fatalf("flag given: %d, %v; want 32, nil", n, err)
	}
}

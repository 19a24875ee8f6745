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
	for _, c := range []struct {
		env  string
		want int
		bad  bool
	}{
		{"", 512, false},
		{"64", 64, false},
		{"-3", -3, false}, // range checks are the setting's own (dedupCacheSettings)
		{"64MiB", 0, true},
		{"1e3", 0, true},
		{" 64", 0, true},
	} {
		t.Setenv("QUEEN_DEDUP_CACHE_MB", c.env)
		n := 512
		err := envInt(nil, "", "QUEEN_DEDUP_CACHE_MB", &n)
		if c.bad {
			if err == nil || !strings.Contains(err.Error(), "QUEEN_DEDUP_CACHE_MB") {
				t.Errorf("QUEEN_DEDUP_CACHE_MB=%q: error %v; want one naming the variable", c.env, err)
			}
			continue
		}
		if err != nil || n != c.want {
			t.Errorf("QUEEN_DEDUP_CACHE_MB=%q: %d, %v; want %d", c.env, n, err, c.want)
		}
	}

	// The flag, when given, wins; the malformed variable is not read then.
	cmd := &cobra.Command{}
	n := 512
	cmd.Flags().IntVar(&n, "dedup-cache-mb", 512, "")
	if err := cmd.Flags().Set("dedup-cache-mb", "32"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("QUEEN_DEDUP_CACHE_MB", "lots")
	if err := envInt(cmd, "dedup-cache-mb", "QUEEN_DEDUP_CACHE_MB", &n); err != nil || n != 32 {
		t.Fatalf("flag given: %d, %v; want 32, nil", n, err)
	}
}

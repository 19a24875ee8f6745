package main

import (
	"testing"
	"time"

	"github.com/queen-mq/queen-go/persistence"
)

// TestLockSettings: QUEEN_LOCK_TIMEOUT is a Go duration from 1ms to 10m,
// default 5s; a bad value stops the start with an error naming it.
func TestLockSettings(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
		bad  bool
	}{
		{"", persistence.DefaultLockTimeout, false},
		{"300ms", 300 * time.Millisecond, false},
		{"2m", 2 * time.Minute, false},
		{"5", 0, true},
		{"0s", 0, true},
		{"11m", 0, true},
	} {
		t.Setenv("QUEEN_LOCK_TIMEOUT", c.env)
		var d time.Duration
		err := lockSettings(nil, &d)
		if c.bad {
			if err == nil {
				t.Errorf("QUEEN_LOCK_TIMEOUT=%q: no error", c.env)
			}
			continue
		}
		if err != nil || d != c.want {
			t.Errorf("QUEEN_LOCK_TIMEOUT=%q: %v, %v; want %v", c.env, d, err, c.want)
		}
	}
}

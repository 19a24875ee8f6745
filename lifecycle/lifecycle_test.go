package lifecycle

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestSettingChecks: NotNegative and Required name the setting in a
// *SettingError, and nil when the setting is fine; joined, every bad one
// is named.
func TestSettingChecks(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string // "" for nil
	}{
		{NotNegative("C.Lease", -time.Second), "C.Lease is -1s; it must be >= 0 (0 takes the default)"},
		{NotNegative("C.Count", -3), "C.Count is -3; it must be >= 0 (0 takes the default)"},
		{NotNegative("C.Count", 0), ""},
		{NotNegative("C.Bytes", int64(1)), ""},
		{Required("C.Store", true), "C.Store is unset; it must be set"},
		{Required("C.Store", false), ""},
	} {
		if c.want == "" {
			if c.err != nil {
				t.Errorf("got %v, want nil", c.err)
			}
			continue
		}
		var se *SettingError
		if !errors.As(c.err, &se) || c.err.Error() != c.want {
			t.Errorf("got %#v (%v), want a *SettingError %q", c.err, c.err, c.want)
		}
	}
	err := fmt.Errorf("pkg: %w", errors.Join(Required("C.A", true), NotNegative("C.B", -1)))
	var se *SettingError
	if !errors.As(err, &se) || se.Setting != "C.A" || err.Error() != "pkg: C.A is unset; it must be set\nC.B is -1; it must be >= 0 (0 takes the default)" {
		t.Errorf("joined: %q", err)
	}
}

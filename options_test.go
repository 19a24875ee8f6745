package queen

import (
	"encoding/json"
	"strings"
	"testing"
)

// Apply sets only the options a patch gives, and copies base's not-enforced
// options rather than writing into them.
func TestOptionsPatchApply(t *testing.T) {
	base := DefaultOptions()
	base.RetryLimit = 9
	base.NotEnforced = map[string]json.RawMessage{"ttl": json.RawMessage(`5`)}
	on := true
	got := OptionsPatch{LeaseTime: new(int64(60)), DedupCheckPayload: &on,
		NotEnforced: map[string]json.RawMessage{"priority": json.RawMessage(`2`)}}.Apply(base)
	if got.LeaseTime != 60 || !got.DedupCheckPayload || got.RetryLimit != 9 || got.DedupWindowSeconds != 3600 ||
		string(got.NotEnforced["ttl"]) != "5" || string(got.NotEnforced["priority"]) != "2" {
		t.Fatalf("got %+v", got)
	}
	if len(base.NotEnforced) != 1 || base.LeaseTime != 300 {
		t.Fatalf("base modified: %+v", base)
	}
	if o := (OptionsPatch{}).Apply(DefaultOptions()); o.NotEnforced != nil {
		t.Fatalf("an empty patch on the defaults: %+v", o)
	}
}

// DataLoss names exactly the changes that delete stored data or give up
// dedup over it (the admin token guards them on existing queues).
func TestOptionsDataLoss(t *testing.T) {
	t.Parallel()
	base := Options{DedupWindowSeconds: 600, RetentionSeconds: 3600, CompletedRetentionSeconds: 0, LeaseTime: 300, RetryLimit: 3}
	for _, c := range []struct {
		name string
		mod  func(*Options)
		want string
	}{
		{"same", func(*Options) {}, ""},
		{"retention widened", func(o *Options) { o.RetentionSeconds = 7200 }, ""},
		{"retention off (keep)", func(o *Options) { o.RetentionSeconds = 0 }, ""},
		{"retention lowered", func(o *Options) { o.RetentionSeconds = 1 }, "retentionSeconds 3600 -> 1"},
		{"completed retention set", func(o *Options) { o.CompletedRetentionSeconds = 86400 }, "completedRetentionSeconds 0 -> 86400"},
		{"window off", func(o *Options) { o.DedupWindowSeconds = 0 }, "dedupWindowSeconds 600 -> 0"},
		{"window shortened", func(o *Options) { o.DedupWindowSeconds = 599 }, "dedupWindowSeconds 600 -> 599"},
		{"window widened", func(o *Options) { o.DedupWindowSeconds = 3600 }, ""},
		{"delivery options", func(o *Options) {
			o.LeaseTime, o.RetryLimit, o.DelayedProcessing, o.WindowBuffer, o.DedupCheckPayload = 1, 0, 0, 0, true
		}, ""},
		{"two at once", func(o *Options) { o.RetentionSeconds, o.DedupWindowSeconds = 60, 0 }, "retentionSeconds 3600 -> 60, dedupWindowSeconds 600 -> 0"},
	} {
		next := base
		c.mod(&next)
		if got := strings.Join(base.DataLoss(next), ", "); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	// A window turned on from off widens.
	if got := (Options{}).DataLoss(Options{DedupWindowSeconds: 60}); got != nil {
		t.Errorf("window on: %v", got)
	}
}

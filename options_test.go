package queen

import (
	"encoding/json"
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

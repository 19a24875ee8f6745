package queen

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Options are a queue's options (SPEC.md §6). Every value is a whole number
// (units are in the names' docs) except DedupCheckPayload, a bool.
type Options struct {
	// DedupWindowSeconds: duplicate window in seconds; 0 disables the check. Default 3600.
	DedupWindowSeconds int64 `json:"dedupWindowSeconds"`
	// LeaseTime: lease on popped spans, seconds. Default 300.
	LeaseTime int64 `json:"leaseTime"`
	// RetryLimit: redeliveries after the first before the DLQ. Default 3.
	RetryLimit int64 `json:"retryLimit"`
	// RetentionSeconds: delete segments older than this, consumed or not; 0 keeps. Default 0.
	RetentionSeconds int64 `json:"retentionSeconds"`
	// CompletedRetentionSeconds: delete segments older than this once every group consumed them; 0 keeps.
	CompletedRetentionSeconds int64 `json:"completedRetentionSeconds"`
	// DelayedProcessing: a message becomes visible this many seconds after it was stored.
	DelayedProcessing int64 `json:"delayedProcessing"`
	// WindowBuffer: a partition is served only once its newest message is this many seconds old.
	WindowBuffer int64 `json:"windowBuffer"`
	// DedupCheckPayload: a duplicate whose payload bytes differ from the
	// original's stays a duplicate (original id, nothing written) and its
	// verdict carries payloadMismatch (SPEC.md §6). Default false.
	DedupCheckPayload bool `json:"dedupCheckPayload"`
	// NotEnforced holds the upstream options this broker stores but does not act on
	// (SPEC.md §6), by name, as the client sent them.
	NotEnforced map[string]json.RawMessage `json:"-"`
}

// DefaultOptions returns the defaults of SPEC.md §6.
func DefaultOptions() Options {
	return Options{DedupWindowSeconds: 3600, LeaseTime: 300, RetryLimit: 3}
}

// NotEnforcedOptions are accepted, stored and echoed but not acted on (SPEC.md §6).
var NotEnforcedOptions = []string{"priority", "retryDelay", "ttl", "maxSize", "encryptionEnabled", "deadLetterQueue", "dlqAfterMaxRetries", "maxWaitTimeSeconds"}

// optField is one whole-number option: its wire name and its field.
type optField struct {
	name string
	p    *int64
}

func (o *Options) fields() []optField {
	return []optField{
		{"dedupWindowSeconds", &o.DedupWindowSeconds},
		{"leaseTime", &o.LeaseTime},
		{"retryLimit", &o.RetryLimit},
		{"retentionSeconds", &o.RetentionSeconds},
		{"completedRetentionSeconds", &o.CompletedRetentionSeconds},
		{"delayedProcessing", &o.DelayedProcessing},
		{"windowBuffer", &o.WindowBuffer},
	}
}

// Map returns every option by its wire name (enforced ones as int64, the
// not-enforced ones as stored).
func (o Options) Map() map[string]any {
	m := make(map[string]any, 16)
	for _, f := range o.fields() {
		m[f.name] = *f.p
	}
	m[optCheckPayload] = o.DedupCheckPayload
	for k, v := range o.NotEnforced {
		m[k] = v
	}
	return m
}

// MarshalJSON encodes every option by its wire name.
func (o Options) MarshalJSON() ([]byte, error) { return json.Marshal(o.Map()) }

// UnmarshalJSON decodes options stored by MarshalJSON without validation.
func (o *Options) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*o = DefaultOptions()
	for _, f := range o.fields() {
		if v, ok := raw[f.name]; ok {
			if err := json.Unmarshal(v, f.p); err != nil {
				return err
			}
			delete(raw, f.name)
		}
	}
	if v, ok := raw[optCheckPayload]; ok {
		if err := json.Unmarshal(v, &o.DedupCheckPayload); err != nil {
			return err
		}
		delete(raw, optCheckPayload)
	}
	if len(raw) > 0 {
		o.NotEnforced = raw
	}
	return nil
}

// ApplyOptions validates raw client options (SPEC.md §6) and applies them on
// top of base (DefaultOptions() for a full replace, the stored options for
// "mode":"merge"). An unknown key, a negative or non-integer number or a value
// of the wrong type (dedupCheckPayload takes only true or false) is an
// ErrUnknownOption/ErrInvalidOption naming it.
func ApplyOptions(base Options, raw map[string]json.RawMessage) (Options, error) {
	out := base
	out.NotEnforced = maps.Clone(base.NotEnforced)
	keys := slices.Sorted(maps.Keys(raw))
next:
	for _, k := range keys {
		v := raw[k]
		if k == optCheckPayload {
			b, ok := jsonBool(v)
			if !ok {
				return Options{}, fieldErr(ErrInvalidOption.With("option %q must be true or false, got %s", k, v), "options."+k)
			}
			out.DedupCheckPayload = b
			continue
		}
		for _, f := range out.fields() {
			if f.name != k {
				continue
			}
			n, ok := wholeNumber(v)
			if !ok {
				return Options{}, fieldErr(ErrInvalidOption.With("option %q must be a whole number from 0 to %d, got %s", k, maxOptionValue, v), "options."+k)
			}
			if k == "leaseTime" && n < 1 {
				return Options{}, fieldErr(ErrInvalidOption.With("option \"leaseTime\" must be at least 1 second (a lease of 0 would hand the same messages to every pop), got %s", v), "options."+k)
			}
			*f.p = n
			continue next
		}
		if slices.Contains(NotEnforcedOptions, k) {
			if out.NotEnforced == nil {
				out.NotEnforced = map[string]json.RawMessage{}
			}
			out.NotEnforced[k] = v
			continue
		}
		return Options{}, fieldErr(ErrUnknownOption.With("unknown option %q", k), "options."+k)
	}
	return out, nil
}

// optCheckPayload is the wire name of Options.DedupCheckPayload, the one
// bool option.
const optCheckPayload = "dedupCheckPayload"

// jsonBool parses the JSON literals true and false (no quotes, no numbers).
func jsonBool(v json.RawMessage) (bool, bool) {
	switch strings.TrimSpace(string(v)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// maxOptionValue bounds every option (about 68 years in seconds).
const maxOptionValue = 1 << 31

// wholeNumber parses a JSON number literal made only of digits (no sign,
// fraction, exponent or quotes) up to maxOptionValue.
func wholeNumber(v json.RawMessage) (int64, bool) {
	s := strings.TrimSpace(string(v))
	if s == "" || len(s) > 10 {
		return 0, false
	}
	var n int64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, n <= maxOptionValue
}

// Change is one option's change in a configure reply (SPEC.md §6).
type Change struct {
	From any `json:"from"`
	To   any `json:"to"`
}

// Diff lists the options whose values differ between old and new, by wire name.
func Diff(old, new Options) map[string]Change {
	a, b := old.Map(), new.Map()
	out := map[string]Change{}
	for k, v := range b {
		if w, ok := a[k]; !ok || fmt.Sprint(raw(w)) != fmt.Sprint(raw(v)) {
			if !ok {
				w = nil
			}
			out[k] = Change{From: w, To: v}
		}
	}
	for k, w := range a {
		if _, ok := b[k]; !ok {
			out[k] = Change{From: w, To: nil}
		}
	}
	return out
}

func raw(v any) any {
	if r, ok := v.(json.RawMessage); ok {
		return string(r)
	}
	return v
}

package queen

import (
	"encoding/json"
	"fmt"
	"maps"
)

// MaxLeaseExtendSeconds caps one lease extension (POST
// /api/v1/lease/{leaseId}/extend, queen.v1.lease.extend): it asks for at
// most the greater of the queue's leaseTime and this many seconds (12 hours,
// SQS's longest visibility timeout) from now; more is capped, and the reply's
// newExpiresAt says what was granted. A consumer with longer work extends
// again before the lease ends.
const MaxLeaseExtendSeconds = 12 * 60 * 60

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

// DataLoss lists the changes from o (a queue's stored options) to next that
// delete data or give up a guarantee over data already stored, as
// "<option> <from> -> <to>" by wire name, in a fixed order; nil when next
// only keeps or widens. With QUEEN_ADMIN_TOKEN set, a configure of an
// existing queue with such a change needs the token (issue 29):
//
//   - retentionSeconds or completedRetentionSeconds set where it was 0
//     (keep), or lowered: stored segments older than the new value are
//     deleted at the next retention tick;
//   - dedupWindowSeconds lowered, or set to 0 (off): pushes of stored
//     transactionIds that the old window still covered are stored again.
//
// The other options change delivery, not what is kept: leaseTime,
// retryLimit (a message past it goes to the DLQ, which keeps it),
// delayedProcessing, windowBuffer, dedupCheckPayload, the not-enforced
// options and the namespace/task labels.
func (o Options) DataLoss(next Options) []string {
	var out []string
	for _, f := range [...]struct {
		name      string
		from, to  int64
		zeroKeeps bool // 0 keeps everything (retention); else 0 is off (the window)
	}{
		{"retentionSeconds", o.RetentionSeconds, next.RetentionSeconds, true},
		{"completedRetentionSeconds", o.CompletedRetentionSeconds, next.CompletedRetentionSeconds, true},
		{"dedupWindowSeconds", o.DedupWindowSeconds, next.DedupWindowSeconds, false},
	} {
		var loses bool
		if f.zeroKeeps {
			loses = f.to > 0 && (f.from == 0 || f.to < f.from)
		} else {
			loses = f.from > 0 && f.to < f.from
		}
		if loses {
			out = append(out, fmt.Sprintf("%s %d -> %d", f.name, f.from, f.to))
		}
	}
	return out
}

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

// OptionsPatch is the options one configure call gives (SPEC.md §6), as
// transport/wire.DecodeConfigure validated them: a nil field is an option
// the call leaves out. Values are in the units of the Options field of the
// same name; the tags are the wire names.
type OptionsPatch struct {
	DedupWindowSeconds        *int64 `json:"dedupWindowSeconds,omitempty"`
	LeaseTime                 *int64 `json:"leaseTime,omitempty"`
	RetryLimit                *int64 `json:"retryLimit,omitempty"`
	RetentionSeconds          *int64 `json:"retentionSeconds,omitempty"`
	CompletedRetentionSeconds *int64 `json:"completedRetentionSeconds,omitempty"`
	DelayedProcessing         *int64 `json:"delayedProcessing,omitempty"`
	WindowBuffer              *int64 `json:"windowBuffer,omitempty"`
	DedupCheckPayload         *bool  `json:"dedupCheckPayload,omitempty"`
	// NotEnforced holds the given options of NotEnforcedOptions, by name, as
	// the client sent them (nil when none).
	NotEnforced map[string]json.RawMessage `json:"-"`
}

// Apply returns base with the options p gives set; base is DefaultOptions()
// for a full replace, the stored options for "mode":"merge". It does not
// modify base (its NotEnforced map is copied).
func (p OptionsPatch) Apply(base Options) Options {
	out := base
	for _, f := range [...]struct{ dst, v *int64 }{
		{&out.DedupWindowSeconds, p.DedupWindowSeconds}, {&out.LeaseTime, p.LeaseTime}, {&out.RetryLimit, p.RetryLimit},
		{&out.RetentionSeconds, p.RetentionSeconds}, {&out.CompletedRetentionSeconds, p.CompletedRetentionSeconds},
		{&out.DelayedProcessing, p.DelayedProcessing}, {&out.WindowBuffer, p.WindowBuffer},
	} {
		if f.v != nil {
			*f.dst = *f.v
		}
	}
	if p.DedupCheckPayload != nil {
		out.DedupCheckPayload = *p.DedupCheckPayload
	}
	out.NotEnforced = maps.Clone(base.NotEnforced)
	if len(p.NotEnforced) > 0 && out.NotEnforced == nil {
		out.NotEnforced = make(map[string]json.RawMessage, len(p.NotEnforced))
	}
	maps.Copy(out.NotEnforced, p.NotEnforced)
	return out
}

// optCheckPayload is the wire name of Options.DedupCheckPayload, the one
// bool option.
const optCheckPayload = "dedupCheckPayload"

// Change is one option's change in a configure reply (SPEC.md §6).
type Change struct {
	From any `json:"from"`
	To   any `json:"to"`
}

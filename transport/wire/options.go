package wire

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/queen-mq/queen-go"
)

// optionsPatch validates the raw options of a configure body (SPEC.md §6)
// and returns them typed. Keys are checked in sorted order and the first
// refused one is the error, with field path "options.<key>": an unknown key
// is ErrUnknownOption; a whole-number option that is not a JSON literal of
// digits from its least value (optionMin: 1 for leaseTime, else 0) to
// MaxOptionValue, or a dedupCheckPayload other than true or false, is
// ErrInvalidOption, whose message states the accepted range.
func optionsPatch(raw map[string]json.RawMessage) (queen.OptionsPatch, error) {
	var p queen.OptionsPatch
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		v := raw[k]
		if k == "dedupCheckPayload" {
			b, ok := jsonBool(v)
			if !ok {
				return queen.OptionsPatch{}, fieldErr(queen.ErrInvalidOption.With("option %q must be true or false, got %s", k, v), "options."+k)
			}
			p.DedupCheckPayload = &b
			continue
		}
		if dst := wholeNumberOption(&p, k); dst != nil {
			least, why := optionMin(k)
			n, ok := wholeNumber(v)
			if !ok || n < least {
				return queen.OptionsPatch{}, fieldErr(queen.ErrInvalidOption.With("option %q must be a whole number from %d to %d%s, got %s", k, least, MaxOptionValue, why, v), "options."+k)
			}
			*dst = &n
			continue
		}
		if slices.Contains(queen.NotEnforcedOptions, k) {
			if p.NotEnforced == nil {
				p.NotEnforced = map[string]json.RawMessage{}
			}
			p.NotEnforced[k] = v
			continue
		}
		return queen.OptionsPatch{}, fieldErr(queen.ErrUnknownOption.With("unknown option %q", k), "options."+k)
	}
	return p, nil
}

// wholeNumberOption returns the field of p for the whole-number option
// named name (its wire name), nil for any other name.
func wholeNumberOption(p *queen.OptionsPatch, name string) **int64 {
	switch name {
	case "dedupWindowSeconds":
		return &p.DedupWindowSeconds
	case "leaseTime":
		return &p.LeaseTime
	case "retryLimit":
		return &p.RetryLimit
	case "retentionSeconds":
		return &p.RetentionSeconds
	case "completedRetentionSeconds":
		return &p.CompletedRetentionSeconds
	case "delayedProcessing":
		return &p.DelayedProcessing
	case "windowBuffer":
		return &p.WindowBuffer
	}
	return nil
}

// optionMin is the least value of the whole-number option named name, and
// why, when it is not 0, for the error message: a leaseTime of 0 would hand
// the same messages to every pop.
func optionMin(name string) (int64, string) {
	if name == "leaseTime" {
		return 1, " (a lease of 0 would hand the same messages to every pop)"
	}
	return 0, ""
}

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

// MaxOptionValue is the largest value of every whole-number option of a
// configure (SPEC.md §6): 2^31-1 (2,147,483,647; as seconds about 68
// years), the largest int32, as for a lease extension's seconds. A larger
// value is refused with ErrInvalidOption.
const MaxOptionValue = 1<<31 - 1

// wholeNumber parses a JSON number literal made only of digits (no sign,
// fraction, exponent or quotes) up to MaxOptionValue.
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
	return n, n <= MaxOptionValue
}

package queen

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestValidateItem: the one item validator refuses what the broker refuses,
// with the broker's code, index and field (SPEC.md §10, issue 29).
func TestValidateItem(t *testing.T) {
	t.Parallel()
	type item struct{ q, p, txn, trace string }
	for _, tc := range []struct {
		name  string
		it    item
		code  string // "" accepted
		field string
	}{
		{"plain", item{"orders", "o-1", "order:1:v1", "trace-1"}, "", ""},
		{"defaults", item{"orders", "", "", ""}, "", ""},
		{"non_ascii", item{"日本", "Bed&Breakfast-771", "2026/07/BK-11 é 😀", "ü"}, "", ""},
		{"zwnj_zwj", item{"می\u200cخواهم", "👩\u200d💻", "t", ""}, "", ""},
		{"nbsp_and_u00a0", item{"a\u00a0b", "p", "t\u00a0", ""}, "", ""},
		{"txn_keeps_format_chars", item{"q", "p", "t\ufeff\u200b\u2028", ""}, "", ""},
		{"limits", item{strings.Repeat("q", 255), strings.Repeat("p", 255), strings.Repeat("t", 1024), strings.Repeat("r", 1024)}, "", ""},
		{"trace_too_long", item{"q", "p", "t", strings.Repeat("r", 1025)}, "too_long", "items[3].traceId"},

		{"missing_queue", item{"", "p", "t", ""}, "missing_field", "items[3].queue"},
		{"txn_ff_fe", item{"q", "p", "\xff\xfe", ""}, "invalid_utf8", "items[3].transactionId"},
		{"txn_fe_ff", item{"q", "p", "\xfe\xff", ""}, "invalid_utf8", "items[3].transactionId"},
		{"partition_ff_fe", item{"q", "\xff\xfe", "t", ""}, "invalid_utf8", "items[3].partition"},
		{"queue_truncated_rune", item{"q\xe6\x97", "p", "t", ""}, "invalid_utf8", "items[3].queue"},
		{"surrogate_bytes", item{"q", "p", "\xed\xa0\x80", ""}, "invalid_utf8", "items[3].transactionId"},
		{"trace_invalid", item{"q", "p", "t", "x\xff"}, "invalid_utf8", "items[3].traceId"},
		{"queue_c0", item{"q\x01", "p", "t", ""}, "control_character", "items[3].queue"},
		{"partition_newline", item{"q", "a\nb", "t", ""}, "control_character", "items[3].partition"},
		{"txn_del", item{"q", "p", "x\x7f", ""}, "control_character", "items[3].transactionId"},
		{"txn_c1_nel", item{"q", "p", "x\u0085", ""}, "control_character", "items[3].transactionId"},
		{"txn_c1_last", item{"q", "p", "x\u009f", ""}, "control_character", "items[3].transactionId"},
		{"queue_c1_first", item{"q\u0080", "p", "t", ""}, "control_character", "items[3].queue"},
		{"queue_bom", item{"\ufefforders", "p", "t", ""}, "control_character", "items[3].queue"},
		{"partition_line_separator", item{"q", "p\u2028", "t", ""}, "control_character", "items[3].partition"},
		{"partition_paragraph_separator", item{"q", "p\u2029", "t", ""}, "control_character", "items[3].partition"},
		{"partition_zero_width_space", item{"q", "o\u200b-1", "t", ""}, "control_character", "items[3].partition"},
		{"queue_rtl_override", item{"q\u202e", "p", "t", ""}, "control_character", "items[3].queue"},
		{"queue_soft_hyphen", item{"or\u00adders", "p", "t", ""}, "control_character", "items[3].queue"},
		{"queue_tag_char", item{"q\U000e0041", "p", "t", ""}, "control_character", "items[3].queue"},
		{"queue_too_long", item{strings.Repeat("q", 256), "p", "t", ""}, "too_long", "items[3].queue"},
		{"txn_too_long", item{"q", "p", strings.Repeat("é", 513), ""}, "too_long", "items[3].transactionId"},
	} {
		e := ValidateItem(3, tc.it.q, tc.it.p, tc.it.txn, tc.it.trace)
		if tc.code == "" {
			if e != nil {
				t.Errorf("%s: refused: %v", tc.name, e)
			}
			continue
		}
		if e == nil {
			t.Errorf("%s: accepted, want %s", tc.name, tc.code)
			continue
		}
		if e.Code != tc.code || e.Field != tc.field || e.Index == nil || *e.Index != 3 || e.Status != 400 || e.Retryable {
			t.Errorf("%s: got %s %q index %v status %d (%s), want %s %q index 3", tc.name, e.Code, e.Field, e.Index, e.Status, e.Message, tc.code, tc.field)
		}
		if !strings.HasPrefix(e.Message, tc.field+" ") {
			t.Errorf("%s: message %q does not name %s", tc.name, e.Message, tc.field)
		}
		// Alone (the async producer's form): the bare field, no index.
		if a := ValidateItem(-1, tc.it.q, tc.it.p, tc.it.txn, tc.it.trace); a == nil || a.Code != tc.code || a.Index != nil ||
			a.Field != strings.TrimPrefix(tc.field, "items[3].") {
			t.Errorf("%s alone: got %+v", tc.name, a)
		}
	}
	// The two ids encoding/json would both turn into "\ufffd\ufffd" are
	// refused, and name the byte.
	e := ValidateItem(0, "q", "", "\xfe\xff", "")
	if e == nil || !strings.Contains(e.Message, "byte 0xFE at byte 0") {
		t.Fatalf("got %v", e)
	}
}

// TestValidatePayload: the payload rule refuses, in its order, a payload
// over the limit, invalid UTF-8, text that is not one JSON value and a lone
// surrogate escape, with the broker's code, index and field; CheckPayload,
// for a payload whose encoding is known good, checks only the size.
func TestValidatePayload(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		payload string
		code    string // "" accepted
	}{
		{"object", `{"n":1}`, ""},
		{"null", `null`, ""},
		{"at_the_limit", `"` + strings.Repeat("x", 62) + `"`, ""},
		{"pair_and_escapes", `{"a":"\ud83d\ude00\\ud800\n\u00e9\uDBFF\uDFFF"}`, ""},
		{"escaped_backslash_before_u", `"\\udc00"`, ""},
		{"non_ascii", `"日本 😀"`, ""},

		{"over_the_limit", `"` + strings.Repeat("x", 63) + `"`, "payload_too_large"},
		{"too_large_beats_utf8", "\"" + strings.Repeat("\xff", 63) + "\"", "payload_too_large"},
		{"invalid_utf8", "\"\xff\"", "invalid_utf8"},
		{"utf8_beats_json", "{\xff", "invalid_utf8"},
		{"empty", ``, "invalid_json"},
		{"two_values", `1 2`, "invalid_json"},
		{"unterminated", `{"a":`, "invalid_json"},
		{"lone_high", `"\ud800"`, "invalid_utf8"},
		{"lone_high_at_end", `["\uDBFF"]`, "invalid_utf8"},
		{"high_then_char", `"\ud800x"`, "invalid_utf8"},
		{"high_then_bmp_escape", `"\ud800\u0041"`, "invalid_utf8"},
		{"two_highs", `"\ud800\ud800"`, "invalid_utf8"},
		{"lone_low", `{"\udfff":1}`, "invalid_utf8"},
		{"low_then_high", `["\udc00\ud800"]`, "invalid_utf8"},
	} {
		for _, field := range []string{"payload", "data"} {
			e := ValidatePayload(3, field, []byte(tc.payload), 64)
			if tc.code == "" {
				if e != nil {
					t.Errorf("%s: refused: %v", tc.name, e)
				}
				continue
			}
			want := "items[3]." + field
			if e == nil {
				t.Errorf("%s: accepted, want %s", tc.name, tc.code)
				continue
			}
			if e.Code != tc.code || e.Field != want || e.Index == nil || *e.Index != 3 || e.Status != 400 || e.Retryable ||
				!strings.HasPrefix(e.Message, want+" ") {
				t.Errorf("%s: got %s %q index %v status %d (%s), want %s %q index 3", tc.name, e.Code, e.Field, e.Index, e.Status, e.Message, tc.code, want)
			}
			// Alone: the bare field, no index.
			if a := ValidatePayload(-1, field, []byte(tc.payload), 64); a == nil || a.Code != tc.code || a.Index != nil ||
				a.Field != field || !strings.HasPrefix(a.Message, field+" ") {
				t.Errorf("%s alone: got %+v", tc.name, a)
			}
		}
	}
	e := ValidatePayload(0, "payload", []byte(`"`+strings.Repeat("x", 15)+`"`), 16)
	if e == nil || e.Message != "items[0].payload is 17 bytes of JSON; the limit is 16" {
		t.Fatalf("got %v", e)
	}
	// CheckPayload: the size part only.
	if e := CheckPayload(2, "data", []byte(`"\ud800"`), 16); e != nil {
		t.Fatalf("CheckPayload looked past the size: %v", e)
	}
	if e := CheckPayload(2, "data", []byte(strings.Repeat("1", 17)), 16); e == nil || e.Code != "payload_too_large" || e.Field != "items[2].data" {
		t.Fatalf("CheckPayload over the limit: %v", e)
	}
}

// TestValidateNameRules: ValidateName, CheckName and ValidateNameToDelete
// agree with the rule written out from Unicode's categories, over every
// rune of the BMP and the supplementary planes' format characters.
func TestValidateNameRules(t *testing.T) {
	t.Parallel()
	refused := func(r rune) bool {
		return unicode.Is(unicode.Cc, r) || unicode.In(r, unicode.Zl, unicode.Zp) ||
			(unicode.Is(unicode.Cf, r) && r != 0x200c && r != 0x200d)
	}
	check := func(r rune) {
		if !utf8.ValidRune(r) {
			return
		}
		name := "a" + string(r) + "b"
		err := ValidateName(name, "queue")
		if got, want := err != nil, refused(r); got != want {
			t.Fatalf("ValidateName(U+%04X) = %v; refused want %t", r, err, want)
		}
		if got := IsRefusedInName(r); got != refused(r) {
			t.Fatalf("IsRefusedInName(U+%04X) = %t", r, got)
		}
		if err != nil && AsError(err).Code != ErrControlChar.Code {
			t.Fatalf("U+%04X: code %s", r, AsError(err).Code)
		}
		// A transactionId refuses only the controls; a delete route takes
		// the names refused for being invisible.
		if got, want := ValidateTransactionID(name, "transactionId") != nil, unicode.Is(unicode.Cc, r); got != want {
			t.Fatalf("ValidateTransactionID(U+%04X): refused %t, want %t", r, got, want)
		}
		if got, want := ValidateNameToDelete(name, "queue") != nil, unicode.Is(unicode.Cc, r); got != want {
			t.Fatalf("ValidateNameToDelete(U+%04X): refused %t, want %t", r, got, want)
		}
	}
	for r := rune(0); r < 0x10000; r++ {
		check(r)
	}
	for _, rt := range unicode.Cf.R32 {
		for r := rune(rt.Lo); r <= rune(rt.Hi); r += rune(rt.Stride) {
			check(r)
		}
	}
	if err := ValidateNameToDelete("\xff", "queue"); AsError(err).Code != ErrInvalidUTF8.Code {
		t.Fatalf("ValidateNameToDelete of invalid UTF-8: %v", err)
	}
}

// TestTruncateAckError: an ack's error text is kept whole up to
// MaxAckErrorBytes, and a longer one is cut on a character boundary with the
// marker, never over the limit (docs/contract.md §4).
func TestTruncateAckError(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "boom", strings.Repeat("x", MaxAckErrorBytes)} {
		if got := TruncateAckError(s); got != s {
			t.Fatalf("%d bytes changed to %d", len(s), len(got))
		}
	}
	for _, s := range []string{strings.Repeat("x", MaxAckErrorBytes+1), strings.Repeat("é", MaxAckErrorBytes), strings.Repeat("😀", 15<<20/4)} {
		got := TruncateAckError(s)
		if len(got) > MaxAckErrorBytes || len(got) < MaxAckErrorBytes-8 || !strings.HasSuffix(got, AckErrorTruncatedMarker) || !utf8.ValidString(got) {
			t.Fatalf("%d bytes cut to %d bytes (valid UTF-8 %v): ...%q", len(s), len(got), utf8.ValidString(got), got[len(got)-20:])
		}
		if !strings.HasPrefix(s, strings.TrimSuffix(got, AckErrorTruncatedMarker)) {
			t.Fatal("the kept text is not a prefix of the error")
		}
	}
}

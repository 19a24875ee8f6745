package queen

import (
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Limits of SPEC.md §10.
const (
	// MaxItems is the most items one push may carry (SPEC.md §10).
	MaxItems = 10000
	// MaxBodyBytes is the largest request body (16 MiB); the transports enforce it with 413.
	MaxBodyBytes = 16 << 20
	// DefaultMaxPayloadBytes is the default QUEEN_MAX_PAYLOAD_BYTES (4 MiB,
	// SPEC.md §10): a 1 MiB document fits with room for its wrapping.
	DefaultMaxPayloadBytes = 4 << 20
	// MaxNameBytes is the longest queue or partition name, in bytes after JSON unescaping.
	MaxNameBytes = 255
	// MaxTransactionIDBytes is the longest transactionId, in bytes after JSON unescaping.
	MaxTransactionIDBytes = 1024
	// MaxTraceIDBytes is the longest traceId, in bytes after JSON unescaping
	// (docs/contract.md §10): longer ones are refused with ErrTooLong, as a
	// trace id is copied into every pop, peek and dead letter of its message.
	MaxTraceIDBytes = 1024
	// MaxAckErrorBytes is the most bytes of an ack's error text that are
	// kept (docs/contract.md §4): a longer text is cut at a UTF-8 boundary
	// and ends with AckErrorTruncatedMarker. The dead letter stores it.
	MaxAckErrorBytes = 4096
)

// AckErrorTruncatedMarker ends an ack's error text that TruncateAckError cut.
const AckErrorTruncatedMarker = "…[truncated]"

// TruncateAckError returns s when it holds at most MaxAckErrorBytes bytes,
// else its longest prefix that ends on a UTF-8 character boundary and leaves
// room for AckErrorTruncatedMarker, followed by the marker: at most
// MaxAckErrorBytes bytes in all (docs/contract.md §4).
func TruncateAckError(s string) string {
	if len(s) <= MaxAckErrorBytes {
		return s
	}
	cut := MaxAckErrorBytes - len(AckErrorTruncatedMarker)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + AckErrorTruncatedMarker
}

// The text rules, shared by the broker (its push decoder, the shards' re-check
// of items on shard subjects, every route that takes a name) and the clients
// (transport/client: the Client, the async Producer, the shard-aware client; the queen
// CLI), so that a client refuses exactly what a broker would refuse, with the
// same code and field, before it encodes anything (issue 29: encoding/json
// turns invalid UTF-8 into U+FFFD, so "\xff\xfe" and "\xfe\xff" would reach
// the broker as one transactionId).
//
//   - Every text field (queue, partition, transactionId, traceId, consumer
//     group, namespace, task) must be valid UTF-8: ErrInvalidUTF8.
//   - A control character (Unicode Cc: C0 U+0000–U+001F, DEL U+007F, C1
//     U+0080–U+009F) is refused in names and transactionIds: ErrControlChar.
//   - Names (queue, partition, consumer group, namespace, task) also refuse
//     the invisible characters that make look-alike names: the line and
//     paragraph separators U+2028 and U+2029 and the format characters
//     (Unicode Cf: the byte order mark U+FEFF, the soft hyphen U+00AD, the
//     zero-width space U+200B, the direction marks and overrides U+200E,
//     U+200F, U+202A–U+202E, U+2066–U+2069, ...), except the zero-width
//     non-joiner and joiner U+200C and U+200D that Persian, Indic scripts and
//     emoji sequences need: ErrControlChar.
//   - A transactionId is an opaque key hashed by its bytes (SPEC.md §2): two
//     look-alike ids are two keys, never a collision, so format characters
//     and separators are kept in it. A traceId is only checked for UTF-8 and
//     its length (MaxTraceIDBytes).

// IsControl reports whether r is a control character (Unicode Cc): C0
// (U+0000–U+001F), DEL (U+007F) or C1 (U+0080–U+009F). They are refused in
// names and transactionIds.
func IsControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r <= 0x9f) }

// IsRefusedInName reports whether a name may not hold r: a control character
// (IsControl), the separators U+2028 and U+2029, or a format character
// (Unicode Cf) other than U+200C and U+200D. See the rules above.
func IsRefusedInName(r rune) bool {
	switch {
	case IsControl(r), r == 0x2028, r == 0x2029:
		return true
	case r < 0xad, r == 0x200c, r == 0x200d:
		return false
	}
	return unicode.Is(unicode.Cf, r)
}

// ValidateName checks a queue or partition name (also a consumer group,
// namespace or task); field is the path named by the error. A name is 1 to
// MaxNameBytes bytes of valid UTF-8 without a character IsRefusedInName
// refuses: ErrMissingField, ErrTooLong, ErrInvalidUTF8 or ErrControlChar
// otherwise (SPEC.md §10; the format characters and separators since issue 29).
func ValidateName(name, field string) error {
	if name == "" {
		return fieldErr(ErrMissingField.With("%s must not be empty", field), field)
	}
	if e := checkUTF8(name, field); e != nil {
		return e
	}
	if e := CheckName(name, field); e != nil {
		return e
	}
	return nil
}

// ValidateNameToDelete checks a name given to a delete route (a queue, a
// consumer group) by the rule names had before the format characters and
// separators were refused (issue 29): 1 to MaxNameBytes bytes of valid UTF-8
// without a control character (IsControl). A look-alike queue created
// before then can still be deleted; ValidateName's errors otherwise.
func ValidateNameToDelete(name, field string) error {
	if name == "" {
		return fieldErr(ErrMissingField.With("%s must not be empty", field), field)
	}
	if e := checkUTF8(name, field); e != nil {
		return e
	}
	if e := CheckText(name, MaxNameBytes, field); e != nil {
		return e
	}
	return nil
}

// CheckName is the name rule of ValidateName for a name known to be valid
// UTF-8 (the push decoder has checked the whole body): ErrTooLong over
// MaxNameBytes, ErrControlChar for a character IsRefusedInName refuses; nil
// when name is accepted. An empty name is accepted here (the caller says
// whether it is missing).
func CheckName(name, field string) *Error {
	if len(name) > MaxNameBytes {
		return tooLong(name, MaxNameBytes, field)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 0x20 && c < 0x7f {
			continue
		}
		if c < utf8.RuneSelf {
			return refusedChar(rune(c), i, field)
		}
		r, size := utf8.DecodeRuneInString(name[i:])
		if IsRefusedInName(r) {
			return refusedChar(r, i, field)
		}
		i += size - 1
	}
	return nil
}

// CheckText is the transactionId rule of SPEC.md §10 for a string known to be
// valid UTF-8: it refuses s with ErrTooLong if it is over max bytes, or
// ErrControlChar if it holds a control character (IsControl: C0, DEL, C1);
// field is the path the error names. Nil when s is accepted.
func CheckText(s string, max int, field string) *Error {
	if len(s) > max {
		return tooLong(s, max, field)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 0x20 && c < 0x7f, c >= 0xc3: // printable ASCII; a lead byte above U+00BF
			continue
		case c < 0x20 || c == 0x7f:
			return refusedChar(rune(c), i, field)
		case c == 0xc2 && i+1 < len(s) && s[i+1] < 0xa0: // U+0080–U+009F
			return refusedChar(rune(s[i+1]), i, field) // C2 xx encodes U+00xx
		}
	}
	return nil
}

// ValidateTransactionID checks a transactionId outside a push body by the
// push's rules (SPEC.md §10): valid UTF-8, at most MaxTransactionIDBytes, no
// control character (IsControl). field names it in the error.
func ValidateTransactionID(txn, field string) error {
	if e := checkUTF8(txn, field); e != nil {
		return e
	}
	if e := CheckText(txn, MaxTransactionIDBytes, field); e != nil {
		return e
	}
	return nil
}

// ValidateItem is the one item validator (SPEC.md §10): it checks the text of
// a push item as the broker does, in the order the broker does, and returns
// the broker's error, or nil. queue is required (ErrMissingField); partition
// and transactionID may be empty (the Default partition; a generated id);
// traceID may be empty (none). Names follow ValidateName, the transactionId
// ValidateTransactionID, and the traceId must be valid UTF-8. Errors:
// ErrMissingField, ErrInvalidUTF8, ErrControlChar, ErrTooLong, all 400.
//
// i is the item's index in its request: the error names it (Index i, field
// "items[i].transactionId"). With i < 0 (an item sent alone, as the async
// producer takes them) the error has no index and names the bare field
// ("transactionId").
func ValidateItem(i int, queue, partition, transactionID, traceID string) *Error {
	if queue == "" {
		return at(ErrMissingField.With("%s is required", itemField(i, "queue")), i, "queue")
	}
	if e := itemText(i, "queue", queue); e != nil {
		return e
	}
	if e := itemText(i, "partition", partition); e != nil {
		return e
	}
	if e := itemText(i, "transactionId", transactionID); e != nil {
		return e
	}
	if traceID != "" && !utf8.ValidString(traceID) {
		return at(checkUTF8(traceID, itemField(i, "traceId")), i, "traceId")
	}
	if len(traceID) > MaxTraceIDBytes {
		return at(tooLong(traceID, MaxTraceIDBytes, itemField(i, "traceId")), i, "traceId")
	}
	return nil
}

// ValidatePayload is the payload rule (SPEC.md §10): an item's payload,
// the JSON text the client sent for "payload" (or its alias "data", which
// field names), is at most maxBytes bytes (QUEEN_MAX_PAYLOAD_BYTES, default
// DefaultMaxPayloadBytes), valid UTF-8, one JSON value, and escapes no half
// of a UTF-16 surrogate pair alone (\ud800 without its low half, or a low
// half first). It returns, in that order, ErrPayloadTooLarge, ErrInvalidUTF8,
// ErrInvalidJSON or ErrInvalidUTF8 (all 400), or nil. The shards check items
// on their subjects with it and the shard-aware client vouches for an item
// with it; the push decoder, which has walked the whole body, calls
// CheckPayload. i names the item as in ValidateItem.
func ValidatePayload(i int, field string, payload []byte, maxBytes int) *Error {
	if e := CheckPayload(i, field, payload, maxBytes); e != nil {
		return e
	}
	switch {
	case !utf8.Valid(payload):
		return at(ErrInvalidUTF8.With("%s is not valid UTF-8", itemField(i, field)), i, field)
	case !json.Valid(payload):
		return at(ErrInvalidJSON.With("%s is not one JSON value", itemField(i, field)), i, field)
	case hasLoneSurrogate(payload):
		return at(ErrInvalidUTF8.With("%s holds a lone surrogate escape", itemField(i, field)), i, field)
	}
	return nil
}

// CheckPayload is the payload rule of ValidatePayload for a payload known to
// be one JSON value in valid UTF-8 without a lone surrogate escape (the push
// decoder has checked the whole body): ErrPayloadTooLarge when it is over
// maxBytes bytes, else nil.
func CheckPayload(i int, field string, payload []byte, maxBytes int) *Error {
	if len(payload) > maxBytes {
		return at(ErrPayloadTooLarge.With("%s is %d bytes of JSON; the limit is %d", itemField(i, field), len(payload), maxBytes), i, field)
	}
	return nil
}

// hasLoneSurrogate reports whether the valid JSON b escapes half of a UTF-16
// surrogate pair alone: a low half (\udc00-\udfff) first, or a high half
// (\ud800-\udbff) not followed by a low one.
func hasLoneSurrogate(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if b[i+1] != 'u' {
			i++ // an escaped character
			continue
		}
		switch r := hexUnit(b[i+2:]); {
		case r >= 0xdc00 && r <= 0xdfff:
			return true
		case r >= 0xd800 && r <= 0xdbff:
			if i+11 >= len(b) || b[i+6] != '\\' || b[i+7] != 'u' {
				return true
			}
			if lo := hexUnit(b[i+8:]); lo < 0xdc00 || lo > 0xdfff {
				return true
			}
			i += 11
		default:
			i += 5
		}
	}
	return false
}

// hexUnit is the UTF-16 code unit of the four hex digits b starts with, as
// valid JSON has them after \u.
func hexUnit(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// itemText checks field name of item i (a name, or the transactionId); the
// field path is built only for a refused value.
func itemText(i int, name, v string) *Error {
	if v == "" {
		return nil
	}
	check := func(field string) *Error {
		if e := checkUTF8(v, field); e != nil {
			return e
		}
		if name == "transactionId" {
			return CheckText(v, MaxTransactionIDBytes, field)
		}
		return CheckName(v, field)
	}
	if check("") == nil {
		return nil
	}
	return at(check(itemField(i, name)), i, name)
}

// itemField is the path of field name of item i ("items[i].name"; name when i < 0).
func itemField(i int, name string) string {
	if i < 0 {
		return name
	}
	return fmt.Sprintf("items[%d].%s", i, name)
}

// at names item i's field on e (nothing more when i < 0).
func at(e *Error, i int, name string) *Error {
	if i < 0 {
		return fieldErr(e, name)
	}
	return e.At(i, itemField(i, name))
}

// checkUTF8 refuses s with ErrInvalidUTF8 naming field and the first bad byte.
func checkUTF8(s, field string) *Error {
	if utf8.ValidString(s) {
		return nil
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return fieldErr(ErrInvalidUTF8.With("%s is not valid UTF-8 (byte 0x%02X at byte %d)", field, s[i], i), field)
		}
		i += size
	}
	return fieldErr(ErrInvalidUTF8.With("%s is not valid UTF-8", field), field)
}

func tooLong(s string, max int, field string) *Error {
	return fieldErr(ErrTooLong.With("%s is %d bytes; the limit is %d", field, len(s), max), field)
}

// refusedChar is the ErrControlChar of r at byte i of field.
func refusedChar(r rune, i int, field string) *Error {
	kind := "the control character"
	switch {
	case IsControl(r):
	case r == 0x2028:
		kind = "the line separator"
	case r == 0x2029:
		kind = "the paragraph separator"
	default:
		kind = "the invisible format character"
	}
	return fieldErr(ErrControlChar.With("%s contains %s U+%04X at byte %d", field, kind, r, i), field)
}

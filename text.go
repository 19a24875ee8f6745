package queen

import "unicode/utf8"

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
)

// ValidateName checks a queue or partition name; field is the path named by
// the error. A name is 1 to MaxNameBytes bytes of valid UTF-8 without a C0
// control character (0x00–0x1F) or DEL (0x7F): ErrMissingField, ErrTooLong,
// ErrInvalidUTF8 or ErrControlChar otherwise.
func ValidateName(name, field string) error {
	if name == "" {
		return fieldErr(ErrMissingField.With("%s must not be empty", field), field)
	}
	if !utf8.ValidString(name) {
		return fieldErr(ErrInvalidUTF8.With("%s is not valid UTF-8", field), field)
	}
	if e := CheckText(name, MaxNameBytes, field); e != nil {
		return e
	}
	return nil
}

// CheckText is the item-text rule of SPEC.md §10 for a string known to be
// valid UTF-8 (a name, a transactionId, a consumer group): it refuses s with
// ErrTooLong if it is over max bytes, or ErrControlChar if it holds a C0
// control character (0x00–0x1F) or DEL (0x7F); field is the path the error
// names. Nil when s is accepted.
func CheckText(s string, max int, field string) *Error {
	if len(s) > max {
		return fieldErr(ErrTooLong.With("%s is %d bytes; the limit is %d", field, len(s), max), field)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return fieldErr(ErrControlChar.With("%s contains the control character U+%04X at byte %d", field, c, i), field)
		}
	}
	return nil
}

// ValidateTransactionID checks a transactionId outside a push body by the
// push's rules (SPEC.md §10): valid UTF-8, at most MaxTransactionIDBytes, no
// C0 control character or DEL. field names it in the error.
func ValidateTransactionID(txn, field string) error {
	if !utf8.ValidString(txn) {
		return fieldErr(ErrInvalidUTF8.With("%s is not valid UTF-8", field), field)
	}
	if e := CheckText(txn, MaxTransactionIDBytes, field); e != nil {
		return e
	}
	return nil
}

package wire

// HasLoneSurrogate reports whether the valid JSON b escapes half of a UTF-16
// surrogate pair alone (\ud800 not followed by \udc00-\udfff, or a low half
// first), which the brokers refuse (SPEC.md §10). The shards package checks
// it on its subjects, the shard-aware client before splitting a push.
func HasLoneSurrogate(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+1 >= len(b) || b[i+1] != 'u' {
			i++ // an escaped character
			continue
		}
		r, ok := hex4(b, i+2)
		if !ok {
			return true // not JSON after all: treated as refused, the caller says why
		}
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return true
		case r >= 0xd800 && r <= 0xdbff:
			lo, ok := rune(0), false
			if i+11 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				lo, ok = hex4(b, i+8)
			}
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return true
			}
			i += 11
		default:
			i += 5
		}
	}
	return false
}

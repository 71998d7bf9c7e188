package bus

import "strings"

const hexDigits = "0123456789ABCDEF"

// escapeKey maps any non-empty string to a valid JetStream KV key, one to
// one: bytes in [A-Za-z0-9_-] (and '/', and '.' where the KV allows it,
// when keepSep is set) are kept, every other byte b becomes "=XX" (upper-case
// hex). '=' itself is always escaped, so unescapeKey inverts it.
//
// keepSep is for block keys, which may use '/' and '.' as separators; table
// names (one key token) are escaped with keepSep false.
func escapeKey(s string, keepSep bool) string {
	if isPlainKey(s, keepSep) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if keptByte(s, i, keepSep) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('=')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0x0f])
	}
	return b.String()
}

// isPlainKey reports whether escapeKey would return s unchanged.
func isPlainKey(s string, keepSep bool) bool {
	for i := 0; i < len(s); i++ {
		if !keptByte(s, i, keepSep) {
			return false
		}
	}
	return true
}

// keptByte reports whether escapeKey keeps s[i] as it is.
func keptByte(s string, i int, keepSep bool) bool {
	c := s[i]
	if isTokenRune(rune(c)) { // ASCII only: a byte >= 0x80 is no token rune
		return true
	}
	if !keepSep {
		return false
	}
	switch c {
	case '/':
		return true
	case '.':
		// A KV key must not start or end with '.', nor hold "..".
		return i > 0 && i < len(s)-1 && s[i-1] != '.' && s[i+1] != '.'
	}
	return false
}

// unescapeKey inverts escapeKey; ok is false for a key escapeKey cannot
// have produced.
func unescapeKey(s string) (string, bool) {
	if strings.IndexByte(s, '=') < 0 {
		return s, true
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		hi, lo := unhex(s[i+1]), unhex(s[i+2])
		if hi < 0 || lo < 0 {
			return "", false
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return b.String(), true
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

package tablets

import (
	"bytes"
	"fmt"
	"strings"
)

// Range is the key range [Start, End). A nil or empty bound is open
// (-inf for Start, +inf for End). Ranges are values: methods never modify
// the receiver, but results may share the bounds' backing arrays, so treat
// bounds as immutable.
type Range struct {
	Start, End []byte
}

// Contains reports whether k lies in r.
func (r Range) Contains(k []byte) bool {
	if len(r.Start) > 0 && bytes.Compare(k, r.Start) < 0 {
		return false
	}
	if len(r.End) > 0 && bytes.Compare(k, r.End) >= 0 {
		return false
	}
	return true
}

// Empty reports whether r contains no key because both bounds are set and
// Start >= End. A range with an open bound is never empty.
func (r Range) Empty() bool {
	return len(r.Start) > 0 && len(r.End) > 0 && bytes.Compare(r.Start, r.End) >= 0
}

// Validate returns an error wrapping ErrBadRange when both bounds are set
// and Start > End. Start == End is a valid, empty range.
func (r Range) Validate() error {
	if len(r.Start) > 0 && len(r.End) > 0 && bytes.Compare(r.Start, r.End) > 0 {
		return fmt.Errorf("%w: start %s is after end %s", ErrBadRange, FormatKey(r.Start), FormatKey(r.End))
	}
	return nil
}

// Intersect returns the keys in both r and o. The result may be Empty.
func (r Range) Intersect(o Range) Range {
	out := r
	if len(o.Start) > 0 && (len(out.Start) == 0 || bytes.Compare(o.Start, out.Start) > 0) {
		out.Start = o.Start
	}
	if len(o.End) > 0 && (len(out.End) == 0 || bytes.Compare(o.End, out.End) < 0) {
		out.End = o.End
	}
	return out
}

// After returns the part of r strictly greater than key: the range a scan
// resumes with after it delivered key. Because keys are byte strings, the
// smallest key greater than key is key+"\x00", which becomes the new
// Start when it is greater than r.Start. A nil or empty key returns r.
func (r Range) After(key []byte) Range {
	if len(key) == 0 {
		return r
	}
	if len(r.Start) > 0 && bytes.Compare(key, r.Start) < 0 {
		return r
	}
	next := make([]byte, len(key)+1)
	copy(next, key)
	return Range{Start: next, End: r.End}
}

// String renders r as "[start, end)" with FormatKey, "-inf" / "+inf" for
// open bounds.
func (r Range) String() string {
	s, e := "-inf", "+inf"
	if len(r.Start) > 0 {
		s = FormatKey(r.Start)
	}
	if len(r.End) > 0 {
		e = FormatKey(r.End)
	}
	return "[" + s + ", " + e + ")"
}

// ParseKey parses the command-line form of a key: printable text in which
// a backslash starts an escape, either `\\` (a backslash) or `\xNN` (the
// byte with hex value NN, either case). Raw bytes >= 0x80 (UTF-8 text) are
// taken as they are; raw control bytes (< 0x20, 0x7f) must be escaped. An
// empty key, a bad escape or a raw control byte is an error wrapping
// ErrBadKey. ParseKey(FormatKey(k)) == k for every non-empty k.
func ParseKey(s string) ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("%w: empty key", ErrBadKey)
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 >= len(s) {
				return nil, fmt.Errorf("%w: %q: dangling backslash at offset %d", ErrBadKey, s, i)
			}
			switch s[i+1] {
			case '\\':
				out = append(out, '\\')
				i++
			case 'x':
				if i+3 >= len(s) {
					return nil, fmt.Errorf("%w: %q: \\x at offset %d needs two hex digits", ErrBadKey, s, i)
				}
				hi, ok1 := unhex(s[i+2])
				lo, ok2 := unhex(s[i+3])
				if !ok1 || !ok2 {
					return nil, fmt.Errorf("%w: %q: \\x at offset %d needs two hex digits", ErrBadKey, s, i)
				}
				out = append(out, hi<<4|lo)
				i += 3
			default:
				return nil, fmt.Errorf("%w: %q: unknown escape \\%c at offset %d (use \\\\ or \\xNN)", ErrBadKey, s, s[i+1], i)
			}
		case c < 0x20 || c == 0x7f:
			return nil, fmt.Errorf("%w: %q: control byte 0x%02x at offset %d must be escaped as \\x%02x", ErrBadKey, s, c, i, c)
		default:
			out = append(out, c)
		}
	}
	return out, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// FormatKey renders k in the form ParseKey reads: printable ASCII as is,
// a backslash as `\\`, every other byte as `\xNN` (lower-case hex). The
// result is pure ASCII.
func FormatKey(k []byte) string {
	var b strings.Builder
	b.Grow(len(k))
	const hexdigits = "0123456789abcdef"
	for _, c := range k {
		switch {
		case c == '\\':
			b.WriteString(`\\`)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			b.WriteString(`\x`)
			b.WriteByte(hexdigits[c>>4])
			b.WriteByte(hexdigits[c&0xf])
		}
	}
	return b.String()
}

// ParseRange parses the command-line form of a range: each bound with
// ParseKey, "" meaning open, then Validate.
func ParseRange(start, end string) (Range, error) {
	var r Range
	var err error
	if start != "" {
		if r.Start, err = ParseKey(start); err != nil {
			return Range{}, fmt.Errorf("range start: %w", err)
		}
	}
	if end != "" {
		if r.End, err = ParseKey(end); err != nil {
			return Range{}, fmt.Errorf("range end: %w", err)
		}
	}
	if err := r.Validate(); err != nil {
		return Range{}, err
	}
	return r, nil
}

// MaxTableNameLen is the longest table name ValidateTableName accepts.
const MaxTableNameLen = 64

// ValidateTableName accepts ^[A-Za-z0-9_-]{1,64}$ and returns an error
// wrapping ErrBadName that names the problem otherwise.
func ValidateTableName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty table name", ErrBadName)
	}
	if len(name) > MaxTableNameLen {
		return fmt.Errorf("%w: table name %.20q... is %d bytes, at most %d allowed", ErrBadName, name, len(name), MaxTableNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isAlnum(c) && c != '_' && c != '-' {
			return fmt.Errorf("%w: table name %q: character %q at offset %d not allowed (only A-Z a-z 0-9 _ -)", ErrBadName, name, c, i)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
}

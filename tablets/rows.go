package tablets

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// RowValueLen is the length of every value GenerateRows makes.
const RowValueLen = 64

const rowAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// RowKey is the key of generated row i: fmt.Sprintf("row%09d", i).
func RowKey(i int) []byte {
	return appendRowKey(make([]byte, 0, 12), i)
}

// appendRowKey appends RowKey(i) to dst without fmt's allocations.
func appendRowKey(dst []byte, i int) []byte {
	if i < 0 {
		return fmt.Appendf(dst, "row%09d", i)
	}
	dst = append(dst, "row"...)
	var digits [20]byte
	d := strconv.AppendUint(digits[:0], uint64(i), 10)
	for range 9 - len(d) {
		dst = append(dst, '0')
	}
	return append(dst, d...)
}

// RowValue is the value of generated row i: RowValueLen bytes of
// [A-Za-z0-9], a pure function of i. Byte j is rowAlphabet[b % 62], where b
// is byte j%8 (little-endian) of the (j/8+1)-th output of a splitmix64
// generator seeded with uint64(i). No global randomness is involved.
func RowValue(i int) []byte {
	v := make([]byte, RowValueLen)
	fillRowValue(v, i)
	return v
}

// fillRowValue writes RowValue(i) into v, which is RowValueLen long.
func fillRowValue(v []byte, i int) {
	state := uint64(i)
	var z uint64
	for j := range v {
		if j%8 == 0 {
			state += 0x9e3779b97f4a7c15
			z = state
			z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
			z = (z ^ (z >> 27)) * 0x94d049bb133111eb
			z ^= z >> 31
		}
		v[j] = rowAlphabet[byte(z>>(8*(j%8)))%byte(len(rowAlphabet))]
	}
}

// GenerateRows returns n deterministic rows in key order: row i has key
// RowKey(i) ("row%09d", so keys sort numerically for i < 10^9) and value
// RowValue(i) (64 printable bytes derived from i by a hash). Tests and
// load tests regenerate ground truth with it, or with RowKey/RowValue.
func GenerateRows(n int) []Entry {
	out := make([]Entry, max(n, 0))
	for i := range out {
		out[i] = Entry{Key: RowKey(i), Value: RowValue(i)}
	}
	return out
}

// ReadTSV reads rows as "key<TAB>value" lines. The key is the raw bytes
// before the first tab (no escaping) and must be non-empty; the value is
// everything after it (it may be empty and may contain tabs). A trailing
// '\r' is stripped from each line; a final line needs no newline. An empty
// line, a line without a tab, an empty key, a key or value over the limits,
// and a duplicate key are errors wrapping ErrBadInput that name the line
// number(s) (1-based; for a duplicate, both lines). Rows are returned in
// input order; every row owns its bytes.
func ReadTSV(r io.Reader) ([]Entry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxKeyLen+MaxValueLen+3)
	var out []Entry
	lines := make(map[string]int)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Bytes()
		if len(text) == 0 {
			return nil, fmt.Errorf("%w: line %d is empty", ErrBadInput, line)
		}
		tab := bytes.IndexByte(text, '\t')
		switch {
		case tab < 0:
			return nil, fmt.Errorf("%w: line %d has no tab (want key<TAB>value)", ErrBadInput, line)
		case tab == 0:
			return nil, fmt.Errorf("%w: line %d has an empty key", ErrBadInput, line)
		case tab > MaxKeyLen:
			return nil, fmt.Errorf("%w: line %d: key is %d bytes, at most %d allowed", ErrBadInput, line, tab, MaxKeyLen)
		case len(text)-tab-1 > MaxValueLen:
			return nil, fmt.Errorf("%w: line %d: value is %d bytes, at most %d allowed", ErrBadInput, line, len(text)-tab-1, MaxValueLen)
		}
		own := bytes.Clone(text)
		key := own[:tab:tab]
		if prev, dup := lines[string(key)]; dup {
			return nil, fmt.Errorf("%w: line %d repeats key %s of line %d", ErrBadInput, line, FormatKey(key), prev)
		}
		lines[string(key)] = line
		out = append(out, Entry{Key: key, Value: own[tab+1:]})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%w: line %d is longer than %d bytes", ErrBadInput, line+1, MaxKeyLen+MaxValueLen+1)
		}
		return nil, fmt.Errorf("tablets: reading TSV after line %s: %w", strconv.Itoa(line), err)
	}
	return out, nil
}

// GeneratedRows is a RowSource of the rows GenerateRows(n) returns, made
// one at a time (Line is the row number + 1) in buffers of its own that
// the next call overwrites.
type GeneratedRows struct {
	N   int
	i   int
	key []byte
	val [RowValueLen]byte
}

// Next implements RowSource.
func (g *GeneratedRows) Next() (Row, error) {
	if g.i >= g.N {
		return Row{}, io.EOF
	}
	g.key = appendRowKey(g.key[:0], g.i)
	fillRowValue(g.val[:], g.i)
	g.i++
	return Row{Key: g.key, Value: g.val[:], Line: int64(g.i)}, nil
}

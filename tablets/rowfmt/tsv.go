package rowfmt

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/scanplane/scanplane/tablets"
)

// TSVReader reads "key<TAB>value" lines. The key ends at the first tab;
// the value is the rest of the line. In both, a backslash starts an
// escape: \t (tab), \n (newline), \r (carriage return), \\ (backslash)
// or \xNN (the byte with hex value NN); any other backslash is an error.
// A trailing '\r' is stripped from each line; a final line needs no
// newline. An empty line, a line without a tab and an empty key are
// errors wrapping tablets.ErrBadInput that name the line.
type TSVReader struct {
	r          *bufio.Reader
	line       int64
	long       []byte // a line longer than the reader's buffer
	key, value []byte // unescaped copies, reused
}

// NewTSVReader returns a TSVReader of r.
func NewTSVReader(r io.Reader) *TSVReader {
	return &TSVReader{r: bufio.NewReaderSize(r, 256<<10)}
}

// Next implements tablets.RowSource.
func (t *TSVReader) Next() (tablets.Row, error) {
	text, err := t.readLine()
	if err != nil {
		return tablets.Row{}, err
	}
	t.line++
	if len(text) == 0 {
		return tablets.Row{}, badRow(t.line, "empty line")
	}
	tab := bytes.IndexByte(text, '\t')
	switch {
	case tab < 0:
		return tablets.Row{}, badRow(t.line, "no tab (want key<TAB>value)")
	case tab == 0:
		return tablets.Row{}, badRow(t.line, "empty key")
	}
	if t.key, err = unescape(t.key[:0], text[:tab]); err != nil {
		return tablets.Row{}, badRow(t.line, "key: %v", err)
	}
	if t.value, err = unescape(t.value[:0], text[tab+1:]); err != nil {
		return tablets.Row{}, badRow(t.line, "value: %v", err)
	}
	return tablets.Row{Key: t.key, Value: t.value, Line: t.line}, nil
}

// readLine returns the next line without its "\n" or "\r\n".
func (t *TSVReader) readLine() ([]byte, error) {
	text, err := t.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		t.long = append(t.long[:0], text...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(t.long) > maxLine {
				return nil, badRow(t.line+1, "longer than %d bytes", maxLine)
			}
			text, err = t.r.ReadSlice('\n')
			t.long = append(t.long, text...)
		}
		text = t.long
	}
	if errors.Is(err, io.EOF) && len(text) > 0 {
		err = nil
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("rowfmt: reading line %d: %w", t.line+1, err)
	}
	text = bytes.TrimSuffix(text, []byte{'\n'})
	return bytes.TrimSuffix(text, []byte{'\r'}), nil
}

// unescape appends s with its escapes decoded to dst.
func unescape(dst, s []byte) ([]byte, error) {
	if bytes.IndexByte(s, '\\') < 0 {
		return append(dst, s...), nil
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		if i+1 == len(s) {
			return nil, fmt.Errorf("backslash at the end (escape it as \\\\)")
		}
		i++
		switch s[i] {
		case 't':
			dst = append(dst, '\t')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case '\\':
			dst = append(dst, '\\')
		case 'x':
			if i+2 >= len(s) {
				return nil, fmt.Errorf("\\x at byte %d needs two hex digits", i-1)
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("\\x%s at byte %d: want two hex digits", s[i+1:i+3], i-1)
			}
			dst = append(dst, hi<<4|lo)
			i += 2
		default:
			return nil, fmt.Errorf("unknown escape \\%c at byte %d (want \\t \\n \\r \\\\ or \\xNN)", s[i], i-1)
		}
	}
	return dst, nil
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

// TSVWriter writes "key<TAB>value" lines that TSVReader reads back to the
// same bytes: tab, newline, carriage return and backslash are written as
// \t, \n, \r and \\, other control bytes (below 0x20, and 0x7f) as \xNN,
// everything else as it is.
type TSVWriter struct {
	w   *bufio.Writer
	buf []byte
}

// NewTSVWriter returns a TSVWriter to w.
func NewTSVWriter(w io.Writer) *TSVWriter {
	return &TSVWriter{w: bufio.NewWriterSize(w, 64<<10)}
}

// Write implements Writer.
func (t *TSVWriter) Write(key, value []byte) error {
	t.buf = escape(t.buf[:0], key)
	t.buf = append(t.buf, '\t')
	t.buf = escape(t.buf, value)
	t.buf = append(t.buf, '\n')
	_, err := t.w.Write(t.buf)
	return err
}

// Close implements Writer.
func (t *TSVWriter) Close() error { return t.w.Flush() }

func escape(dst, s []byte) []byte {
	const hexdigits = "0123456789abcdef"
	for _, c := range s {
		switch {
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\\':
			dst = append(dst, '\\', '\\')
		case c < 0x20 || c == 0x7f:
			dst = append(dst, '\\', 'x', hexdigits[c>>4], hexdigits[c&15])
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

package rowfmt

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/scanplane/scanplane/tablets"
)

// jsonlReader reads one JSON object a line: "key" or "key_b64" (standard
// base64) and "value" or "value_b64". A line must be valid UTF-8 (JSON
// strings hold text: bytes that are not UTF-8 go in the _b64 fields);
// other fields are errors.
type jsonlReader struct {
	t   *TSVReader // for its line reading
	obj struct {
		Key      *string `json:"key"`
		Value    *string `json:"value"`
		KeyB64   *string `json:"key_b64"`
		ValueB64 *string `json:"value_b64"`
	}
	key, value []byte
}

func newJSONLReader(r io.Reader) *jsonlReader { return &jsonlReader{t: NewTSVReader(r)} }

func (j *jsonlReader) Next() (tablets.Row, error) {
	text, err := j.t.readLine()
	if err != nil {
		return tablets.Row{}, err
	}
	j.t.line++
	line := j.t.line
	if !utf8.Valid(text) {
		return tablets.Row{}, badRow(line, "not valid UTF-8 (put bytes that are not text in key_b64 and value_b64, base64)")
	}
	j.obj.Key, j.obj.Value, j.obj.KeyB64, j.obj.ValueB64 = nil, nil, nil, nil
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j.obj); err != nil {
		return tablets.Row{}, badRow(line, "%v", err)
	}
	if dec.More() {
		return tablets.Row{}, badRow(line, "more than one JSON value")
	}
	if j.key, err = field(j.key[:0], j.obj.Key, j.obj.KeyB64, "key"); err != nil {
		return tablets.Row{}, badRow(line, "%v", err)
	}
	if j.value, err = field(j.value[:0], j.obj.Value, j.obj.ValueB64, "value"); err != nil {
		return tablets.Row{}, badRow(line, "%v", err)
	}
	return tablets.Row{Key: j.key, Value: j.value, Line: line}, nil
}

func field(dst []byte, text, b64 *string, name string) ([]byte, error) {
	switch {
	case text != nil && b64 != nil:
		return nil, fmt.Errorf("both %q and %q", name, name+"_b64")
	case text != nil:
		return append(dst, *text...), nil
	case b64 != nil:
		out, err := base64.StdEncoding.AppendDecode(dst, []byte(*b64))
		if err != nil {
			return nil, fmt.Errorf("%s_b64: %v", name, err)
		}
		return out, nil
	}
	return nil, errors.New("no " + name + " (want " + name + " or " + name + "_b64)")
}

// jsonlWriter writes {"key": ..., "value": ...}, with key_b64 or
// value_b64 (standard base64) for bytes that are not valid UTF-8.
type jsonlWriter struct {
	w   *bufio.Writer
	buf bytes.Buffer
	enc *json.Encoder
}

func newJSONLWriter(w io.Writer) *jsonlWriter {
	j := &jsonlWriter{w: bufio.NewWriterSize(w, 64<<10)}
	j.enc = json.NewEncoder(&j.buf)
	j.enc.SetEscapeHTML(false)
	return j
}

func (j *jsonlWriter) Write(key, value []byte) error {
	j.buf.Reset()
	j.buf.WriteByte('{')
	if err := j.field("key", key); err != nil {
		return err
	}
	j.buf.WriteByte(',')
	if err := j.field("value", value); err != nil {
		return err
	}
	j.buf.WriteString("}\n")
	_, err := j.w.Write(j.buf.Bytes())
	return err
}

func (j *jsonlWriter) field(name string, b []byte) error {
	if utf8.Valid(b) {
		j.buf.WriteString(`"` + name + `":`)
		if err := j.enc.Encode(string(b)); err != nil {
			return err
		}
		j.buf.Truncate(j.buf.Len() - 1) // Encode's newline
		return nil
	}
	j.buf.WriteString(`"` + name + `_b64":"`)
	j.buf.WriteString(base64.StdEncoding.EncodeToString(b))
	j.buf.WriteByte('"')
	return nil
}

func (j *jsonlWriter) Close() error { return j.w.Flush() }

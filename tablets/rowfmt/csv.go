package rowfmt

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/scanplane/scanplane/tablets"
)

// csvReader reads RFC 4180 records (encoding/csv): a quoted field may
// hold commas, quotes (doubled) and newlines; encoding/csv reads a
// "\r\n" inside a quoted field as "\n".
type csvReader struct {
	r          *csv.Reader
	cfg        Config
	started    bool
	kc, vc     int // column indexes
	width      int // fields a record must have; 0 = at least 2
	key, value []byte
}

func newCSVReader(r io.Reader, cfg Config) *csvReader {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	return &csvReader{r: cr, cfg: cfg, kc: 0, vc: 1, width: 2}
}

func (c *csvReader) Next() (tablets.Row, error) {
	rec, err := c.read()
	if err != nil {
		return tablets.Row{}, err
	}
	if !c.started {
		c.started = true
		if c.cfg.KeyColumn != "" || c.cfg.ValueColumn != "" {
			kn, vn := c.cfg.columns()
			c.kc, c.vc = slices.Index(rec, kn), slices.Index(rec, vn)
			switch {
			case c.kc < 0:
				return tablets.Row{}, fmt.Errorf("%w: key column %q is not in the header %q", tablets.ErrBadInput, kn, rec)
			case c.vc < 0:
				return tablets.Row{}, fmt.Errorf("%w: value column %q is not in the header %q", tablets.ErrBadInput, vn, rec)
			}
			c.width = len(rec)
			return c.Next()
		}
		if len(rec) == 2 && rec[0] == "key" && rec[1] == "value" {
			return c.Next()
		}
	}
	line, _ := c.r.FieldPos(0)
	if len(rec) != c.width {
		return tablets.Row{}, badRow(int64(line), "%d fields, want %d (name the key and value columns of wider records with a header and KeyColumn, ValueColumn)", len(rec), c.width)
	}
	c.key = append(c.key[:0], rec[c.kc]...)
	c.value = append(c.value[:0], rec[c.vc]...)
	return tablets.Row{Key: c.key, Value: c.value, Line: int64(line)}, nil
}

func (c *csvReader) read() ([]string, error) {
	rec, err := c.r.Read()
	if errors.Is(err, io.EOF) {
		return nil, io.EOF
	}
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("%w: line %d: %v", tablets.ErrBadInput, pe.StartLine, pe.Err)
	}
	if err != nil {
		return nil, fmt.Errorf("rowfmt: reading CSV: %w", err)
	}
	return rec, nil
}

// csvWriter writes a key,value header and then one record a row.
type csvWriter struct {
	w      *csv.Writer
	header bool
	rec    [2]string
	names  [2]string
}

func newCSVWriter(w io.Writer, cfg Config) *csvWriter {
	k, v := cfg.columns()
	return &csvWriter{w: csv.NewWriter(w), names: [2]string{k, v}}
}

func (c *csvWriter) Write(key, value []byte) error {
	if !c.header {
		c.header = true
		if err := c.w.Write(c.names[:]); err != nil {
			return err
		}
	}
	c.rec[0], c.rec[1] = string(key), string(value)
	return c.w.Write(c.rec[:])
}

func (c *csvWriter) Close() error {
	if !c.header {
		c.header = true
		if err := c.w.Write(c.names[:]); err != nil {
			return err
		}
	}
	c.w.Flush()
	return c.w.Error()
}

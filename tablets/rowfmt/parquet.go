package rowfmt

import (
	"fmt"
	"io"
	"os"

	"github.com/parquet-go/parquet-go"

	"github.com/scanplane/scanplane/tablets"
)

// parquetReader reads the key and value columns of a Parquet file, row
// group by row group. Line is the row's 1-based number in the file.
type parquetReader struct {
	groups     []parquet.RowGroup
	g          int
	rows       parquet.Rows
	buf        []parquet.Row
	n, i       int
	kc, vc     int
	kn, vn     string
	line       int64
	key, value []byte
}

func newParquetReader(r io.Reader, cfg Config) (*parquetReader, error) {
	ra, ok := r.(io.ReaderAt)
	if !ok {
		return nil, fmt.Errorf("%w: parquet needs a file it can seek in, not a stream", ErrBadFormat)
	}
	var size int64
	switch s := r.(type) {
	case interface{ Size() int64 }:
		size = s.Size()
	case interface{ Stat() (os.FileInfo, error) }:
		fi, err := s.Stat()
		if err != nil {
			return nil, fmt.Errorf("rowfmt: parquet: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%w: parquet needs a regular file, not %s", ErrBadFormat, fi.Mode().Type())
		}
		size = fi.Size()
	default:
		return nil, fmt.Errorf("%w: parquet needs a file of known size", ErrBadFormat)
	}
	f, err := parquet.OpenFile(ra, size)
	if err != nil {
		return nil, fmt.Errorf("%w: parquet: %v", tablets.ErrBadInput, err)
	}
	p := &parquetReader{groups: f.RowGroups(), buf: make([]parquet.Row, 256)}
	p.kn, p.vn = cfg.columns()
	for _, c := range []struct {
		name string
		idx  *int
	}{{p.kn, &p.kc}, {p.vn, &p.vc}} {
		leaf, ok := f.Schema().Lookup(c.name)
		if !ok {
			return nil, fmt.Errorf("%w: parquet file has no column %q (its columns: %v)", tablets.ErrBadInput, c.name, columnNames(f.Schema()))
		}
		if k := leaf.Node.Type().Kind(); k != parquet.ByteArray {
			return nil, fmt.Errorf("%w: parquet column %q is %v, want a byte array or string", tablets.ErrBadInput, c.name, k)
		}
		*c.idx = leaf.ColumnIndex
	}
	return p, nil
}

func columnNames(s *parquet.Schema) []string {
	var out []string
	for _, path := range s.Columns() {
		out = append(out, fmt.Sprint(path))
	}
	return out
}

func (p *parquetReader) Next() (tablets.Row, error) {
	for p.i >= p.n {
		if p.rows == nil {
			if p.g >= len(p.groups) {
				return tablets.Row{}, io.EOF
			}
			p.rows = p.groups[p.g].Rows()
			p.g++
		}
		n, err := p.rows.ReadRows(p.buf)
		p.n, p.i = n, 0
		if err == io.EOF {
			_ = p.rows.Close()
			p.rows = nil
		} else if err != nil {
			return tablets.Row{}, fmt.Errorf("%w: parquet row %d: %v", tablets.ErrBadInput, p.line+1, err)
		}
	}
	row := p.buf[p.i]
	p.i++
	p.line++
	var gotK, gotV bool
	for _, v := range row {
		switch v.Column() {
		case p.kc:
			if v.IsNull() {
				return tablets.Row{}, fmt.Errorf("%w: parquet row %d: key column %q is null", tablets.ErrBadInput, p.line, p.kn)
			}
			p.key, gotK = append(p.key[:0], v.ByteArray()...), true
		case p.vc:
			if v.IsNull() {
				return tablets.Row{}, fmt.Errorf("%w: parquet row %d: value column %q is null", tablets.ErrBadInput, p.line, p.vn)
			}
			p.value, gotV = append(p.value[:0], v.ByteArray()...), true
		}
	}
	if !gotK || !gotV {
		return tablets.Row{}, fmt.Errorf("%w: parquet row %d has no key or no value", tablets.ErrBadInput, p.line)
	}
	return tablets.Row{Key: p.key, Value: p.value, Line: p.line}, nil
}

// parquetRow is the schema scans are written in: binary key and value
// columns, named by Config (default key and value).
type parquetRow struct {
	Key   []byte `parquet:"key"`
	Value []byte `parquet:"value"`
}

// parquetGroupBytes is how many key and value bytes a row group holds
// before it is flushed, which bounds the writer's memory.
const parquetGroupBytes = 32 << 20

type parquetWriter struct {
	w      *parquet.Writer
	kc, vc int // column indexes: a Group's columns are in name order
	row    parquet.Row
	bytes  int
}

func newParquetWriter(w io.Writer, cfg Config) *parquetWriter {
	kn, vn := cfg.columns()
	schema := parquet.NewSchema("row", parquet.Group{
		kn: parquet.Leaf(parquet.ByteArrayType),
		vn: parquet.Leaf(parquet.ByteArrayType),
	})
	p := &parquetWriter{w: parquet.NewWriter(w, schema), kc: 0, vc: 1}
	if vn < kn {
		p.kc, p.vc = 1, 0
	}
	return p
}

func (p *parquetWriter) Write(key, value []byte) error {
	p.row = append(p.row[:0], parquet.Value{}, parquet.Value{})
	p.row[p.kc] = parquet.ByteArrayValue(key).Level(0, 0, p.kc)
	p.row[p.vc] = parquet.ByteArrayValue(value).Level(0, 0, p.vc)
	if _, err := p.w.WriteRows([]parquet.Row{p.row}); err != nil {
		return err
	}
	p.bytes += len(key) + len(value)
	if p.bytes >= parquetGroupBytes {
		p.bytes = 0
		return p.w.Flush()
	}
	return nil
}

func (p *parquetWriter) Close() error { return p.w.Close() }

// Package rowfmt reads and writes table rows in the formats data comes
// in: TSV with escapes, CSV (RFC 4180), JSON Lines and Parquet. Readers
// are tablets.RowSources for tablets.IngestRows; writers print scanned
// rows in the same formats, so a table round-trips.
//
// The client library does not import this package (Parquet would weigh
// on every client); scanctl does.
package rowfmt

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/scanplane/scanplane/tablets"
)

// Format names a row format.
type Format string

// The formats.
const (
	// TSV: key<TAB>value lines; see ReadTSV for the escapes.
	TSV Format = "tsv"
	// CSV: RFC 4180 records, key then value, with a key,value header.
	CSV Format = "csv"
	// JSONL: one JSON object a line, {"key": ..., "value": ...} or
	// {"key_b64": ..., "value_b64": ...}.
	JSONL Format = "jsonl"
	// Parquet: a Parquet file with byte-array or string key and value
	// columns.
	Parquet Format = "parquet"
)

// Formats lists every format.
var Formats = []Format{TSV, CSV, JSONL, Parquet}

// ErrBadFormat: an unknown format name or an option the format does not
// take. Bad rows are errors wrapping tablets.ErrBadInput.
var ErrBadFormat = errors.New("rowfmt: bad format")

// Parse returns the format called name (tsv, csv, jsonl or parquet).
func Parse(name string) (Format, error) {
	for _, f := range Formats {
		if string(f) == name {
			return f, nil
		}
	}
	return "", fmt.Errorf("%w: %q (want tsv, csv, jsonl or parquet)", ErrBadFormat, name)
}

// ForPath is the format of a file by its extension: .csv, .jsonl or
// .ndjson, .parquet; anything else (and "-", standard input) is TSV.
func ForPath(path string) Format {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".csv":
		return CSV
	case ".jsonl", ".ndjson":
		return JSONL
	case ".parquet":
		return Parquet
	}
	return TSV
}

// Config configures a reader or writer.
type Config struct {
	// Format is the format; required.
	Format Format
	// KeyColumn and ValueColumn name the key and value columns of CSV
	// (whose first record is then a header naming the columns) and of
	// Parquet. Default: for CSV the first and second column, a first
	// record "key,value" being skipped as a header; for Parquet "key"
	// and "value". Setting one makes the other default to "key" or
	// "value". Only CSV and Parquet take them.
	KeyColumn, ValueColumn string
}

// Validate checks the configuration; errors wrap ErrBadFormat.
func (c Config) Validate() error {
	if _, err := Parse(string(c.Format)); err != nil {
		return err
	}
	if (c.KeyColumn != "" || c.ValueColumn != "") && c.Format != CSV && c.Format != Parquet {
		return fmt.Errorf("%w: %s has no named columns (key and value columns are for csv and parquet)", ErrBadFormat, c.Format)
	}
	if k, v := c.columns(); k == v {
		return fmt.Errorf("%w: key and value column are both %q", ErrBadFormat, k)
	}
	return nil
}

func (c Config) columns() (key, value string) {
	key, value = c.KeyColumn, c.ValueColumn
	if key == "" {
		key = "key"
	}
	if value == "" {
		value = "value"
	}
	return key, value
}

// NewReader returns a reader of the rows of r. Parquet needs random
// access: r must be an io.ReaderAt with a Size or Stat method (an
// *os.File of a regular file, a *bytes.Reader).
func NewReader(r io.Reader, cfg Config) (tablets.RowSource, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch cfg.Format {
	case CSV:
		return newCSVReader(r, cfg), nil
	case JSONL:
		return newJSONLReader(r), nil
	case Parquet:
		return newParquetReader(r, cfg)
	}
	return NewTSVReader(r), nil
}

// Writer writes rows in a format.
type Writer interface {
	// Write writes one row.
	Write(key, value []byte) error
	// Close writes what is buffered (and a Parquet file's footer); it
	// does not close the underlying writer.
	Close() error
}

// NewWriter returns a writer of rows to w.
func NewWriter(w io.Writer, cfg Config) (Writer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch cfg.Format {
	case CSV:
		return newCSVWriter(w, cfg), nil
	case JSONL:
		return newJSONLWriter(w), nil
	case Parquet:
		return newParquetWriter(w, cfg), nil
	}
	return NewTSVWriter(w), nil
}

// maxLine is the longest line the line-based readers take: a maximal
// key and value with every byte escaped as \xNN.
const maxLine = 4*(tablets.MaxKeyLen+tablets.MaxValueLen) + 64

func badRow(line int64, format string, args ...any) error {
	return fmt.Errorf("%w: line %d: %s", tablets.ErrBadInput, line, fmt.Sprintf(format, args...))
}

package tablets

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/scanplane/scanplane/messages"
)

// Row is one input row of IngestRows.
type Row struct {
	Key, Value []byte
	// Line is where the row starts in its input (1-based line or record
	// number); errors about the row name it. 0 means unknown: errors then
	// name the row's 1-based position ("row N").
	Line int64
}

// RowSource yields the rows of IngestRows, in any order.
type RowSource interface {
	// Next returns the next row, or an error wrapping io.EOF after the
	// last. The row's slices need to stay valid only until the next call.
	Next() (Row, error)
}

// maxFanIn is the most runs merged at once; more runs are first merged
// in groups into longer runs.
const maxFanIn = 128

// IngestRows is Ingest over a stream of rows in any order, in bounded
// memory: it reads src to its end, holding at most cfg.SortBuffer of rows
// in memory (keys, values and RowOverhead per row). Input that fits is
// sorted in memory; larger input is sorted in runs of that size spilled
// to a directory of its own under cfg.TempDir (removed before
// IngestRows returns), which are then merged while the tablets are
// written. Nothing is written to store before src is read to its end, so
// bad input leaves the table as it was.
//
// An empty key, a key or value over the limits, and a duplicate key are
// errors wrapping ErrBadInput that name the row's line (Row.Line; both
// lines for a duplicate); an error of src is returned wrapped. The rest
// is as Ingest: split points, generations, publishing and cleanup.
func IngestRows(ctx context.Context, store BlockStore, meta MetaStore, table string, src RowSource, cfg IngestConfig) (*messages.TableMeta, error) {
	if err := ValidateTableName(table); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &sorter{limit: cfg.SortBuffer, tempDir: cfg.TempDir, bufSorted: true}
	defer s.close()
	cfg.Progress("read", 0, -1)
	for {
		if s.n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("tablets: ingest %s: %w", table, err)
			}
			cfg.Progress("read", s.n, -1)
		}
		r, err := src.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("tablets: ingest %s: reading row %d: %w", table, s.n+1, err)
		}
		if err := s.add(r); err != nil {
			return nil, fmt.Errorf("tablets: ingest %s: %w", table, err)
		}
	}
	cfg.Progress("read", s.n, -1)
	rows, err := s.finish()
	if err != nil {
		return nil, fmt.Errorf("tablets: ingest %s: %w", table, err)
	}
	return ingestSorted(ctx, store, meta, table, rows, cfg)
}

// rowRef is a row in the sort buffer: its key at arena[off:off+klen], its
// value right after.
type rowRef struct {
	off        int
	klen, vlen int32
	line       int64
}

// sorter is the external merge sort of IngestRows.
type sorter struct {
	limit     int64
	tempDir   string
	dir       string // the run directory, made at the first spill
	arena     []byte
	refs      []rowRef
	bufSorted bool  // the buffer's rows are in strictly increasing order
	n         int64 // rows added
	runs      []string
	made      int        // run files made, to name the next
	open      []*os.File // run files a merge reads
}

// where names a row for errors.
func where(line int64) string {
	if line < 0 {
		return "row " + strconv.FormatInt(-line, 10)
	}
	return "line " + strconv.FormatInt(line, 10)
}

func (s *sorter) key(r rowRef) []byte { return s.arena[r.off : r.off+int(r.klen)] }

func (s *sorter) add(r Row) error {
	s.n++
	line := r.Line
	if line <= 0 {
		line = -s.n // where() names it "row n"
	}
	switch {
	case len(r.Key) == 0:
		return fmt.Errorf("%w: %s has an empty key", ErrBadInput, where(line))
	case len(r.Key) > MaxKeyLen:
		return fmt.Errorf("%w: %s: key is %d bytes, at most %d allowed", ErrBadInput, where(line), len(r.Key), MaxKeyLen)
	case len(r.Value) > MaxValueLen:
		return fmt.Errorf("%w: %s (key %s): value is %d bytes, at most %d allowed", ErrBadInput, where(line), FormatKey(r.Key), len(r.Value), MaxValueLen)
	}
	need := int64(len(r.Key) + len(r.Value) + RowOverhead)
	if len(s.refs) > 0 && int64(len(s.arena))+int64(len(s.refs))*RowOverhead+need > s.limit {
		if err := s.spill(); err != nil {
			return err
		}
	}
	if n := len(s.refs); n > 0 && s.bufSorted {
		switch c := bytes.Compare(r.Key, s.key(s.refs[n-1])); {
		case c == 0:
			return duplicate(r.Key, s.refs[n-1].line, line)
		case c < 0:
			s.bufSorted = false
		}
	}
	ref := rowRef{off: len(s.arena), klen: int32(len(r.Key)), vlen: int32(len(r.Value)), line: line}
	s.arena = append(append(s.arena, r.Key...), r.Value...)
	s.refs = append(s.refs, ref)
	return nil
}

func duplicate(key []byte, a, b int64) error {
	first, second := a, b
	if abs(second) < abs(first) {
		first, second = second, first
	}
	return fmt.Errorf("%w: %s repeats key %s of %s", ErrBadInput, where(second), FormatKey(key), where(first))
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// sortBuffer sorts the buffer and checks it for duplicate keys.
func (s *sorter) sortBuffer() error {
	if !s.bufSorted {
		slices.SortFunc(s.refs, func(a, b rowRef) int { return bytes.Compare(s.key(a), s.key(b)) })
		for i := 1; i < len(s.refs); i++ {
			if bytes.Equal(s.key(s.refs[i-1]), s.key(s.refs[i])) {
				return duplicate(s.key(s.refs[i]), s.refs[i-1].line, s.refs[i].line)
			}
		}
	}
	return nil
}

// spill sorts the buffer and writes it as a run.
func (s *sorter) spill() error {
	if err := s.sortBuffer(); err != nil {
		return err
	}
	w, err := s.newRun()
	if err != nil {
		return err
	}
	for _, r := range s.refs {
		w.write(r.line, s.key(r), s.arena[r.off+int(r.klen):r.off+int(r.klen)+int(r.vlen)])
	}
	if err := w.close(); err != nil {
		return err
	}
	s.arena, s.refs, s.bufSorted = s.arena[:0], s.refs[:0], true
	return nil
}

// runWriter writes a run file: per row uvarint zigzag line | uvarint
// key length | uvarint value length | key | value.
type runWriter struct {
	f   *os.File
	w   *bufio.Writer
	tmp []byte
}

func (s *sorter) newRun() (*runWriter, error) {
	if s.dir == "" {
		dir, err := os.MkdirTemp(s.tempDir, "scanplane-ingest-")
		if err != nil {
			return nil, fmt.Errorf("sort runs: %w", err)
		}
		s.dir = dir
	}
	f, err := os.Create(filepath.Join(s.dir, "run"+strconv.Itoa(s.made)))
	s.made++
	if err != nil {
		return nil, fmt.Errorf("sort runs: %w", err)
	}
	s.runs = append(s.runs, f.Name())
	return &runWriter{f: f, w: bufio.NewWriterSize(f, 256<<10)}, nil
}

func (w *runWriter) write(line int64, key, value []byte) {
	w.tmp = binary.AppendVarint(w.tmp[:0], line)
	w.tmp = binary.AppendUvarint(w.tmp, uint64(len(key)))
	w.tmp = binary.AppendUvarint(w.tmp, uint64(len(value)))
	_, _ = w.w.Write(w.tmp)
	_, _ = w.w.Write(key)
	_, _ = w.w.Write(value) // a failed write shows in Flush
}

func (w *runWriter) close() error {
	err := w.w.Flush()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sort runs: %w", err)
	}
	return nil
}

// finish returns the rows in key order.
func (s *sorter) finish() (sortedRows, error) {
	if len(s.runs) == 0 {
		if err := s.sortBuffer(); err != nil {
			return nil, err
		}
		return &memRows{s: s}, nil
	}
	if len(s.refs) > 0 {
		if err := s.spill(); err != nil {
			return nil, err
		}
	}
	s.arena, s.refs = nil, nil
	for len(s.runs) > maxFanIn {
		m, err := s.merge(s.runs[:maxFanIn])
		if err != nil {
			return nil, err
		}
		w, err := s.newRun()
		if err != nil {
			return nil, err
		}
		for {
			e, line, err := m.next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, err
			}
			w.write(line, e.Key, e.Value)
		}
		if err := w.close(); err != nil {
			return nil, err
		}
		for _, name := range s.runs[:maxFanIn] {
			_ = os.Remove(name)
		}
		s.closeOpen()
		s.runs = s.runs[maxFanIn:]
	}
	m, err := s.merge(s.runs)
	if err != nil {
		return nil, err
	}
	return &mergedRows{m: m, n: s.n}, nil
}

func (s *sorter) closeOpen() {
	for _, f := range s.open {
		_ = f.Close()
	}
	s.open = nil
}

// close removes the runs.
func (s *sorter) close() {
	s.closeOpen()
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// memRows yields the sorted buffer.
type memRows struct {
	s *sorter
	i int
}

func (m *memRows) Len() int64 { return int64(len(m.s.refs)) }

func (m *memRows) Next() (Entry, error) {
	if m.i >= len(m.s.refs) {
		return Entry{}, io.EOF
	}
	r := m.s.refs[m.i]
	m.i++
	k := m.s.arena[r.off : r.off+int(r.klen) : r.off+int(r.klen)]
	v := m.s.arena[r.off+int(r.klen) : r.off+int(r.klen)+int(r.vlen) : r.off+int(r.klen)+int(r.vlen)]
	return Entry{Key: k, Value: v}, nil
}

// runReader reads one run; its current row stays valid until advance.
type runReader struct {
	r     *bufio.Reader
	name  string
	line  int64
	key   []byte
	value []byte
	buf   []byte
}

func (r *runReader) advance() error {
	line, err := binary.ReadVarint(r.r)
	if errors.Is(err, io.EOF) {
		return io.EOF
	}
	if err != nil {
		return fmt.Errorf("sort run %s: %w", r.name, err)
	}
	kl, err := binary.ReadUvarint(r.r)
	if err != nil {
		return fmt.Errorf("sort run %s: %w", r.name, noEOF(err))
	}
	vl, err := binary.ReadUvarint(r.r)
	if err != nil {
		return fmt.Errorf("sort run %s: %w", r.name, noEOF(err))
	}
	if kl > MaxKeyLen || vl > MaxValueLen {
		return fmt.Errorf("%w: sort run %s: row of %d+%d bytes", ErrCorrupt, r.name, kl, vl)
	}
	n := int(kl + vl)
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	r.buf = r.buf[:n]
	if _, err := io.ReadFull(r.r, r.buf); err != nil {
		return fmt.Errorf("sort run %s: %w", r.name, noEOF(err))
	}
	r.line, r.key, r.value = line, r.buf[:kl:kl], r.buf[kl:]
	return nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// merger is a k-way merge of runs that refuses duplicate keys.
type merger struct {
	h       runHeap
	pending *runReader // the reader of the row last returned, to advance
	prev    []byte
	prevLn  int64
	started bool
}

func (s *sorter) merge(names []string) (*merger, error) {
	size := min(max(int(s.limit/4)/len(names), 16<<10), 1<<20)
	m := &merger{}
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("sort runs: %w", err)
		}
		s.open = append(s.open, f)
		r := &runReader{r: bufio.NewReaderSize(f, size), name: filepath.Base(name)}
		switch err := r.advance(); {
		case errors.Is(err, io.EOF):
		case err != nil:
			return nil, err
		default:
			m.h = append(m.h, r)
		}
	}
	heap.Init(&m.h)
	return m, nil
}

func (m *merger) next() (Entry, int64, error) {
	if r := m.pending; r != nil {
		m.pending = nil
		m.prev = append(m.prev[:0], r.key...)
		m.prevLn = r.line
		m.started = true
		switch err := r.advance(); {
		case errors.Is(err, io.EOF):
			heap.Pop(&m.h)
		case err != nil:
			return Entry{}, 0, err
		default:
			heap.Fix(&m.h, 0)
		}
	}
	if len(m.h) == 0 {
		return Entry{}, 0, io.EOF
	}
	r := m.h[0]
	if m.started && bytes.Equal(r.key, m.prev) {
		return Entry{}, 0, duplicate(r.key, m.prevLn, r.line)
	}
	m.pending = r
	return Entry{Key: r.key, Value: r.value}, r.line, nil
}

type runHeap []*runReader

func (h runHeap) Len() int           { return len(h) }
func (h runHeap) Less(i, j int) bool { return bytes.Compare(h[i].key, h[j].key) < 0 }
func (h runHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)        { *h = append(*h, x.(*runReader)) }
func (h *runHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	*h = old[:len(old)-1]
	return r
}

// mergedRows yields the merge of all runs.
type mergedRows struct {
	m *merger
	n int64
}

func (r *mergedRows) Len() int64 { return r.n }

func (r *mergedRows) Next() (Entry, error) {
	e, _, err := r.m.next()
	return e, err
}

// IngestSorted is IngestRows for input known to be in strictly
// increasing key order and exactly n rows long: the rows go straight to
// the store in one pass, without a sort buffer or temporary files. A row
// out of order, a duplicate, a bad row, or a count other than n is an
// error wrapping ErrBadInput that names the row's line; the objects
// written until then are deleted and nothing is published.
func IngestSorted(ctx context.Context, store BlockStore, meta MetaStore, table string, src RowSource, n int64, cfg IngestConfig) (*messages.TableMeta, error) {
	if err := ValidateTableName(table); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, fmt.Errorf("%w: IngestSorted of %d rows", ErrBadInput, n)
	}
	cfg = cfg.withDefaults()
	return ingestSorted(ctx, store, meta, table, &checkedRows{src: src, n: n}, cfg)
}

// checkedRows checks a RowSource that claims to be sorted and n long.
type checkedRows struct {
	src    RowSource
	n, i   int64
	prev   []byte
	prevLn int64
}

func (c *checkedRows) Len() int64 { return c.n }

func (c *checkedRows) Next() (Entry, error) {
	r, err := c.src.Next()
	if errors.Is(err, io.EOF) {
		if c.i != c.n {
			return Entry{}, fmt.Errorf("%w: input ended after %d rows, %d expected", ErrBadInput, c.i, c.n)
		}
		return Entry{}, io.EOF
	}
	if err != nil {
		return Entry{}, fmt.Errorf("reading row %d: %w", c.i+1, err)
	}
	c.i++
	line := r.Line
	if line <= 0 {
		line = -c.i
	}
	switch {
	case c.i > c.n:
		return Entry{}, fmt.Errorf("%w: %s is more than the %d rows expected", ErrBadInput, where(line), c.n)
	case len(r.Key) == 0:
		return Entry{}, fmt.Errorf("%w: %s has an empty key", ErrBadInput, where(line))
	case len(r.Key) > MaxKeyLen:
		return Entry{}, fmt.Errorf("%w: %s: key is %d bytes, at most %d allowed", ErrBadInput, where(line), len(r.Key), MaxKeyLen)
	case len(r.Value) > MaxValueLen:
		return Entry{}, fmt.Errorf("%w: %s (key %s): value is %d bytes, at most %d allowed", ErrBadInput, where(line), FormatKey(r.Key), len(r.Value), MaxValueLen)
	}
	if c.i > 1 {
		switch cmp := bytes.Compare(r.Key, c.prev); {
		case cmp == 0:
			return Entry{}, duplicate(r.Key, c.prevLn, line)
		case cmp < 0:
			return Entry{}, fmt.Errorf("%w: %s: key %s is not after key %s of %s (input not sorted)", ErrBadInput, where(line), FormatKey(r.Key), FormatKey(c.prev), where(c.prevLn))
		}
	}
	c.prev, c.prevLn = append(c.prev[:0], r.Key...), line
	return Entry{Key: r.Key, Value: r.Value}, nil
}

package tablets

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/scanplane/scanplane/messages"
)

// maxFileRowBytes caps the key and value bytes of one tablet file: a
// FileWriter holds its whole file until Finish, so the cap bounds the
// memory of a file being encoded and of each file being written.
const maxFileRowBytes = 4 << 20

// sortedRows yields validated rows in strictly increasing key order.
type sortedRows interface {
	// Len is the number of rows Next yields.
	Len() int64
	// Next returns the next row, io.EOF after the last. The row's slices
	// are valid until the next call.
	Next() (Entry, error)
}

// sliceRows is a sortedRows over a sorted slice.
type sliceRows struct {
	rows []Entry
	i    int
}

func (s *sliceRows) Len() int64 { return int64(len(s.rows)) }

func (s *sliceRows) Next() (Entry, error) {
	if s.i >= len(s.rows) {
		return Entry{}, io.EOF
	}
	s.i++
	return s.rows[s.i-1], nil
}

// writeTablets reads rows, cuts them into tablets (at cfg.SplitKeys, or
// into cfg.Tablets parts of equal row count), encodes each tablet's files
// and hands them to bw, and each tablet's file list to mw. It fills tm's
// split points, tablets, bytes and meta_format.
func writeTablets(bw *blockWriter, mw *manifestWriter, rows sortedRows, table string, gen uint64, nonce string, cfg IngestConfig, tm *messages.TableMeta) error {
	total := rows.Len()
	var splits [][]byte
	var cuts []int64 // row numbers that start a tablet, without SplitKeys
	explicit := len(cfg.SplitKeys) > 0
	if explicit {
		for _, s := range cfg.SplitKeys {
			splits = append(splits, bytes.Clone(s))
		}
	} else {
		n := min(int64(cfg.Tablets), max(total, 1))
		for i := int64(1); i < n; i++ {
			cuts = append(cuts, i*total/n)
		}
	}
	var (
		t        int // current tablet
		tab      *messages.TabletMeta
		w        *FileWriter
		k        int // files of the current tablet so far
		fileRows int // key and value bytes in w
		start    []byte
	)
	newTablet := func() {
		tab = &messages.TabletMeta{Ref: &messages.TabletRef{Table: table, Generation: gen, Index: uint32(t), PrevEndRow: start}}
		k = 0
	}
	finishFile := func() error {
		if w == nil {
			return nil
		}
		f, err := w.Finish()
		w = nil
		if err != nil {
			return err
		}
		ref := f.Ref()
		tm.Bytes += f.Bytes
		if err := bw.submit(f, ref); err != nil {
			return err
		}
		return mw.add(ref)
	}
	finishTablet := func() error {
		if err := finishFile(); err != nil {
			return err
		}
		spilled, err := mw.finish(tab)
		if err != nil {
			return err
		}
		if spilled {
			tm.MetaFormat = MetaFormatManifests
		}
		tm.Tablets = append(tm.Tablets, tab)
		return nil
	}
	endTablet := func(end []byte) error {
		tab.Ref.EndRow = end
		if err := finishTablet(); err != nil {
			return err
		}
		t++
		start = end
		newTablet()
		return nil
	}
	newTablet()
	for idx := int64(0); ; idx++ {
		e, err := rows.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if explicit {
			for t < len(splits) && bytes.Compare(e.Key, splits[t]) >= 0 {
				if err := endTablet(splits[t]); err != nil {
					return err
				}
			}
		} else if t < len(cuts) && idx == cuts[t] {
			key := bytes.Clone(e.Key)
			splits = append(splits, key)
			if err := endTablet(key); err != nil {
				return err
			}
		}
		if w != nil && (w.IndexBytes() >= MaxIndexBytes || fileRows >= maxFileRowBytes) {
			if err := finishFile(); err != nil {
				return err
			}
		}
		if w == nil {
			w = NewFileWriter(FileID(table, gen, t, nonce, k), cfg.BlockSize)
			k++
			fileRows = 0
		}
		if err := w.Add(e.Key, e.Value); err != nil {
			return err
		}
		fileRows += len(e.Key) + len(e.Value)
		tab.Rows++
	}
	for t < len(splits) {
		if err := endTablet(splits[t]); err != nil {
			return err
		}
	}
	if err := finishTablet(); err != nil {
		return err
	}
	tm.SplitPoints = splits
	return nil
}

// blockWriter stores encoded files with at most cfg.Writers Puts in
// flight (sent and not yet answered) and at most cfg.InFlightBytes of
// files between encoding and stored. A store that is an AsyncPutter
// gets its Puts sent from the encoding goroutine without waiting for
// each; another store gets each Put from a goroutine of its own. One
// goroutine per file (at most cfg.Writers files at a time) waits for
// its blocks' answers in order and then puts the file's index, so an
// index that exists names blocks that exist.
type blockWriter struct {
	parent  context.Context
	ctx     context.Context // cancelled by the first failed write
	cancel  context.CancelCauseFunc
	g       *errgroup.Group // one goroutine per file being written
	sem     *semaphore.Weighted
	limit   int64
	puts    *semaphore.Weighted // Puts in flight, cfg.Writers
	store   BlockStore
	async   AsyncPutter         // store, if it is one
	written []*messages.FileRef // every submitted file, for the cleanup
	mw      *manifestWriter     // the ingest's file lists, for the cleanup

	mu       sync.Mutex // serialises Progress
	done     int64
	total    int64
	progress func(stage string, done, total int64)
}

func newBlockWriter(ctx context.Context, store BlockStore, cfg IngestConfig, total int64) *blockWriter {
	cctx, cancel := context.WithCancelCause(ctx)
	g, gctx := errgroup.WithContext(cctx)
	g.SetLimit(cfg.Writers)
	bw := &blockWriter{parent: ctx, ctx: gctx, cancel: cancel, g: g, sem: semaphore.NewWeighted(cfg.InFlightBytes),
		limit: cfg.InFlightBytes, puts: semaphore.NewWeighted(int64(cfg.Writers)), store: store,
		total: total, progress: cfg.Progress}
	bw.async, _ = store.(AsyncPutter)
	bw.progress("write", 0, total)
	return bw
}

// submit sends f's blocks and has its index put once they are stored; it
// blocks while cfg.Writers Puts, cfg.Writers files or cfg.InFlightBytes
// are in flight. Once a Put failed or ctx ended it returns that error
// (context.Cause of the group's context).
func (bw *blockWriter) submit(f *EncodedFile, ref *messages.FileRef) error {
	weight := min(int64(f.Bytes), bw.limit)
	if err := bw.sem.Acquire(bw.ctx, weight); err != nil {
		return context.Cause(bw.ctx)
	}
	bw.written = append(bw.written, ref)
	// sent holds the answers of f's blocks in order; the file's goroutine
	// takes them as they come, so it frees the Puts' places while more
	// are sent, and it waits for every Put sent even after a failure.
	sent := make(chan func() error, len(f.Blocks))
	bw.g.Go(func() error { return bw.finishFile(f, weight, sent) })
	defer close(sent)
	for i, b := range f.Blocks {
		if err := bw.puts.Acquire(bw.ctx, 1); err != nil {
			return context.Cause(bw.ctx)
		}
		sent <- bw.put(BlockKey(f.ID, i), b)
	}
	return nil
}

// finishFile waits for the answers of f's blocks in sent, then puts f's
// index. A failure stops the ingest at once (submit sends no more), and
// finishFile still waits for every Put sent, so none is in flight when
// the group's Wait returns and the cleanup runs.
func (bw *blockWriter) finishFile(f *EncodedFile, weight int64, sent <-chan func() error) error {
	var first error
	n := 0
	for wait := range sent {
		err := wait()
		bw.puts.Release(1)
		if first != nil {
			continue
		}
		if err != nil {
			first = err
			bw.cancel(err)
			continue
		}
		bw.stored(int64(blockEntries(f.Blocks[n])))
		n++
	}
	switch {
	case first != nil:
		return first
	case n < len(f.Blocks): // submit stopped: the group's context ended
		return context.Cause(bw.ctx)
	}
	if err := bw.puts.Acquire(bw.ctx, 1); err != nil {
		return context.Cause(bw.ctx)
	}
	err := bw.put(IndexKey(f.ID), f.Index)()
	bw.puts.Release(1)
	if err != nil {
		return err
	}
	bw.sem.Release(weight)
	return nil
}

// put sends one Put and returns its answer's wait, which returns once
// the Put is settled (stored, failed, or given up by the store).
func (bw *blockWriter) put(key string, data []byte) func() error {
	if bw.async != nil {
		wait, err := bw.async.PutAsync(bw.ctx, key, data)
		if err != nil {
			return func() error { return err }
		}
		return wait
	}
	done := make(chan error, 1)
	go func() { done <- bw.store.Put(bw.ctx, key, data) }()
	return func() error { return <-done }
}

func (bw *blockWriter) stored(rows int64) {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	bw.done += rows
	bw.progress("write", bw.done, bw.total)
}

// wait returns when every Put sent has returned, with the first error.
func (bw *blockWriter) wait() error {
	err := bw.g.Wait()
	bw.cancel(nil)
	return err
}

// failed is the error of a failed ingest after removing what was written
// (wait must have returned).
func (bw *blockWriter) failed(table string, err error) error {
	err = fmt.Errorf("tablets: ingest %s: %w", table, err)
	if cerr := bw.removeAll(); cerr != nil {
		return fmt.Errorf("%w; %w", err, cerr)
	}
	return err
}

// removeAll deletes the manifests and then the files' objects the ingest
// wrote (wait must have returned).
func (bw *blockWriter) removeAll() error {
	ctx := context.WithoutCancel(bw.parent)
	if mw := bw.mw; mw != nil && mw.ms != nil {
		if err := removeManifests(ctx, mw.ms, mw.table, mw.written); err != nil {
			return err
		}
	}
	return removeWritten(ctx, bw.store, bw.written)
}

// blockEntries is the entry count in an encoded block's trailer.
func blockEntries(b []byte) uint32 { return binary.LittleEndian.Uint32(b[len(b)-trailerLen:]) }

package tablets

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

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

// blockWriter stores encoded files with at most cfg.Writers Puts at a
// time and at most cfg.InFlightBytes of files between encoding and
// stored. A file's index is put after its last block is stored, so an
// index that exists names blocks that exist.
type blockWriter struct {
	parent  context.Context
	ctx     context.Context // cancelled by the first failed write
	g       *errgroup.Group
	sem     *semaphore.Weighted
	limit   int64
	store   BlockStore
	written []*messages.FileRef // every submitted file, for the cleanup
	mw      *manifestWriter     // the ingest's file lists, for the cleanup

	mu       sync.Mutex // serialises Progress
	done     int64
	total    int64
	progress func(stage string, done, total int64)
}

func newBlockWriter(ctx context.Context, store BlockStore, cfg IngestConfig, total int64) *blockWriter {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cfg.Writers)
	bw := &blockWriter{parent: ctx, ctx: gctx, g: g, sem: semaphore.NewWeighted(cfg.InFlightBytes),
		limit: cfg.InFlightBytes, store: store, total: total, progress: cfg.Progress}
	bw.progress("write", 0, total)
	return bw
}

// submit queues f's blocks and index; it blocks while cfg.Writers Puts
// or cfg.InFlightBytes are in flight. Once a Put failed or ctx ended it
// returns that error (context.Cause of the group's context).
func (bw *blockWriter) submit(f *EncodedFile, ref *messages.FileRef) error {
	weight := min(int64(f.Bytes), bw.limit)
	if err := bw.sem.Acquire(bw.ctx, weight); err != nil {
		return context.Cause(bw.ctx)
	}
	bw.written = append(bw.written, ref)
	var left atomic.Int64
	left.Store(int64(len(f.Blocks)))
	for i, b := range f.Blocks {
		if bw.ctx.Err() != nil {
			return context.Cause(bw.ctx)
		}
		bw.g.Go(func() error {
			if err := bw.store.Put(bw.ctx, BlockKey(f.ID, i), b); err != nil {
				return err
			}
			bw.stored(int64(blockEntries(b)))
			if left.Add(-1) > 0 {
				return nil
			}
			if err := bw.store.Put(bw.ctx, IndexKey(f.ID), f.Index); err != nil {
				return err
			}
			bw.sem.Release(weight)
			return nil
		})
	}
	return nil
}

func (bw *blockWriter) stored(rows int64) {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	bw.done += rows
	bw.progress("write", bw.done, bw.total)
}

// wait returns when every queued Put has returned, with the first error.
func (bw *blockWriter) wait() error { return bw.g.Wait() }

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

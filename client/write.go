package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"

	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// AdminTLSFromSecrets is TLSFromSecrets with the admin certificate
// (admin.crt, admin.key): the role that may write tables. A Client
// that ingests (Ingest, NewWriter) on a secured cluster needs it.
func AdminTLSFromSecrets(dir string) (*tls.Config, error) {
	return secrets.RoleTLS(dir, "admin", "secrets directory")
}

// WriteOptions configure Ingest and NewWriter. The zero value is the
// defaults.
type WriteOptions struct {
	// Tablets splits the table into this many tablets of about equal row
	// count; 0 means 8. Ignored when SplitKeys is set.
	Tablets int
	// SplitKeys are explicit split points, strictly increasing.
	SplitKeys [][]byte
	// BlockSize is the target size of a data block; 0 means 64 KiB.
	BlockSize int
	// SortBuffer bounds the rows held in memory to sort them (keys,
	// values and tablets.RowOverhead per row); more rows are sorted in
	// runs spilled to TempDir and merged. 0 means 64 MiB.
	SortBuffer int64
	// TempDir is where the runs go; "" means os.TempDir().
	TempDir string
	// Writers is how many block writes are in flight at once; 0 means 64.
	Writers int
}

// DefaultWriteTablets is WriteOptions.Tablets' default.
const DefaultWriteTablets = 8

// ingestConfig is the tablets configuration of o.
func (o WriteOptions) ingestConfig() (tablets.IngestConfig, error) {
	cfg := tablets.DefaultIngestConfig()
	cfg.Tablets = DefaultWriteTablets
	if o.Tablets != 0 {
		cfg.Tablets = o.Tablets
	}
	cfg.SplitKeys = o.SplitKeys
	if o.BlockSize != 0 {
		cfg.BlockSize = o.BlockSize
	}
	if o.SortBuffer != 0 {
		cfg.SortBuffer = o.SortBuffer
	}
	cfg.TempDir = o.TempDir
	if o.Writers != 0 {
		cfg.Writers = o.Writers
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("client: write options: %w", err)
	}
	return cfg, nil
}

// Ingest writes rows, in any order, as the new generation of table and
// makes it current; it returns the generation. It holds at most
// opts.SortBuffer of rows in memory whatever their number. Nothing
// becomes visible unless every row was good and stored: a bad row (empty
// key, a key over 16 KiB or a value over 256 KiB, a duplicate key) is an
// error wrapping tablets.ErrBadInput that names the row by its 1-based
// position ("row N"), and the table keeps its current generation. The
// client needs the admin certificate on a secured cluster
// (AdminTLSFromSecrets).
func (c *Client) Ingest(ctx context.Context, table string, rows iter.Seq[Row], opts WriteOptions) (uint64, error) {
	w, err := c.NewWriter(ctx, table, opts)
	if err != nil {
		return 0, err
	}
	for r := range rows {
		if err := w.Write(r.Key, r.Value); err != nil {
			w.Abort()
			return 0, err
		}
	}
	return w.Commit()
}

// Writer writes one new generation of a table, row by row: Write rows in
// any order, then Commit to make them the table's current generation,
// or Abort to drop them. It runs the ingest as rows arrive, in the
// memory bound of WriteOptions.SortBuffer. A Writer belongs to one
// goroutine.
type Writer struct {
	c      *Client
	table  string
	cancel context.CancelFunc
	batch  []tablets.Row
	rows   int64
	ch     chan []tablets.Row
	done   chan struct{}
	once   sync.Once
	tm     *messages.TableMeta
	err    error // the ingest's outcome, once done is closed
	closed bool
}

// writeBatch is how many rows Write hands over at once.
const writeBatch = 256

// NewWriter starts writing a new generation of table. ctx bounds the
// whole write, Commit included; cancelling it aborts.
func (c *Client) NewWriter(ctx context.Context, table string, opts WriteOptions) (*Writer, error) {
	if c.conn == nil || c.meta == nil {
		return nil, ErrClosed
	}
	if err := tablets.ValidateTableName(table); err != nil {
		return nil, fmt.Errorf("client: write: %w", err)
	}
	cfg, err := opts.ingestConfig()
	if err != nil {
		return nil, err
	}
	store, err := c.conn.BlockStore(ctx)
	if err != nil {
		return nil, fmt.Errorf("client: write %s: block store: %w", table, err)
	}
	ictx, cancel := context.WithCancel(ctx)
	w := &Writer{c: c, table: table, cancel: cancel, ch: make(chan []tablets.Row, 4), done: make(chan struct{})}
	src := &chanRows{ch: w.ch, ctx: ictx}
	go func() {
		defer close(w.done)
		w.tm, w.err = tablets.IngestRows(ictx, store, c.meta, table, src, cfg)
	}()
	return w, nil
}

// Write adds a row. It copies key and value. A row that is bad on its own
// (empty key, a key or value over the limits) is refused at once, naming
// it; duplicates are found at Commit. After an error the Writer is
// aborted.
func (w *Writer) Write(key, value []byte) error {
	if w.closed {
		return fmt.Errorf("client: write %s: %w", w.table, errWriterClosed)
	}
	w.rows++
	var bad string
	switch {
	case len(key) == 0:
		bad = "has an empty key"
	case len(key) > tablets.MaxKeyLen:
		bad = fmt.Sprintf("has a %d-byte key, at most %d allowed", len(key), tablets.MaxKeyLen)
	case len(value) > tablets.MaxValueLen:
		bad = fmt.Sprintf("(key %s) has a %d-byte value, at most %d allowed", tablets.FormatKey(key), len(value), tablets.MaxValueLen)
	}
	if bad != "" {
		w.Abort()
		return fmt.Errorf("client: write %s: %w: row %d %s", w.table, tablets.ErrBadInput, w.rows, bad)
	}
	own := make([]byte, len(key)+len(value))
	copy(own, key)
	copy(own[len(key):], value)
	w.batch = append(w.batch, tablets.Row{Key: own[:len(key):len(key)], Value: own[len(key):], Line: 0})
	if len(w.batch) < writeBatch {
		return nil
	}
	return w.flush()
}

var errWriterClosed = errors.New("writer already committed or aborted")

func (w *Writer) flush() error {
	if len(w.batch) == 0 {
		return nil
	}
	select {
	case w.ch <- w.batch:
		w.batch = make([]tablets.Row, 0, writeBatch)
		return nil
	case <-w.done:
		w.closed = true
		return fmt.Errorf("client: write %s: %w", w.table, w.result())
	}
}

func (w *Writer) result() error {
	if w.err != nil {
		return w.err
	}
	return errors.New("ingest ended early")
}

// Commit ends the input, waits until every row is stored and makes the
// new generation current, and returns it. An error (a duplicate key,
// naming both rows; a storage failure; ctx ended) leaves the table's
// current generation as it was.
func (w *Writer) Commit() (uint64, error) {
	if w.closed {
		return 0, fmt.Errorf("client: write %s: %w", w.table, errWriterClosed)
	}
	if err := w.flush(); err != nil {
		return 0, err
	}
	w.closed = true
	w.once.Do(func() { close(w.ch) })
	<-w.done
	w.cancel()
	if w.err != nil && (w.tm == nil || !errors.Is(w.err, tablets.ErrCleanup)) {
		return 0, fmt.Errorf("client: write %s: %w", w.table, w.err)
	}
	// Readers learn of the generation from the metadata store's watch;
	// the notice only makes it sooner.
	_ = w.c.conn.PublishMetaChanged(&messages.TableMeta{Name: w.tm.GetName(), Generation: w.tm.GetGeneration()})
	return w.tm.GetGeneration(), nil
}

// Abort drops the rows written so far: nothing is published and the
// table keeps its current generation. It is a no-op after Commit.
func (w *Writer) Abort() {
	if w.closed {
		return
	}
	w.closed = true
	w.cancel()
	<-w.done
}

// chanRows is the RowSource of a Writer.
type chanRows struct {
	ch  chan []tablets.Row
	ctx context.Context
	cur []tablets.Row
}

func (s *chanRows) Next() (tablets.Row, error) {
	for len(s.cur) == 0 {
		select {
		case b, ok := <-s.ch:
			if !ok {
				return tablets.Row{}, io.EOF
			}
			s.cur = b
		case <-s.ctx.Done():
			return tablets.Row{}, s.ctx.Err()
		}
	}
	r := s.cur[0]
	s.cur = s.cur[1:]
	return r, nil
}

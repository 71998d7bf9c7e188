package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/tablets/rowfmt"
)

func runIngest(ctx context.Context, g *globals, args []string, out, errOut io.Writer) (err error) {
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	table := fs.String("table", "", "table `NAME` ([A-Za-z0-9_-], required)")
	splits := fs.Int("splits", 8, "split the table into `N` tablets of equal row count (N-1 split points)")
	splitKeys := fs.String("split-keys", "", "explicit split points `KEYS`, comma separated (escapes \\xNN); overrides --splits")
	generate := fs.Int("generate", 0, "ingest `ROWS` deterministic synthetic rows (row000000000 ...) instead of a file")
	blockSize := fs.Int("block-size", tablets.DefaultBlockSize, "`BYTES` per block")
	replicas := fs.Int("replicas", 0, "JetStream replicas `N` of a bucket this ingest creates, 1..5; 0 = as many as the metadata bucket has (the coordinator's --replicas), else 1")
	blocksDir := fs.String("blocks-dir", "", "write blocks to this shared `DIR` instead of JetStream (scan servers need the same --blocks-dir)")
	allowEmpty := fs.Bool("allow-empty", false, "publish an input without rows as the table's new, empty generation (without it, empty input is refused and the table keeps its rows)")
	format := fs.String("format", "", "input `FORMAT`: tsv, csv, jsonl or parquet (default: from FILE's extension, tsv for stdin)")
	keyColumn := fs.String("key-column", "", "`NAME` of the key column (csv with a header, parquet; default key)")
	valueColumn := fs.String("value-column", "", "`NAME` of the value column (csv with a header, parquet; default value)")
	memory := fs.Int("memory-mib", defaultIngestMemoryMiB, "memory budget in `MIB`: a quarter sorts rows, an eighth holds blocks being written; larger input spills sorted runs to --temp-dir")
	tempDir := fs.String("temp-dir", "", "`DIR` for the sorted runs of input larger than the sort buffer (default $TMPDIR or /tmp)")
	writers := fs.Int("writers", tablets.DefaultWriters, "block writes `N` in flight at once")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the ingest (this process) to `FILE` (go tool pprof)")
	pos, err := parse("ingest", g, fs, args, out)
	if err != nil {
		return err
	}
	if *table == "" {
		return usageError{errors.New("--table is required")}
	}
	if *replicas < 0 || *replicas > 5 {
		return usageError{fmt.Errorf("--replicas %d: want 1..5, or 0 to follow the metadata bucket", *replicas)}
	}
	if err := tablets.ValidateTableName(*table); err != nil {
		return usageError{err}
	}
	generated := false
	fs.Visit(func(f *flag.Flag) { generated = generated || f.Name == "generate" })
	switch {
	case generated && *generate < 1:
		return usageError{fmt.Errorf("--generate %d: want a number of rows >= 1", *generate)}
	case len(pos) > 1:
		return usageError{fmt.Errorf("one FILE at most, got %d: %q", len(pos), pos)}
	case generated && len(pos) == 1:
		return usageError{fmt.Errorf("give FILE %q or --generate %d, not both", pos[0], *generate)}
	case !generated && len(pos) == 0:
		return usageError{errors.New("no input: give a FILE (- for stdin) or --generate ROWS")}
	case *splits < 1 || *splits > tablets.MaxTablets:
		return usageError{fmt.Errorf("--splits %d: want 1..%d tablets", *splits, tablets.MaxTablets)}
	case *blockSize < 1 || *blockSize > tablets.MaxBlockSize:
		return usageError{fmt.Errorf("--block-size %d: want 1..%d bytes", *blockSize, tablets.MaxBlockSize)}
	case *memory < minIngestMemoryMiB:
		return usageError{fmt.Errorf("--memory-mib %d: want at least %d", *memory, minIngestMemoryMiB)}
	case *writers < 1 || *writers > tablets.MaxWriters:
		return usageError{fmt.Errorf("--writers %d: want 1..%d", *writers, tablets.MaxWriters)}
	}
	cfg := tablets.DefaultIngestConfig()
	cfg.BlockSize = *blockSize
	cfg.Tablets = *splits
	cfg.Writers = *writers
	cfg.SortBuffer = int64(*memory) << 20 / 4
	cfg.InFlightBytes = int64(*memory) << 20 / 8
	cfg.TempDir = *tempDir
	if *splitKeys != "" {
		for _, s := range strings.Split(*splitKeys, ",") {
			k, err := tablets.ParseKey(s)
			if err != nil {
				return usageError{fmt.Errorf("--split-keys: %w", err)}
			}
			cfg.SplitKeys = append(cfg.SplitKeys, k)
		}
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	var src tablets.RowSource
	var size int64 = -1 // input bytes, when known
	var counted *countingReader
	rowBytes := 0.0
	if generated {
		rowBytes = float64(len(tablets.RowKey(0)) + tablets.RowValueLen)
	}
	rf := rowfmt.Config{KeyColumn: *keyColumn, ValueColumn: *valueColumn}
	if !generated {
		name := pos[0]
		rf.Format = rowfmt.ForPath(name)
		if *format != "" {
			if rf.Format, err = rowfmt.Parse(*format); err != nil {
				return usageError{fmt.Errorf("--format: %w", err)}
			}
		}
		if err := rf.Validate(); err != nil {
			return usageError{err}
		}
		in := os.Stdin
		if name != "-" {
			if in, err = os.Open(name); err != nil {
				return err
			}
			defer in.Close()
		}
		if fi, err := in.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
		var r io.Reader = in
		if rf.Format != rowfmt.Parquet {
			counted = &countingReader{r: in}
			r = counted
		}
		if src, err = rowfmt.NewReader(r, rf); err != nil {
			return err
		}
		what := "stdin"
		if name != "-" {
			what = fmt.Sprintf("%q", name)
		}
		if !*allowEmpty {
			src = &nonEmpty{src: src, what: what, table: *table}
		}
	} else if *format != "" || *keyColumn != "" || *valueColumn != "" {
		return usageError{errors.New("--format, --key-column and --value-column are for a FILE, not --generate")}
	}
	// Go's collector keeps the heap near the budget rather than at twice
	// what is live.
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(int64(*memory) << 20 * 3 / 4))

	// The ingest runs as long as it makes progress: --timeout bounds the
	// connection and each stall, not the whole ingest.
	dctx, dcancel := context.WithTimeout(ctx, g.timeout)
	defer dcancel()
	conn, err := dialAs(dctx, g, "admin", *replicas)
	if err != nil {
		return err
	}
	defer conn.Close()
	meta, err := conn.MetaStore(dctx)
	if err != nil {
		return err
	}
	var store tablets.BlockStore
	if *blocksDir != "" {
		if store, err = tablets.NewDirStore(*blocksDir); err != nil {
			return err
		}
	} else if store, err = conn.BlockStore(dctx); err != nil {
		return err
	}
	ictx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	wd := newWatchdog(g.timeout, func() {
		stop(fmt.Errorf("%w: no progress for --timeout %v", context.DeadlineExceeded, g.timeout))
	})
	defer wd.stop()
	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, stopProfile()) }()
	}
	bar := newIngestBar(errOut, size, counted, rowBytes)
	cfg.Progress = func(stage string, done, total int64) {
		wd.kick()
		bar.update(stage, done, total)
	}
	start := time.Now()
	var tm *messages.TableMeta
	if generated {
		tm, err = tablets.IngestSorted(ictx, store, meta, *table, &tablets.GeneratedRows{N: *generate}, int64(*generate), cfg)
	} else {
		tm, err = tablets.IngestRows(ictx, store, meta, *table, src, cfg)
	}
	bar.finish()
	if cause := context.Cause(ictx); err != nil && cause != nil && ctx.Err() == nil {
		err = fmt.Errorf("%w (%v)", err, cause)
	}
	var empty emptyInput
	if errors.As(err, &empty) {
		return empty
	}
	if errors.Is(err, tablets.ErrCleanup) && tm != nil {
		fmt.Fprintln(errOut, "warning: published, but old generations were not all removed:", err)
	} else if err != nil {
		return storageHint(err)
	}
	if err := conn.PublishMetaChanged(&messages.TableMeta{Name: tm.Name, Generation: tm.Generation}); err != nil {
		fmt.Fprintln(errOut, "warning: meta-changed notice not published:", err)
	}
	fmt.Fprintf(out, "ingested %s: generation %d, %d rows, %d tablets, %d bytes in %v\n", tm.Name, tm.Generation, tm.Rows, len(tm.Tablets), tm.Bytes, time.Since(start).Round(time.Millisecond))
	return nil
}

// startCPUProfile starts a CPU profile written to path; stop ends it.
func startCPUProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		return nil
	}, nil
}

// Memory budget of scanctl ingest.
const (
	defaultIngestMemoryMiB = 256
	minIngestMemoryMiB     = 32
)

// nonEmpty refuses an input without rows, so the table keeps its rows.
type nonEmpty struct {
	src   tablets.RowSource
	what  string
	table string
	rows  int64
}

func (n *nonEmpty) Next() (tablets.Row, error) {
	r, err := n.src.Next()
	if errors.Is(err, io.EOF) && n.rows == 0 {
		return r, emptyInput{what: n.what, table: n.table}
	}
	n.rows++
	return r, err
}

// emptyInput is the refusal of an input without rows.
type emptyInput struct{ what, table string }

func (e emptyInput) Error() string {
	return fmt.Sprintf("%s has no rows: nothing ingested, table %s keeps its rows (pass --allow-empty to publish an empty generation)", e.what, e.table)
}

// countingReader counts the bytes read, for the progress line.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// watchdog calls fire once when kick has not been called for d.
type watchdog struct {
	last atomic.Int64 // unix nanoseconds of the last kick
	done chan struct{}
	wg   sync.WaitGroup
}

func newWatchdog(d time.Duration, fire func()) *watchdog {
	w := &watchdog{done: make(chan struct{})}
	w.kick()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(max(d/10, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-w.done:
				return
			case now := <-t.C:
				if now.Sub(time.Unix(0, w.last.Load())) > d {
					fire()
					return
				}
			}
		}
	}()
	return w
}

func (w *watchdog) kick() { w.last.Store(time.Now().UnixNano()) }

func (w *watchdog) stop() {
	close(w.done)
	w.wg.Wait()
}

// storageHint adds what to do about a storage error of an ingest.
func storageHint(err error) error {
	switch {
	case errors.Is(err, bus.ErrStoreFull):
		return fmt.Errorf("%w (JetStream's storage is at its limit, by default 75%% of the disk space free when the NATS server started: free space and restart it)", err)
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("%w (the disk of --blocks-dir is full)", err)
	case errors.Is(err, bus.ErrUnavailable):
		return fmt.Errorf("%w (NATS JetStream did not answer: NATS is down, a NATS cluster has too few nodes up for a quorum, or a server ran out of disk, which turns JetStream off until it is restarted)", err)
	}
	return err
}

// dialAs connects to the cluster's NATS with role's certificate of
// --secrets (admin to write metadata and blocks, client to read them);
// buckets it creates get replicas (0 = bus's auto).
func dialAs(ctx context.Context, g *globals, role string, replicas int) (*bus.Conn, error) {
	bc := bus.DefaultConfig()
	bc.URL, bc.Name, bc.Replicas = g.nats, "scanctl", replicas
	bc.ReadOnly = role == "client" // the client role may not read the blocks bucket
	if dir := cliutil.SecretsDir(g.secrets); dir != "" {
		var err error
		if bc.TLS, err = cliutil.RemoteTLS(dir, role); err != nil {
			return nil, usageError{err}
		}
	}
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		return nil, natsError(ctx, g, err)
	}
	return conn, nil
}

// ingestBar draws one progress line on a terminal: the stage, rows,
// MB/s and, when the total is known, the ETA. While reading, the bytes
// read of the input's size give the rate and the ETA; while writing,
// rows of the total do (MB/s at the input's bytes per row).
type ingestBar struct {
	out      io.Writer
	size     int64           // input bytes, -1 if unknown
	in       *countingReader // nil: no byte count (generated, Parquet)
	rowBytes float64         // input bytes per row, once read
	stage    string
	started  time.Time
	last     time.Time
	drawn    bool
}

func newIngestBar(errOut io.Writer, size int64, in *countingReader, rowBytes float64) *ingestBar {
	f, ok := errOut.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return &ingestBar{out: errOut, size: size, in: in, rowBytes: rowBytes}
}

func (b *ingestBar) update(stage string, done, total int64) {
	if b == nil {
		return
	}
	now := time.Now()
	if stage != b.stage {
		b.stage, b.started = stage, now
	} else if now.Sub(b.last) < 200*time.Millisecond && done != total {
		return
	}
	b.last = now
	el := now.Sub(b.started).Seconds()
	var bytes, of float64 = -1, -1
	switch {
	case stage == "read" && b.in != nil:
		bytes, of = float64(b.in.n.Load()), float64(b.size)
		if done > 0 {
			b.rowBytes = bytes / float64(done)
		}
	case b.rowBytes > 0:
		bytes, of = float64(done)*b.rowBytes, float64(total)*b.rowBytes
	}
	line := fmt.Sprintf("%s: %d rows", stage, done)
	if total > 0 {
		line = fmt.Sprintf("%s: %d/%d rows", stage, done, total)
	}
	if el > 0.1 && bytes > 0 {
		line += fmt.Sprintf(", %.1f MB/s", bytes/el/1e6)
		if of > bytes {
			line += fmt.Sprintf(", ETA %v", time.Duration((of-bytes)/bytes*el*float64(time.Second)).Round(time.Second))
		}
	}
	fmt.Fprintf(b.out, "\r\x1b[K%s", line)
	b.drawn = true
}

func (b *ingestBar) finish() {
	if b != nil && b.drawn {
		fmt.Fprint(b.out, "\r\x1b[K")
	}
}

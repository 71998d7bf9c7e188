package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

func runIngest(ctx context.Context, g *globals, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	table := fs.String("table", "", "table `NAME` ([A-Za-z0-9_-], required)")
	splits := fs.Int("splits", 8, "split the table into `N` tablets of equal row count (N-1 split points)")
	splitKeys := fs.String("split-keys", "", "explicit split points `KEYS`, comma separated (escapes \\xNN); overrides --splits")
	generate := fs.Int("generate", 0, "ingest `ROWS` deterministic synthetic rows (row000000000 ...) instead of a file")
	blockSize := fs.Int("block-size", tablets.DefaultBlockSize, "`BYTES` per block")
	replicas := fs.Int("replicas", 0, "JetStream replicas `N` of a bucket this ingest creates, 1..5; 0 = as many as the metadata bucket has (the coordinator's --replicas), else 1")
	blocksDir := fs.String("blocks-dir", "", "write blocks to this shared `DIR` instead of JetStream (scan servers need the same --blocks-dir)")
	allowEmpty := fs.Bool("allow-empty", false, "publish an input without rows as the table's new, empty generation (without it, empty input is refused and the table keeps its rows)")
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
	}
	cfg := tablets.DefaultIngestConfig()
	cfg.BlockSize = *blockSize
	cfg.Tablets = *splits
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

	var entries []tablets.Entry
	if generated {
		entries = tablets.GenerateRows(*generate)
	} else {
		in := os.Stdin
		if pos[0] != "-" {
			f, err := os.Open(pos[0])
			if err != nil {
				return err
			}
			defer f.Close()
			in = f
		}
		if entries, err = tablets.ReadTSV(in); err != nil {
			return err
		}
		if len(entries) == 0 && !*allowEmpty {
			src := "stdin"
			if pos[0] != "-" {
				src = fmt.Sprintf("%q", pos[0])
			}
			return fmt.Errorf("%s has no rows: nothing ingested, table %s keeps its rows (pass --allow-empty to publish an empty generation)", src, *table)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	conn, err := dialAs(ctx, g, "admin", *replicas)
	if err != nil {
		return err
	}
	defer conn.Close()
	meta, err := conn.MetaStore(ctx)
	if err != nil {
		return err
	}
	var store tablets.BlockStore
	if *blocksDir != "" {
		if store, err = tablets.NewDirStore(*blocksDir); err != nil {
			return err
		}
	} else if store, err = conn.BlockStore(ctx); err != nil {
		return err
	}
	cfg.Progress = progress(errOut)
	start := time.Now()
	tm, err := tablets.Ingest(ctx, store, meta, *table, entries, cfg)
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

// progress returns a progress callback drawing a bar when errOut is a
// terminal, nil otherwise.
func progress(errOut io.Writer) func(stage string, done, total int64) {
	f, ok := errOut.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	var bar *progressbar.ProgressBar
	var cur string
	return func(stage string, done, total int64) {
		if stage != cur || bar == nil {
			if bar != nil {
				_ = bar.Finish()
			}
			cur = stage
			bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(errOut), progressbar.OptionSetDescription(stage),
				progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(100*time.Millisecond))
		}
		_ = bar.Set64(done)
	}
}

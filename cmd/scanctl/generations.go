package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// runTables is `scanctl tables` (every table's stored generations) and
// `scanctl tables drop`.
func runTables(ctx context.Context, g *globals, args []string, out, errOut io.Writer) error {
	if len(args) > 0 && args[0] == "drop" {
		return runTablesDrop(ctx, g, args[1:], out)
	}
	fs := flag.NewFlagSet("tables", flag.ContinueOnError)
	table := fs.String("table", "", "list only this table `NAME`")
	asJSON := fs.Bool("json", false, "print one JSON array (for programs) instead of the table")
	pos, err := parse("tables", g, fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q (did you mean 'scanctl tables drop'?)", pos)}
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	conn, err := dialAs(ctx, g, "client", 0)
	if err != nil {
		return err
	}
	defer conn.Close()
	meta, err := conn.MetaStore(ctx)
	if err != nil {
		return err
	}
	names := []string{*table}
	if *table == "" {
		if names, err = meta.Tables(ctx); err != nil {
			return err
		}
	}
	if *asJSON {
		metas, cur, errs := readGenerations(ctx, meta, names)
		return writeJSON(out, generationsJSON(metas, cur, errs, names))
	}
	return printGenerations(ctx, meta, names, out)
}

// readGenerations reads every stored generation of the named tables and
// the current one; a table that cannot be read, or has none, gets an
// error instead.
func readGenerations(ctx context.Context, meta tablets.GenerationStore, names []string) (map[string][]*messages.TableMeta, map[string]uint64, map[string]error) {
	metas, cur, errs := map[string][]*messages.TableMeta{}, map[string]uint64{}, map[string]error{}
	for _, n := range names {
		ms, c, err := tablets.Generations(ctx, meta, n)
		if err == nil && len(ms) == 0 {
			err = fmt.Errorf("no table %q", n)
		}
		metas[n], cur[n], errs[n] = ms, c, err
	}
	return metas, cur, errs
}

// printGenerations lists every stored generation of the named tables,
// newest first, marking the current one; a table that cannot be read
// gets one line with the error.
func printGenerations(ctx context.Context, meta tablets.GenerationStore, names []string, out io.Writer) error {
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tGENERATION\tCURRENT\tTABLETS\tROWS\tBYTES\tCREATED")
	all, curs, errs := readGenerations(ctx, meta, names)
	for _, n := range names {
		metas, cur, err := all[n], curs[n], errs[n]
		if err != nil {
			fmt.Fprintf(tw, "%s\t?\t?\t?\t?\t?\t%v\n", n, err)
			continue
		}
		for i := len(metas) - 1; i >= 0; i-- {
			t := metas[i]
			current := "-"
			if t.GetGeneration() == cur {
				current = "yes"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%s\n", n, t.GetGeneration(), current, len(t.GetTablets()), t.GetRows(), t.GetBytes(),
				time.UnixMilli(t.GetCreatedUnixMs()).Format(time.RFC3339))
		}
	}
	return tw.Flush()
}

// adminFlags are the flags of the commands that change a table's
// generations: the table and where its blocks are.
type adminFlags struct {
	table, blocksDir string
	generation       uint64
}

func (a *adminFlags) register(fs *flag.FlagSet, generationUsage string) {
	fs.StringVar(&a.table, "table", "", "table `NAME` (required)")
	fs.Uint64Var(&a.generation, "generation", 0, generationUsage)
	fs.StringVar(&a.blocksDir, "blocks-dir", "", "the shared `DIR` the table's blocks were ingested into with --blocks-dir (default: JetStream)")
}

// open validates the table name and connects with the admin certificate
// to the metadata and the block store; close ends the connection.
func (a *adminFlags) open(ctx context.Context, g *globals) (meta *bus.MetaStore, store tablets.BlockStore, conn *bus.Conn, err error) {
	if err := tablets.ValidateTableName(a.table); err != nil {
		return nil, nil, nil, usageError{fmt.Errorf("--table: %w", err)}
	}
	if conn, err = dialAs(ctx, g, "admin", 0); err != nil {
		return nil, nil, nil, err
	}
	if meta, err = conn.MetaStore(ctx); err == nil {
		if a.blocksDir != "" {
			store, err = tablets.NewDirStore(a.blocksDir)
		} else {
			store, err = conn.BlockStore(ctx)
		}
	}
	if err != nil {
		conn.Close()
		return nil, nil, nil, err
	}
	return meta, store, conn, nil
}

// runRollback is `scanctl rollback --table T --generation G`.
func runRollback(ctx context.Context, g *globals, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("rollback", flag.ContinueOnError)
	var a adminFlags
	a.register(fs, "the generation `G` to make current again (required; scanctl tables lists them)")
	pos, err := parse("rollback", g, fs, args, out)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usageError{fmt.Errorf("unexpected arguments %q", pos)}
	case a.table == "" || a.generation == 0:
		return usageError{errors.New("--table and --generation are required")}
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	meta, store, conn, err := a.open(ctx, g)
	if err != nil {
		return err
	}
	defer conn.Close()
	prev, err := tablets.Rollback(ctx, store, meta, a.table, a.generation)
	switch {
	case err != nil && bus.IsNotFound(err) && !errors.Is(err, tablets.ErrNotFound):
		return fmt.Errorf("%w (its blocks are gone: deleted by a newer ingest, or ingested with --blocks-dir: pass the same --blocks-dir)", err)
	case errors.Is(err, bus.ErrConflict):
		return fmt.Errorf("%w (another ingest or rollback changed the table meanwhile; see scanctl tables)", err)
	case err != nil:
		return err
	case prev == a.generation:
		fmt.Fprintf(out, "table %s: generation %d is current already\n", a.table, prev)
		return nil
	}
	if err := conn.PublishMetaChanged(&messages.TableMeta{Name: a.table, Generation: a.generation}); err != nil {
		fmt.Fprintln(errOut, "warning: meta-changed notice not published:", err)
	}
	fmt.Fprintf(out, "table %s: generation %d is current again (it was %d)\n", a.table, a.generation, prev)
	return nil
}

// runTablesDrop is `scanctl tables drop --table T [--generation G]`.
func runTablesDrop(ctx context.Context, g *globals, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tables drop", flag.ContinueOnError)
	var a adminFlags
	a.register(fs, "drop only this non-current generation `G` (default: the whole table, every generation)")
	pos, err := parse("tables drop", g, fs, args, out)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usageError{fmt.Errorf("unexpected arguments %q", pos)}
	case a.table == "":
		return usageError{errors.New("--table is required")}
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	meta, store, conn, err := a.open(ctx, g)
	if err != nil {
		return err
	}
	defer conn.Close()
	if a.generation != 0 {
		if err := tablets.DropGeneration(ctx, store, meta, a.table, a.generation); err != nil {
			return err
		}
		fmt.Fprintf(out, "table %s: dropped generation %d and its blocks\n", a.table, a.generation)
		return nil
	}
	gens, err := tablets.DropTable(ctx, store, meta, a.table)
	if err != nil {
		if len(gens) > 0 {
			return fmt.Errorf("%w (the table is gone; generations %v were deleted, the others remain: run the drop again)", err, gens)
		}
		return err
	}
	fmt.Fprintf(out, "dropped table %s: %d generations and their blocks\n", a.table, len(gens))
	return nil
}

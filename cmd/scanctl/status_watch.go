package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"
)

// watchFlags are scanctl status's --watch, --interval and --count.
type watchFlags struct {
	watch    bool
	interval time.Duration
	count    int
}

func (w *watchFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&w.watch, "watch", false, "redraw the status every --interval until Ctrl-C (clears the screen on a terminal)")
	fs.DurationVar(&w.interval, "interval", 2*time.Second, "with --watch: time between redraws")
	fs.IntVar(&w.count, "count", 0, "with --watch: stop after `N` redraws; 0 = until Ctrl-C")
}

// check refuses --interval or --count without --watch and bad values.
func (w *watchFlags) check(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case !w.watch && (set["interval"] || set["count"]):
		return usageError{fmt.Errorf("--interval and --count need --watch")}
	case w.interval <= 0:
		return usageError{fmt.Errorf("--interval %v must be > 0", w.interval)}
	case w.count < 0:
		return usageError{fmt.Errorf("--count %d must be >= 0", w.count)}
	}
	return nil
}

// clearScreen moves the cursor home and clears the screen (ANSI).
const clearScreen = "\x1b[H\x1b[2J"

// watchStatus connects once (within --timeout) and redraws the status
// every w.interval until ctx ends (Ctrl-C: exit 0) or w.count redraws are
// done. Each redraw has its own --timeout; one that fails shows its error
// in the frame and the watch goes on (a coordinator restarting is what an
// operator watches for). Each frame is written at once, after clear when
// out is a terminal, else after a blank line.
func watchStatus(ctx context.Context, g *globals, w watchFlags, out, errOut io.Writer, clear bool) error {
	cctx, cancel := context.WithTimeout(ctx, g.timeout)
	c, err := connect(cctx, g, errOut)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil // Ctrl-C while connecting
		}
		return err
	}
	defer c.Close()
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	var frame bytes.Buffer
	for n := 1; ; n++ {
		frame.Reset()
		if clear {
			frame.WriteString(clearScreen)
		} else if n > 1 {
			frame.WriteString("\n")
		}
		fmt.Fprintf(&frame, "scanctl status --watch: every %v, %s (Ctrl-C to stop)\n\n", w.interval, time.Now().Format("2006-01-02 15:04:05"))
		rctx, cancel := context.WithTimeout(ctx, g.timeout)
		err := printFullStatus(rctx, c, &frame, false)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			fmt.Fprintf(&frame, "status: %v\n", err)
		}
		if _, err := out.Write(frame.Bytes()); err != nil {
			return err
		}
		if w.count > 0 && n >= w.count {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// isTerminal reports whether out is a terminal.
func isTerminal(out io.Writer) bool {
	f, ok := out.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

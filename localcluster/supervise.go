package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/scanplane/scanplane/internal/backoff"
)

// ErrClosed: the cluster was closed while a process was being restarted.
var ErrClosed = errors.New("localcluster: cluster closed")

// SuperviseConfig says how Supervise restarts children.
type SuperviseConfig struct {
	// Out gets one line per death and per restart, each beginning with
	// the wall-clock time (15:04:05.000); nil = discard.
	Out io.Writer
	// MinBackoff is the wait before the first restart of a process that
	// died; default 1s.
	MinBackoff time.Duration
	// MaxBackoff caps the doubling wait of a process that keeps dying;
	// default 30s.
	MaxBackoff time.Duration
	// StableAfter: a process that ran this long before it died starts
	// again from MinBackoff; default 60s.
	StableAfter time.Duration
}

func (s *SuperviseConfig) defaults() {
	if s.Out == nil {
		s.Out = io.Discard
	}
	if s.MinBackoff == 0 {
		s.MinBackoff = time.Second
	}
	if s.MaxBackoff == 0 {
		s.MaxBackoff = 30 * time.Second
	}
	if s.StableAfter == 0 {
		s.StableAfter = time.Minute
	}
}

// Validate names the first bad field.
func (s SuperviseConfig) Validate() error {
	switch {
	case s.MinBackoff < 0:
		return fmt.Errorf("localcluster: MinBackoff %v must be >= 0", s.MinBackoff)
	case s.MaxBackoff < s.MinBackoff:
		return fmt.Errorf("localcluster: MaxBackoff %v must be >= MinBackoff %v", s.MaxBackoff, s.MinBackoff)
	case s.StableAfter < 0:
		return fmt.Errorf("localcluster: StableAfter %v must be >= 0", s.StableAfter)
	}
	return nil
}

// restartBackoff is the pure part of supervision: how long to wait before
// restarting a process, given how long it ran. Waits double (Min, 2·Min,
// … up to Max) while a process keeps dying young, and start again from
// Min once it ran StableAfter. Waits are exact (no jitter): a local
// cluster's few processes do not stampede a shared service, and the
// printed wait is the one taken.
type restartBackoff struct {
	b      *backoff.Backoff
	stable time.Duration
}

func newRestartBackoff(c SuperviseConfig) *restartBackoff {
	return &restartBackoff{b: backoff.New(backoff.Config{Initial: c.MinBackoff, Max: c.MaxBackoff}), stable: c.StableAfter}
}

// Wait returns the wait before the restart of a process that ran for ran,
// and advances the doubling.
func (b *restartBackoff) Wait(ran time.Duration) time.Duration {
	if ran >= b.stable {
		b.b.Reset()
	}
	return b.b.Next()
}

// Supervise restarts every child (coordinators and hosts) that dies, with
// exponential backoff, until ctx ends or the cluster is closed; it prints
// a line for each death and each restart. A coordinator comes back with
// the same name, ports and data directory, a host with the same flags.
// It returns when ctx ends or the cluster is closed, after every restart
// under way has finished.
func (c *Cluster) Supervise(ctx context.Context, cfg SuperviseConfig) error {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(cfg.Out, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	watch := func(name string, current func() *Proc, restart func(context.Context) error) {
		defer wg.Done()
		b := newRestartBackoff(cfg)
		for {
			p := current()
			started := time.Now()
			select {
			case <-ctx.Done():
				return
			case <-c.closedCh:
				return
			case <-p.Done():
			}
			if c.isClosed() || ctx.Err() != nil {
				return
			}
			for {
				w := b.Wait(time.Since(started))
				say("%s (pid %d) exited: %v; restarting in %v", name, p.PID(), p.exitErr(), w)
				if backoff.Sleep(ctx, w, nil) != nil {
					return // Supervise cancels ctx when the cluster closes
				}
				err := restart(ctx)
				if err == nil {
					np := current()
					say("%s restarted (pid %d)%s", name, np.PID(), c.metricsNote(np))
					break
				}
				if errors.Is(err, ErrClosed) || ctx.Err() != nil {
					return
				}
				if np := current(); np != p && np.Alive() {
					// running, but not yet seen ready by everyone
					say("%s restarted (pid %d) but is not ready yet: %v", name, np.PID(), err)
					break
				}
				if np := current(); np != p {
					// The new process started and is gone: say how it ended.
					say("%s: restart failed: %v; the new process (pid %d) exited: %v", name, err, np.PID(), np.exitErr())
					p = np
				} else {
					say("%s: restart failed: %v", name, err)
				}
				started = time.Now()
			}
		}
	}
	for i := range c.coords {
		wg.Add(1)
		go watch(CoordinatorName(i, len(c.coords)), func() *Proc { return c.CoordinatorProc(i) },
			func(ctx context.Context) error { return c.RestartCoordinator(ctx, i) })
	}
	for i := range c.hosts {
		wg.Add(1)
		go watch(HostName(i), func() *Proc { return c.Host(i) },
			func(ctx context.Context) error { return c.Restart(ctx, i) })
	}
	select {
	case <-ctx.Done():
	case <-c.closedCh:
	}
	cancel()
	wg.Wait()
	return nil
}

// metricsNote names a restarted process's metrics URL (a scanserver with
// --http gets a new ephemeral port); "" without one.
func (c *Cluster) metricsNote(p *Proc) string {
	if p.Ready.HTTP == "" {
		return ""
	}
	return ", metrics " + c.scheme + "://" + p.Ready.HTTP + "/metrics"
}

func (c *Cluster) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// exitErr is how the process ended (nil while it runs).
func (p *Proc) exitErr() error {
	select {
	case <-p.done:
		if p.err == nil {
			return errors.New("exit status 0")
		}
		return p.err
	default:
		return nil
	}
}

package natsserver

import (
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"golang.org/x/sys/unix"
)

// A JetStream server whose disk fills up (its MaxStore counted on space
// that something else, another node on the same disk or any other
// writer, took) does not recover by itself: a stream whose write failed
// with "no space left on device" keeps refusing writes (its file store
// keeps the error) and its publishers get no answer, and a clustered
// node shuts JetStream down, until the process is restarted. The
// embedded server instead notices the failure in its own log, says so in
// one line, and restarts JetStream in place (which reloads every stream
// from disk) once ServerConfig.RestartFree bytes are free in the store
// directory again; EmbeddedServer.OutOfSpace reports the state for
// /metrics.

// defaultRestartFree is ServerConfig.RestartFree's default.
const defaultRestartFree = 32 << 20

// outOfSpaceCheck is how often a server out of space looks at the free
// space of its store directory.
const outOfSpaceCheck = 500 * time.Millisecond

// isOutOfSpace reports whether a nats-server error line says that
// JetStream ran out of disk space.
func isOutOfSpace(line string) bool {
	return strings.Contains(line, "no space left on device") || strings.Contains(line, "out of resources, will be DISABLED") ||
		strings.Contains(line, "resources, will be DISABLED")
}

// spaceWatch restarts the JetStream of an embedded server that ran out
// of space once space is back.
type spaceWatch struct {
	srv      *server.Server
	opts     *server.Options // the options srv was started with
	cfg      ServerConfig
	log      *slog.Logger
	free     func(dir string) (int64, error)
	out      atomic.Bool   // out of space, not restarted yet
	restarts atomic.Uint64 // JetStream restarts after running out of space

	once sync.Once
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

func newSpaceWatch(cfg ServerConfig, log *slog.Logger) *spaceWatch {
	return &spaceWatch{cfg: cfg, log: log, free: freeSpace, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// freeSpace is the space left to unprivileged writers on dir's file
// system.
func freeSpace(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// start watches srv, started with opts, until close.
func (w *spaceWatch) start(srv *server.Server, opts *server.Options) {
	w.srv, w.opts = srv, opts
	go w.run()
}

// saw takes one error line of the server.
func (w *spaceWatch) saw(line string) {
	if w == nil || !isOutOfSpace(line) || w.out.Swap(true) {
		return
	}
	free, _ := w.free(w.cfg.StoreDir)
	w.log.Error("JetStream store out of disk space: writes (ingests, metadata) fail until space is freed; JetStream restarts by itself when enough is free, no restart needed",
		"store_dir", w.cfg.StoreDir, "free_bytes", free, "restart_at_free_bytes", w.cfg.RestartFree)
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *spaceWatch) run() {
	defer close(w.done)
	tick := time.NewTicker(outOfSpaceCheck)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-w.kick:
		case <-tick.C:
		}
		if !w.out.Load() {
			continue
		}
		free, err := w.free(w.cfg.StoreDir)
		if err != nil || free < w.cfg.RestartFree {
			continue
		}
		if err := w.restart(); err != nil {
			w.log.Warn("JetStream restart after running out of space failed; trying again", "err", err, "free_bytes", free)
			continue
		}
		w.out.Store(false)
		w.restarts.Add(1)
		w.log.Warn("JetStream restarted: the disk has space again", "store_dir", w.cfg.StoreDir, "free_bytes", free)
	}
}

// restart stops JetStream (if a stream's error has not already) and
// starts it again with the configuration nats-server starts it with.
func (w *spaceWatch) restart() error {
	if w.srv.JetStreamEnabled() {
		if err := w.srv.ShutdownJetStream(); err != nil {
			return err
		}
	}
	o := w.opts
	return w.srv.EnableJetStream(&server.JetStreamConfig{StoreDir: o.StoreDir, SyncInterval: o.SyncInterval,
		SyncAlways: o.SyncAlways, Strict: !o.NoJetStreamStrict, MaxMemory: o.JetStreamMaxMemory, MaxStore: o.JetStreamMaxStore,
		Domain: o.JetStreamDomain, CompressOK: true, UniqueTag: o.JetStreamUniqueTag})
}

func (w *spaceWatch) close() {
	if w == nil || w.srv == nil {
		return
	}
	w.once.Do(func() { close(w.stop); <-w.done })
}

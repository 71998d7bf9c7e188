package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ErrPortInUse is returned (wrapped) by StartServer when the client port is
// already taken, typically by another coordinator or nats-server.
var ErrPortInUse = errors.New("bus: port in use")

// ServerConfig configures the embedded NATS server.
type ServerConfig struct {
	// Host is the interface the client port listens on. Default "127.0.0.1".
	Host string
	// Port is the client port; -1 picks a free port (tests). Default 4222.
	Port int
	// StoreDir is the JetStream storage directory. Default "./data/nats".
	StoreDir string
	// MaxPayload is the largest message the server accepts, in bytes.
	// Default 8 MiB; at most 64 MiB.
	MaxPayload int32
	// MaxStore caps JetStream file storage in bytes (every stream of the
	// server together); a write beyond it is refused with "insufficient
	// resources" and JetStream stays up. 0 = nats-server's default, 75%
	// of the free disk space at start.
	MaxStore int64
	// Name is the server name shown in monitoring and logs; empty = the
	// server's generated id.
	Name string
	// ReadyTimeout bounds how long StartServer waits for the server to
	// accept connections. Default 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's log lines (notices at Debug level);
	// nil = discard.
	Logger *slog.Logger
}

// DefaultServerConfig returns the defaults documented on ServerConfig.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		Host:         "127.0.0.1",
		Port:         4222,
		StoreDir:     "./data/nats",
		MaxPayload:   8 << 20,
		ReadyTimeout: 10 * time.Second,
	}
}

// Validate reports the first invalid field by name.
func (c ServerConfig) Validate() error {
	switch {
	case c.Host == "":
		return errors.New("bus: ServerConfig.Host is empty")
	case c.Port != -1 && (c.Port < 1 || c.Port > 65535):
		return fmt.Errorf("bus: ServerConfig.Port %d: want 1..65535, or -1 for a random port", c.Port)
	case c.StoreDir == "":
		return errors.New("bus: ServerConfig.StoreDir is empty")
	case c.MaxPayload <= 0 || c.MaxPayload > 64<<20:
		return fmt.Errorf("bus: ServerConfig.MaxPayload %d: want 1..%d bytes", c.MaxPayload, 64<<20)
	case c.MaxStore < 0:
		return fmt.Errorf("bus: ServerConfig.MaxStore %d is negative (0 = the server's default)", c.MaxStore)
	case c.ReadyTimeout < 0:
		return fmt.Errorf("bus: ServerConfig.ReadyTimeout %s is negative", c.ReadyTimeout)
	}
	return nil
}

// EmbeddedServer is a NATS server with JetStream running in this process.
type EmbeddedServer struct {
	srv       *server.Server
	closeOnce sync.Once
}

// StartServer starts a NATS server with JetStream and waits until it accepts
// connections. A taken port gives an error wrapping ErrPortInUse; a server
// not ready within ReadyTimeout gives an error and is shut down.
func StartServer(cfg ServerConfig) (*EmbeddedServer, error) {
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = DefaultServerConfig().ReadyTimeout
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		Host:       cfg.Host,
		Port:       cfg.Port,
		MaxPayload: cfg.MaxPayload,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
	}
	if cfg.MaxStore > 0 {
		opts.JetStreamMaxStore = cfg.MaxStore
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("bus: embedded nats server: %w", err)
	}
	lg := &serverLogger{log: cfg.Logger, fatal: make(chan error, 1)}
	if lg.log == nil {
		lg.log = slog.New(slog.DiscardHandler)
	}
	srv.SetLoggerV2(lg, false, false, false)
	srv.Start()

	hp := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
	if cfg.Port == -1 {
		hp = net.JoinHostPort(cfg.Host, "random")
	}
	deadline := time.Now().Add(cfg.ReadyTimeout)
	for {
		select {
		case ferr := <-lg.fatal:
			srv.Shutdown()
			srv.WaitForShutdown()
			if errors.Is(ferr, syscall.EADDRINUSE) {
				return nil, fmt.Errorf("%w: cannot listen on %s (another nats-server or coordinator running?): %w", ErrPortInUse, hp, ferr)
			}
			return nil, fmt.Errorf("bus: embedded nats server on %s: %w", hp, ferr)
		default:
		}
		if srv.ReadyForConnections(50 * time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			srv.Shutdown()
			srv.WaitForShutdown()
			return nil, fmt.Errorf("bus: embedded nats server on %s not ready after %s", hp, cfg.ReadyTimeout)
		}
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("bus: embedded nats server on %s: JetStream did not start (store dir %q)", hp, cfg.StoreDir)
	}
	return &EmbeddedServer{srv: srv}, nil
}

// ClientURL is the nats:// URL clients use to reach this server (a wildcard
// listen address is reported as 127.0.0.1).
func (s *EmbeddedServer) ClientURL() string {
	addr, ok := s.srv.Addr().(*net.TCPAddr)
	if !ok || addr == nil {
		return s.srv.ClientURL()
	}
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "nats://" + net.JoinHostPort(host, strconv.Itoa(addr.Port))
}

// Server exposes the underlying nats-server (monitoring, tests).
func (s *EmbeddedServer) Server() *server.Server { return s.srv }

// Close shuts the server down and waits until it has stopped. Safe to call
// more than once.
func (s *EmbeddedServer) Close() {
	s.closeOnce.Do(func() {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	})
}

// serverLogger routes nats-server logs to slog and captures fatal errors
// (which nats-server otherwise turns into os.Exit with its own logger).
type serverLogger struct {
	log   *slog.Logger
	fatal chan error
}

func (l *serverLogger) Noticef(format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "component", "nats-server")
}

func (l *serverLogger) Warnf(format string, v ...any) {
	l.log.Warn(fmt.Sprintf(format, v...), "component", "nats-server")
}

func (l *serverLogger) Errorf(format string, v ...any) {
	l.log.Error(fmt.Sprintf(format, v...), "component", "nats-server")
}

func (l *serverLogger) Debugf(format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "component", "nats-server")
}

func (l *serverLogger) Tracef(format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "component", "nats-server")
}

// Fatalf keeps the first error argument (so errors.Is works on it) and
// hands it to StartServer instead of exiting.
func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg, "component", "nats-server")
	err := errors.New(msg)
	for _, a := range v {
		if e, ok := a.(error); ok {
			err = e
			break
		}
	}
	select {
	case l.fatal <- err:
	default:
	}
}

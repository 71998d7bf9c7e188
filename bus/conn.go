package bus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scanplane/scanplane/internal/netlimit"
)

// ErrTLSRequired is wrapped by Connect's error when the server accepts
// only TLS connections and Config.TLS is nil (a cluster secured with a
// secrets directory, docs/security.md).
var ErrTLSRequired = errors.New("bus: the NATS server requires TLS and a client certificate")

// Config configures a connection to NATS and the JetStream buckets used.
type Config struct {
	// URL is the server to connect to; a comma-separated list names the
	// members of a cluster. Default "nats://127.0.0.1:4222".
	URL string
	// Name is the client connection name shown by the server (e.g.
	// "scanserver host-a"). Default "scanplane".
	Name string
	// ConnectTimeout bounds the initial connection attempt to each server.
	// Default 5s.
	ConnectTimeout time.Duration
	// OpTimeout bounds each store operation (one block get, put or delete;
	// one metadata read or write); a store that does not answer within it
	// gives an error wrapping ErrUnavailable, not the caller's deadline.
	// Default 10s.
	OpTimeout time.Duration
	// ReadTry bounds the first try of a block or metadata read; a try
	// that got no answer is sent again with twice the bound, and so on,
	// within OpTimeout. A JetStream read request can vanish (sent to a replica
	// whose node just stopped, or while the replicas elect a leader) and
	// would otherwise hold the read for all of OpTimeout. Reads are
	// idempotent: a late answer to an earlier try is dropped. 0 = one try
	// of OpTimeout. Default 1s.
	ReadTry time.Duration
	// NodeCheck is how often the connection asks its NATS node for a
	// PONG (answered within a second, see checkNode), whether or not it
	// reads: a node that is paused, hung or cut off without closing its
	// connections (it sends nothing while the PONG is due) is left for
	// another node of the cluster within about NodeCheck plus a second,
	// where nats.go's own pings take PingsOut+1 intervals of
	// PingInterval, and a connection that only publishes (heartbeats)
	// never notices otherwise. A connection that knows no
	// other node stays. 0 = the node is checked only after a read got no
	// answer. Default 1s.
	NodeCheck time.Duration
	// BlocksBucket is the JetStream KV bucket holding tablet-file blocks.
	// Default "scanplane-blocks".
	BlocksBucket string
	// MetaBucket is the JetStream KV bucket holding table metadata and
	// cluster info. Default "scanplane-meta".
	MetaBucket string
	// Replicas is the JetStream replication factor of the buckets (0..5):
	// how many NATS nodes keep a copy of every block and metadata entry. A
	// bucket with R replicas survives the loss of (R-1)/2 nodes without
	// losing writes or data, so 3 on a cluster of 3 or more nodes (one
	// node may fail), 5 to survive two; 1 on a single server. It cannot
	// exceed the number of nodes, and creating a bucket needs that many
	// nodes up. A missing bucket is created with it. An existing bucket
	// with fewer replicas is raised to it (one attempt; on failure, e.g.
	// too few nodes up, a warning is logged and the bucket used as it is);
	// a bucket is never lowered (do that by hand: nats stream edit).
	// 0 = auto: the replica count of the other scanplane bucket if that
	// one exists (the coordinator creates the metadata bucket with its
	// --replicas at start, so blocks follow it), else 1. Default 0.
	Replicas int
	// BucketWait bounds how long opening a bucket (BlockStore, MetaStore)
	// retries while JetStream cannot create or bind it yet: no metadata
	// leader, too few nodes up for Replicas, no answer. The caller's
	// context bounds it too. 0 = one attempt, no retry. Default 1m.
	BucketWait time.Duration
	// ReadOnly connections open a bucket without the other bucket's
	// stream info and never raise an existing bucket's replicas; a
	// missing bucket is created with Replicas (1 when 0). The client role
	// may not read the blocks bucket's stream info (UserPermissions), nor
	// create a bucket: on a secured cluster the coordinator creates both
	// at start. Default false.
	ReadOnly bool
	// TLS, when set, makes the connection TLS only: it presents
	// TLS.Certificates (the server maps the certificate to a user and
	// its permissions, see ServerConfig.Users) and verifies the server
	// against TLS.RootCAs and the host of the URL. The connection's
	// reply inboxes get the prefix of the first certificate's subject
	// (InboxPrefix), the only inboxes a restricted user may subscribe
	// to. cliutil.RemoteTLS builds it from a secrets directory's role
	// certificate. nil = plain text, inboxes under nats.go's _INBOX.
	TLS *tls.Config
	// Logger receives connection events and decode failures; nil = discard.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		URL:            "nats://127.0.0.1:4222",
		Name:           "scanplane",
		ConnectTimeout: 5 * time.Second,
		OpTimeout:      10 * time.Second,
		ReadTry:        time.Second,
		NodeCheck:      time.Second,
		BlocksBucket:   "scanplane-blocks",
		MetaBucket:     "scanplane-meta",
		BucketWait:     time.Minute,
	}
}

// Validate reports the first invalid field by name.
func (c Config) Validate() error {
	switch {
	case strings.TrimSpace(c.URL) == "":
		return errors.New("bus: Config.URL is empty")
	case c.ConnectTimeout <= 0:
		return fmt.Errorf("bus: Config.ConnectTimeout %s: must be positive", c.ConnectTimeout)
	case c.OpTimeout <= 0:
		return fmt.Errorf("bus: Config.OpTimeout %s: must be positive", c.OpTimeout)
	case c.ReadTry < 0:
		return fmt.Errorf("bus: Config.ReadTry %s: must be >= 0", c.ReadTry)
	case c.NodeCheck < 0:
		return fmt.Errorf("bus: Config.NodeCheck %s: must be >= 0", c.NodeCheck)
	case !validBucket(c.BlocksBucket):
		return fmt.Errorf("bus: Config.BlocksBucket %q: want 1+ characters of [A-Za-z0-9_-]", c.BlocksBucket)
	case !validBucket(c.MetaBucket):
		return fmt.Errorf("bus: Config.MetaBucket %q: want 1+ characters of [A-Za-z0-9_-]", c.MetaBucket)
	case c.BlocksBucket == c.MetaBucket:
		return fmt.Errorf("bus: Config.BlocksBucket and Config.MetaBucket are both %q", c.MetaBucket)
	case c.Replicas < 0 || c.Replicas > 5:
		return fmt.Errorf("bus: Config.Replicas %d: want 1..5, or 0 for auto", c.Replicas)
	case c.BucketWait < 0:
		return fmt.Errorf("bus: Config.BucketWait %s is negative", c.BucketWait)
	}
	for _, u := range strings.Split(c.URL, ",") {
		if strings.TrimSpace(u) == "" {
			return fmt.Errorf("bus: Config.URL %q has an empty entry", c.URL)
		}
	}
	return nil
}

func validBucket(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !isTokenRune(r) {
			return false
		}
	}
	return true
}

// PingInterval and PingsOut: how a connection to a silently dead NATS node
// is found stale (see Connect); the embedded server pings its clients and
// routes with the same.
const (
	PingInterval = 2 * time.Second
	PingsOut     = 3
)

// Conn is a NATS connection with JetStream. It reconnects forever after
// the initial connection succeeds. Safe for concurrent use.
// warnBurst lines per warnEvery: how many dropped messages a connection
// logs; the rest are counted and summed up in one line.
const (
	warnBurst = 10
	warnEvery = 10 * time.Second
)

type Conn struct {
	cfg          Config
	log          *slog.Logger
	nc           *nats.Conn
	js           jetstream.JetStream
	decodeErrors atomic.Uint64
	mismatched   atomic.Uint64
	// replayed counts watch deliveries refused as older than an entry
	// already applied (revisions).
	replayed atomic.Uint64
	// Discovery requests not answered (ServeDiscovery).
	refusedDiscoveries, limitedDiscoveries atomic.Uint64
	// warnings throttles the lines logged for dropped messages (bad
	// payloads, mismatched signals), which any sender can cause.
	warnings *netlimit.Throttle

	mu          sync.Mutex
	reconnected chan struct{} // closed (and replaced) on every reconnect
	closed      chan struct{} // closed by Close
	closeOnce   sync.Once
	// nodeCheck is the running check of the connection's node
	// (checkNode); nil when none runs. Guarded by mu.
	nodeCheck *nodeCheck
	// nodesLeft counts the nodes left for not answering a check.
	nodesLeft atomic.Uint64
	// watching is the node watch (watchNode), waited for by Close.
	watching sync.WaitGroup
}

// Connect dials NATS (failing if no server answers within ConnectTimeout or
// before ctx ends) and sets up JetStream.
func Connect(ctx context.Context, cfg Config) (*Conn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bus: connect %s: %w", cfg.URL, err)
	}
	timeout := cfg.ConnectTimeout
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < timeout {
			timeout = max(left, time.Millisecond)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "bus")
	name := cfg.Name
	if name == "" {
		name = "scanplane"
	}
	c := &Conn{cfg: cfg, log: log, reconnected: make(chan struct{}), closed: make(chan struct{})}
	c.warnings = netlimit.NewThrottle(warnBurst, warnEvery, func(held int, every time.Duration) {
		log.Warn("dropped messages not logged", "lines", held, "within", every)
	})
	opts := []nats.Option{
		nats.Name(name),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// A NATS node that vanishes without closing its connections (a
		// machine powered off or cut from the network: no FIN, no RST)
		// is noticed by pings only; with nats.go's default (every 2 min,
		// 2 outstanding) a scan server's heartbeats, a coordinator's lease
		// watch and a client's coordinator list would stay on the dead
		// node for minutes. Stale after PingsOut+1 intervals without a
		// PONG: 6-8 s.
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(PingsOut),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted(), "server", nc.ConnectedServerName())
			c.signalReconnect()
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Warn("nats async error", "subject", subj, "err", err)
		}),
	}
	if cfg.TLS != nil {
		opts = append(opts, nats.Secure(cfg.TLS.Clone()))
		subject, err := CertSubject(cfg.TLS)
		if err != nil {
			return nil, err
		}
		if subject != "" {
			opts = append(opts, nats.CustomInboxPrefix(InboxPrefix(subject)))
		}
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil && cfg.TLS == nil && (errors.Is(err, nats.ErrSecureConnRequired) || strings.Contains(err.Error(), "tls")) {
		// nats.go upgrades a plain connection to TLS when the server
		// requires it, and fails on the server's certificate.
		return nil, fmt.Errorf("bus: connect %s: %w (%w)", cfg.URL, ErrTLSRequired, err)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: connect %s: %w", cfg.URL, err)
	}
	log.Info("nats connected", "url", nc.ConnectedUrlRedacted(), "server", nc.ConnectedServerName())
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	c.nc, c.js = nc, js
	if cfg.NodeCheck > 0 {
		c.watching.Add(1)
		go c.watchNode(cfg.NodeCheck)
	}
	return c, nil
}

// CertSubject is the subject (pkix.Name.String) of the first certificate
// of cfg, the one the server maps to a user (CertUser.Subject of
// internal/natsserver); "" when cfg has none (it
// then presents no certificate, or one from GetClientCertificate, and
// keeps nats.go's default inboxes).
func CertSubject(cfg *tls.Config) (string, error) {
	if len(cfg.Certificates) == 0 || len(cfg.Certificates[0].Certificate) == 0 {
		return "", nil
	}
	leaf := cfg.Certificates[0].Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cfg.Certificates[0].Certificate[0]); err != nil {
			return "", fmt.Errorf("bus: Config.TLS: the client certificate does not parse: %w", err)
		}
	}
	return leaf.Subject.String(), nil
}

// signalReconnect wakes everyone waiting on reconnectSignal.
func (c *Conn) signalReconnect() {
	c.mu.Lock()
	close(c.reconnected)
	c.reconnected = make(chan struct{})
	c.mu.Unlock()
}

// reconnectSignal returns a channel closed at the next reconnect.
func (c *Conn) reconnectSignal() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reconnected
}

// NATS returns the underlying connection.
func (c *Conn) NATS() *nats.Conn { return c.nc }

// JetStream returns the JetStream context of this connection.
func (c *Conn) JetStream() jetstream.JetStream { return c.js }

// Close flushes what was published and closes the connection; its
// subscriptions and watches end. Safe to call more than once.
func (c *Conn) Close() {
	c.closeOnce.Do(func() { close(c.closed) })
	c.nc.Close()
	c.watching.Wait()
	c.warnings.Stop()
}

// ReplayedEntries counts bucket entries a watch refused because it had
// applied a newer revision of the same key.
func (c *Conn) ReplayedEntries() uint64 { return c.replayed.Load() }

// DecodeErrors counts received payloads that failed to decode.
func (c *Conn) DecodeErrors() uint64 { return c.decodeErrors.Load() }

// MismatchedSignals counts received heartbeats and busy and timeout
// signals dropped because their payload's host or server is not the one
// their subject names (CheckSignalSubject).
func (c *Conn) MismatchedSignals() uint64 { return c.mismatched.Load() }

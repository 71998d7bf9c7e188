package client

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	"github.com/scanplane/scanplane/wire"
)

// Config configures a Client.
type Config struct {
	// NATSURL: the cluster's NATS, a comma-separated list of its nodes'
	// URLs (the client connects to one that is up); default
	// DefaultNATSURLs.
	NATSURL string
	// Coordinators: the coordinators' actor addresses (host:port) in order
	// of preference. A scan request whose coordinator is lost before any
	// data arrived goes to the next one that is up, or to the same one once
	// it is back. Empty = discover them from the leases they keep on NATS
	// (bus.LeaseStore) and follow those as coordinators come and go; the
	// client then prefers the coordinator whose embedded NATS server it is
	// connected to, else one picked by rendezvous hashing of its client id
	// (spreading clients over coordinators).
	Coordinators []string
	// Coordinator: one coordinator address, shorthand for a one-element
	// Coordinators (set one of the two, not both).
	Coordinator string
	// CoordinatorWait: how long a scan that lost its coordinator waits for
	// one to be up (again) before it fails with ErrNoCoordinator; default 3s.
	CoordinatorWait time.Duration
	// MaxRequestTime: the deadline a scan request carries when the scan's
	// context has none, so every flow in the coordinator ends; default 1h.
	MaxRequestTime time.Duration
	// Listen: the actor path's own endpoint (New, Dial), which the scan
	// servers dial to stream rows; default 127.0.0.1:0 (ephemeral).
	// NewAPI ignores it: an API opens no listening socket.
	Listen string
	// Advertise: host:port the scan servers use to reach the actor
	// path's endpoint; default the listen address. Ignored by NewAPI.
	Advertise string
	// BatchRows asks servers for at most this many rows per batch; 0 =
	// the server's default.
	BatchRows uint32
	// BatchBytes asks servers for batches of this many bytes of rows
	// (wire.MinBatchBytes..wire.MaxBatchBytes); 0 = the server's default
	// (wire.DefaultBatchBytes).
	BatchBytes uint32
	// Window: unacknowledged batches in flight per tablet stream,
	// 1..wire.MaxWindow (times the batch size at most
	// wire.MaxInFlightBytes); default DefaultWindow. The client
	// acknowledges one batch in a quarter of it (tabletstream.AckEvery).
	Window uint32
	// StallTimeout: a stream that delivered data and then nothing for this
	// long is resumed on another server; default 2s.
	StallTimeout time.Duration
	// IdleTimeout: a tablet request that has had no data and heard
	// nothing (no rows, no progress: a coordinator holding a request says
	// what it waits for every second) for this long is sent to another
	// coordinator; when none is left the scan fails with ErrNoCoordinator
	// after CoordinatorWait. Default 2s: twice the coordinator's progress
	// period (scanflow.FlowConfig.ProgressEvery).
	IdleTimeout time.Duration
	// MaxResumes per tablet before giving up; default 10.
	MaxResumes int
	// RequestTimeout bounds each status, route and reload call (the call's
	// context may end it sooner); default 5s.
	RequestTimeout time.Duration
	// RouterOnly: send every scan request through the coordinator's
	// router. Default false: once a tablet actor told its PID (it does
	// when a request asks, ScanRequest.want_tablet_actor), the tablet's
	// next requests and ScanDones go straight to it.
	RouterOnly bool
	// TLS, when set, secures the client's actor remote with mutual TLS,
	// as the cluster's (remoting.SystemConfig.TLS): the client dials the
	// coordinators with it (presenting its Certificates, verifying theirs
	// against RootCAs) and its own endpoint, to which the scan servers
	// stream rows, accepts only peers whose certificate ClientCAs
	// verifies (ClientAuth must be tls.RequireAndVerifyClientCert).
	// TLSFromSecrets builds it from a secrets directory's client
	// certificate. The client's NATS connection uses it too (TLS,
	// presenting the certificate). nil = plain text.
	TLS *tls.Config
	// API: coordinators' HTTP addresses (host:port, their --http) in
	// order of preference, for NewAPI, which scans through the public
	// API instead of the actor remote and adds the other live
	// coordinators' addresses it learns from them; empty =
	// DefaultAPIAddrs (`scanctl up`: 127.0.0.1:8091, :8093, :8095).
	// Ignored by New and Dial.
	API []string
	// APIToken: a bearer token (a secured cluster's http.token) that
	// NewAPI sends instead of a client certificate; it needs TLS (with
	// the cluster CA: TLSFromCA). Empty = none. Ignored by New and Dial.
	APIToken string
	// APIReadMeta: NewAPI reads each scanned table's metadata (its block
	// roots) itself from the cluster's NATS (NATSURL, with TLS) and checks
	// the rows' proofs against it, so a lying coordinator is caught.
	// false (default): it checks them against the metadata the
	// coordinator sends with them, which catches damage between the
	// coordinator and the client but not a lying coordinator; NewAPI
	// then needs no NATS. Ignored by New and Dial.
	APIReadMeta bool
	// ProvenLeaves: how many leaf hashes of proven row chunks (16 rows
	// each) the client keeps, by block root, so that a scan of rows
	// proven before needs only its rows' hashes, not the proof's inner
	// hashes (rows that differ are checked in full as always; about 40
	// bytes each). 0 = DefaultProvenLeaves; negative = none kept.
	ProvenLeaves int
	Logger       *slog.Logger
}

// DefaultProvenLeaves is Config.ProvenLeaves's default: about 2 MiB,
// the leaves of about 100 MB of rows of 100 bytes.
const DefaultProvenLeaves = 1 << 16

// DefaultNATSURLs are the NATS nodes of the local cluster `scanctl up`
// starts with its default ports (one per coordinator, three): scanctl's
// --nats default and Config.NATSURL's.
const DefaultNATSURLs = "nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224"

// DefaultWindow is Config.Window's default: 8 batches of up to 256 KiB
// (the servers' default batch size) in flight per tablet stream, acknowledged
// two at a time (MEASUREMENTS.md, "Whole-table scans: flow control and
// the 4 MiB message limit").
const DefaultWindow = 8

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{NATSURL: DefaultNATSURLs, Listen: "127.0.0.1:0", Window: DefaultWindow, StallTimeout: 2 * time.Second,
		IdleTimeout: 2 * time.Second, MaxResumes: 10, RequestTimeout: 5 * time.Second,
		CoordinatorWait: 3 * time.Second, MaxRequestTime: time.Hour}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.NATSURL == "":
		return errors.New("client: NATSURL is empty")
	case c.Listen == "":
		return errors.New("client: Listen is empty")
	case c.Window < 1 || c.Window > wire.MaxWindow:
		return fmt.Errorf("client: Window %d must be in [1, %d]", c.Window, wire.MaxWindow)
	case c.BatchRows > wire.MaxBatchRows:
		return fmt.Errorf("client: BatchRows %d must be at most %d", c.BatchRows, wire.MaxBatchRows)
	case c.BatchBytes != 0 && (c.BatchBytes < wire.MinBatchBytes || c.BatchBytes > wire.MaxBatchBytes):
		return fmt.Errorf("client: BatchBytes %d must be 0 or in [%d, %d]", c.BatchBytes, wire.MinBatchBytes, wire.MaxBatchBytes)
	case int64(c.Window)*int64(cmp.Or(c.BatchBytes, wire.DefaultBatchBytes)) > wire.MaxInFlightBytes:
		return fmt.Errorf("client: Window %d × BatchBytes %d must be at most %d MiB", c.Window, cmp.Or(c.BatchBytes, wire.DefaultBatchBytes), wire.MaxInFlightBytes>>20)
	case c.StallTimeout <= 0:
		return errors.New("client: StallTimeout must be > 0")
	case c.IdleTimeout <= 0:
		return errors.New("client: IdleTimeout must be > 0")
	case c.MaxResumes < 0:
		return errors.New("client: MaxResumes must be >= 0")
	case c.RequestTimeout <= 0:
		return errors.New("client: RequestTimeout must be > 0")
	case c.CoordinatorWait <= 0:
		return errors.New("client: CoordinatorWait must be > 0")
	case c.MaxRequestTime <= 0:
		return errors.New("client: MaxRequestTime must be > 0")
	case c.Coordinator != "" && len(c.Coordinators) > 0:
		return errors.New("client: set Coordinators or Coordinator, not both")
	}
	if len(c.API) == 0 {
		if err := c.checkRemoteTLS(); err != nil {
			return err
		}
	}
	for i, a := range c.API {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("client: API[%d] %q: %v (want the coordinator's HTTP address, host:port)", i, a, err)
		}
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("client: Listen %q: %v", c.Listen, err)
	}
	if c.Coordinator != "" {
		if _, _, err := net.SplitHostPort(c.Coordinator); err != nil {
			return fmt.Errorf("client: Coordinator %q: %v", c.Coordinator, err)
		}
	}
	for i, a := range c.Coordinators {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("client: Coordinators[%d] %q: %v", i, a, err)
		}
	}
	return nil
}

// checkRemoteTLS checks TLS for the actor remote, whose endpoint the
// scan servers dial: a certificate, and peers verified against the CA.
// A Config for NewAPI alone (API set) may hold TLS without a
// certificate (a bearer token authenticates), so Validate checks this
// only without API; New always does.
func (c Config) checkRemoteTLS() error {
	if c.TLS == nil {
		return nil
	}
	switch {
	case len(c.TLS.Certificates) == 0 && c.TLS.GetClientCertificate == nil:
		return errors.New("client: TLS has no certificate (the cluster requires one)")
	case c.TLS.ClientAuth != tls.RequireAndVerifyClientCert || c.TLS.ClientCAs == nil:
		return errors.New("client: TLS must require and verify peer certificates (ClientAuth tls.RequireAndVerifyClientCert, ClientCAs = the cluster CA)")
	}
	return nil
}

// coordinators is the configured list (Coordinator as a one-element list).
func (c Config) coordinators() []string {
	if c.Coordinator != "" {
		return []string{c.Coordinator}
	}
	return slices.Clone(c.Coordinators)
}

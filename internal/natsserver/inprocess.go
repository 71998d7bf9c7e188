package natsserver

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/scanplane/scanplane/bus"
)

// connectInProcess opens a connection to srv inside this process, named
// name. A secured server (cfg.TLS) is dialled with its own certificate,
// which must map to a coordinator or admin user (ServerConfig.Validate
// checks that when there are Users). It reconnects for as long as the
// server runs.
func connectInProcess(srv *server.Server, cfg ServerConfig, name string, timeout time.Duration) (*nats.Conn, error) {
	opts := []nats.Option{nats.InProcessServer(srv), nats.Name(name), nats.Timeout(timeout), nats.MaxReconnects(-1)}
	if cfg.TLS != nil {
		own := cfg.TLS.Certificates[0].Certificate[0]
		tc := &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: cfg.TLS.Certificates[:1],
			// The connection is a pipe inside this process to srv, whose
			// certificate is cfg.TLS's own: that, not a name, is what to
			// check.
			InsecureSkipVerify: true,
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				if len(raw) == 0 || string(raw[0]) != string(own) {
					return errors.New("natsserver: the in-process server presented another certificate")
				}
				return nil
			},
		}
		subject, err := bus.CertSubject(cfg.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(tc), nats.CustomInboxPrefix(bus.InboxPrefix(subject)))
		name = fmt.Sprintf("%s (%s)", name, subject)
	}
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("connect in-process as %s: %w", name, err)
	}
	return nc, nil
}

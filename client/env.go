package client

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
)

// Environment variables ConfigFromEnv reads.
const (
	// NATSEnv names the cluster's NATS: a comma-separated list of
	// nats:// (or tls://) URLs, as Config.NATSURL.
	NATSEnv = "SCANPLANE_NATS"
	// SecretsEnv names a secrets directory holding ca.crt, client.crt
	// and client.key (TLSFromSecrets), as scanctl's --secrets.
	SecretsEnv = "SCANPLANE_SECRETS"
	// APIEnv names the coordinators' HTTP addresses for NewAPI: a
	// comma-separated list of host:port, as Config.API.
	APIEnv = "SCANPLANE_API"
)

// ConfigFromEnv returns DefaultConfig with what the environment sets:
// NATSURL from $SCANPLANE_NATS (unset or empty: DefaultNATSURLs, the
// local cluster of `scanctl up`) and TLS from the secrets directory
// $SCANPLANE_SECRETS (unset or empty: plain text) and API from
// $SCANPLANE_API (unset or empty: none, which NewAPI takes as
// DefaultAPIAddrs). A bad value is an error naming the variable and the
// value.
func ConfigFromEnv() (Config, error) {
	cfg := DefaultConfig()
	if v := os.Getenv(NATSEnv); v != "" {
		if err := checkNATSURLs(v); err != nil {
			return Config{}, fmt.Errorf("client: %s=%q: %w", NATSEnv, v, err)
		}
		cfg.NATSURL = v
	}
	if dir := os.Getenv(SecretsEnv); dir != "" {
		tlsCfg, err := TLSFromSecrets(dir)
		if err != nil {
			return Config{}, fmt.Errorf("client: %s=%q: %w", SecretsEnv, dir, err)
		}
		cfg.TLS = tlsCfg
	}
	if v := os.Getenv(APIEnv); v != "" {
		api, err := ParseAPIAddrs(v)
		if err != nil {
			return Config{}, fmt.Errorf("client: %s=%q: %w", APIEnv, v, err)
		}
		cfg.API = api
	}
	return cfg, nil
}

// ParseAPIAddrs parses a comma-separated list of coordinators' HTTP
// addresses (host:port, as $SCANPLANE_API and Config.API take them),
// trimming the spaces around each; an entry that is not host:port is an
// error naming it.
func ParseAPIAddrs(list string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("%q is not host:port (a coordinator's HTTP address)", a)
		}
		out = append(out, a)
	}
	return out, nil
}

// checkNATSURLs checks a comma-separated list of NATS URLs: each
// nats://, tls://, ws:// or wss:// with a host and, if given, a port.
func checkNATSURLs(list string) error {
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || u.Hostname() == "" {
			return fmt.Errorf("%q is not a NATS URL (want nats://HOST:PORT, comma separated)", s)
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("%q: scheme %q, want nats, tls, ws or wss", s, u.Scheme)
		}
		if p := u.Port(); p != "" {
			if _, err := net.LookupPort("tcp", p); err != nil {
				return fmt.Errorf("%q: port %q: %v", s, p, err)
			}
		}
	}
	return nil
}

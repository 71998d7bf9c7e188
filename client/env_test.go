package client

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/scanplane/scanplane/internal/secrets"
)

// TestConfigFromEnv: the defaults without the variables; SCANPLANE_NATS
// and SCANPLANE_SECRETS set NATSURL and TLS; a bad value is an error
// naming the variable and the value.
func TestConfigFromEnv(t *testing.T) {
	t.Setenv(NATSEnv, "")
	t.Setenv(SecretsEnv, "")
	cfg, err := ConfigFromEnv()
	if err != nil || cfg.NATSURL != DefaultNATSURLs || cfg.TLS != nil || cfg.Validate() != nil {
		t.Fatalf("no variables: NATSURL %q, TLS %v, %v; want the defaults", cfg.NATSURL, cfg.TLS, err)
	}

	dir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(dir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(NATSEnv, "nats://node1:4222, tls://10.0.0.7:4222")
	t.Setenv(SecretsEnv, dir)
	cfg, err = ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NATSURL != "nats://node1:4222, tls://10.0.0.7:4222" || cfg.TLS == nil || len(cfg.TLS.Certificates) != 1 || cfg.Validate() != nil {
		t.Fatalf("NATSURL %q, TLS %v, Validate %v", cfg.NATSURL, cfg.TLS, cfg.Validate())
	}

	for _, c := range []struct{ nats, secrets, want string }{
		{"127.0.0.1:4222", "", `SCANPLANE_NATS="127.0.0.1:4222": "127.0.0.1:4222"`},
		{"http://h:4222", "", `scheme "http"`},
		{"nats://h:4222,", "", `"" is not a NATS URL`},
		{"nats://h:port", "", `SCANPLANE_NATS="nats://h:port"`},
		{"nats://h:99999", "", `port "99999"`},
		{"", filepath.Join(dir, "nope"), `SCANPLANE_SECRETS="` + filepath.Join(dir, "nope") + `"`},
	} {
		t.Setenv(NATSEnv, c.nats)
		t.Setenv(SecretsEnv, c.secrets)
		_, err := ConfigFromEnv()
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("SCANPLANE_NATS=%q SCANPLANE_SECRETS=%q: %v; want one line with %q", c.nats, c.secrets, err, c.want)
		}
	}
}

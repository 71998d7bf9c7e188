package natsserver

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startServer runs an embedded server on a random port with its own store.
func startServer(tb testing.TB) *EmbeddedServer {
	tb.Helper()
	cfg := DefaultServerConfig()
	cfg.Port = -1
	cfg.StoreDir = tb.TempDir()
	srv, err := StartServer(cfg)
	if err != nil {
		tb.Fatalf("StartServer: %v", err)
	}
	tb.Cleanup(srv.Close)
	return srv
}

func TestServerConfigValidate(t *testing.T) {
	if err := DefaultServerConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	local := DefaultServerConfig()
	local.ClusterListen, local.Routes = "127.0.0.1:6222", []string{"nats-route://127.0.0.1:6222"}
	local.LocalDirectGets = []string{"KV_scanplane-blocks", "KV_b"}
	if err := local.Validate(); err != nil {
		t.Fatalf("clustered config keeping direct gets local: %v", err)
	}
	for _, tc := range []struct {
		field string
		mod   func(*ServerConfig)
	}{
		{"Host", func(c *ServerConfig) { c.Host = "" }},
		{"Port", func(c *ServerConfig) { c.Port = 0 }},
		{"Port", func(c *ServerConfig) { c.Port = 70000 }},
		{"StoreDir", func(c *ServerConfig) { c.StoreDir = "" }},
		{"MaxPayload", func(c *ServerConfig) { c.MaxPayload = 0 }},
		{"MaxStore", func(c *ServerConfig) { c.MaxStore = -1 }},
		{"ReadyTimeout", func(c *ServerConfig) { c.ReadyTimeout = -time.Second }},
		{"Name", func(c *ServerConfig) { c.Name = "two words" }},
		{"Routes", func(c *ServerConfig) { c.ClusterListen = "" }},
		{"ClusterListen", func(c *ServerConfig) { c.ClusterListen = "6222" }},
		{"ClusterListen", func(c *ServerConfig) { c.ClusterListen = ":6222" }},
		{"ClusterListen", func(c *ServerConfig) { c.ClusterListen = "127.0.0.1:x" }},
		{"ClusterName", func(c *ServerConfig) { c.ClusterName = "" }},
		{"ClusterName", func(c *ServerConfig) { c.ClusterName = "a b" }},
		{"Routes", func(c *ServerConfig) { c.Routes = nil }},
		{"Routes[1]", func(c *ServerConfig) { c.Routes = append(c.Routes, "127.0.0.1:6223") }},
		{"Routes[1]", func(c *ServerConfig) { c.Routes = append(c.Routes, "http://127.0.0.1:6223") }},
		{"Routes[1]", func(c *ServerConfig) { c.Routes = append(c.Routes, "nats-route://127.0.0.1") }},
		{"Routes[1]", func(c *ServerConfig) { c.Routes = append(c.Routes, "nats-route://127.0.0.1:6223/x") }},
		{"Name", func(c *ServerConfig) { c.Port = -1 }}, // clustered, random client port, no name
		{"LocalDirectGets given without", func(c *ServerConfig) {
			c.ClusterListen, c.Routes, c.LocalDirectGets = "", nil, []string{"KV_b"}
		}},
		{"LocalDirectGets[0]", func(c *ServerConfig) { c.LocalDirectGets = []string{""} }},
		{"LocalDirectGets[1]", func(c *ServerConfig) { c.LocalDirectGets = []string{"KV_b", "KV.b"} }},
		{"LocalDirectGets[0]", func(c *ServerConfig) { c.LocalDirectGets = []string{"KV_*"} }},
		{"LocalDirectGets[0]", func(c *ServerConfig) { c.LocalDirectGets = []string{"KV >"} }},
	} {
		c := DefaultServerConfig()
		c.ClusterListen, c.Routes = "127.0.0.1:6222", []string{"nats-route://127.0.0.1:6222"}
		if err := c.Validate(); err != nil {
			t.Fatalf("clustered config: %v", err)
		}
		tc.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Validate with bad %s: %v", tc.field, err)
		}
	}
}

func TestDefaultNodeName(t *testing.T) {
	for _, tc := range []struct {
		host string
		port int
		want string
	}{
		{"db1", 4222, "db1-4222"},
		{"db1.example.com", 4223, "db1.example.com-4223"},
		{"odd host*name", 1, "odd_host_name-1"},
		{"", 4222, "node-4222"},
	} {
		if got := DefaultNodeName(tc.host, tc.port); got != tc.want {
			t.Errorf("DefaultNodeName(%q, %d) = %q, want %q", tc.host, tc.port, got, tc.want)
		}
	}
}

func TestStartServerPortInUse(t *testing.T) {
	srv := startServer(t)
	_, portStr, err := net.SplitHostPort(strings.TrimPrefix(srv.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(portStr)

	cfg := DefaultServerConfig()
	cfg.Port = port
	cfg.StoreDir = t.TempDir()
	start := time.Now()
	second, err := StartServer(cfg)
	if err == nil {
		second.Close()
		t.Fatal("second server on the same port started")
	}
	if !errors.Is(err, ErrPortInUse) {
		t.Fatalf("error does not wrap ErrPortInUse: %v", err)
	}
	if !strings.Contains(err.Error(), portStr) {
		t.Errorf("error does not name the port: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s to report a port in use", d)
	}
	t.Logf("error: %v", err)
}

func TestStartServerBadStoreDir(t *testing.T) {
	file := t.TempDir() + "/not-a-dir"
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultServerConfig()
	cfg.Port = -1
	cfg.StoreDir = file
	srv, err := StartServer(cfg)
	if err == nil {
		srv.Close()
		t.Fatal("server started with a file as its store dir")
	}
	t.Logf("error: %v", err)
}

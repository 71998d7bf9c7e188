package natsserver

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func TestRestrictedConsumerRefusal(t *testing.T) {
	// What nats.go's ordered consumer (a KV watch) gets from the server.
	ordered := server.ConsumerConfig{Name: "AbCd1234", MemoryStorage: true, Replicas: 1, InactiveThreshold: 5 * time.Second}
	for _, tc := range []struct {
		name string
		mod  func(*server.ConsumerConfig)
		want string
	}{
		{"ordered", func(*server.ConsumerConfig) {}, ""},
		{"replicas unset", func(c *server.ConsumerConfig) { c.Replicas = 0 }, ""},
		{"a minute", func(c *server.ConsumerConfig) { c.InactiveThreshold = time.Minute }, ""},
		{"durable", func(c *server.ConsumerConfig) { c.Durable = "x" }, `durable "x"`},
		{"file", func(c *server.ConsumerConfig) { c.MemoryStorage = false }, "file storage"},
		{"R3", func(c *server.ConsumerConfig) { c.Replicas = 3 }, "3 replicas"},
		{"kept", func(c *server.ConsumerConfig) { c.InactiveThreshold = time.Minute + 1 }, "inactive threshold 1m0.000000001s"},
		{"no threshold", func(c *server.ConsumerConfig) { c.InactiveThreshold = 0 }, "inactive threshold 0s"},
		{"direct", func(c *server.ConsumerConfig) { c.Direct = true }, "direct"},
		{"sourcing", func(c *server.ConsumerConfig) { c.Sourcing = true }, "sourcing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ordered
			tc.mod(&c)
			got := restrictedConsumerRefusal(&c)
			if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("refusal %q, want %q", got, tc.want)
			}
		})
	}
}

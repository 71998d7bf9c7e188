package scanserver

import (
	"strings"
	"testing"

	"github.com/scanplane/scanplane/wire"
)

// TestDefaultFlowWithinWireLimits: the default configuration is valid,
// its flow control passes the wire's check, and the limits it is checked
// against hold.
func TestDefaultFlowWithinWireLimits(t *testing.T) {
	def := DefaultScanServerConfig()
	if err := def.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := wire.ValidateFlow(0, 0, 0, def.Window, def.BatchBytes); err != nil {
		t.Fatal(err)
	}
	c := def
	c.Window = 512
	if c.Validate() == nil {
		t.Error("ScanServerConfig with Window 512 accepted")
	}
	c = def
	c.Window, c.BatchBytes = 32, 4<<20
	if c.Validate() == nil {
		t.Error("ScanServerConfig with 32 × 4 MiB in flight accepted")
	}
}

// TestHostAgentDigestBytes: a negative digest budget is refused, naming
// the value; 0 (the default) and a positive one are accepted.
func TestHostAgentDigestBytes(t *testing.T) {
	c := DefaultHostAgentConfig()
	c.Host = "h"
	for _, n := range []int64{0, 1 << 20} {
		c.DigestBytes = n
		if err := c.Validate(); err != nil {
			t.Errorf("DigestBytes %d: %v", n, err)
		}
	}
	c.DigestBytes = -5
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "DigestBytes -5") {
		t.Errorf("DigestBytes -5: %v, want an error naming it", err)
	}
}

package scanserver

import (
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

package coordinator

import (
	"testing"

	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/wire"
)

// TestScanEntryIsTheRouter: the remote Guard lets a scan request for a
// table outside the sender's grant reach only remoting.ScanEntry, which
// must be the router, the actor that answers it PERMISSION_DENIED.
func TestScanEntryIsTheRouter(t *testing.T) {
	if remoting.ScanEntry != wire.RouterName {
		t.Fatalf("remoting.ScanEntry %q, want the router's name %q", remoting.ScanEntry, wire.RouterName)
	}
}

package main

import (
	"testing"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/localcluster"
)

// TestDefaultNATSIsUpsNodes: scanctl's --nats default and the client
// library's are one list, every NATS node `scanctl up` starts on its
// default ports, so a program with client.DefaultConfig reaches the same
// cluster as scanctl.
func TestDefaultNATSIsUpsNodes(t *testing.T) {
	want := localcluster.WellKnownNATSURLs(defaultCoordinators)
	if defaultNATS != want {
		t.Errorf("scanctl --nats default %q, want the nodes of scanctl up %q", defaultNATS, want)
	}
	if got := client.DefaultConfig().NATSURL; got != want {
		t.Errorf("client.DefaultConfig().NATSURL %q, want the nodes of scanctl up %q", got, want)
	}
}

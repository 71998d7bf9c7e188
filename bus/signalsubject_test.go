package bus_test

import (
	"errors"
	"testing"

	"github.com/scanplane/scanplane/bus"
)

func TestCheckSignalSubject(t *testing.T) {
	for _, tc := range []struct {
		subject, host, server string
		ok                    bool
	}{
		{bus.HeartbeatSubject("h1", "s1"), "h1", "s1", true},
		{bus.BusySubject("h1", "s1"), "h1", "s1", true},
		{bus.TimeoutSubject("h1", "s1"), "h1", "s1", true},
		{bus.HeartbeatSubject("10.0.0.7:8101", "10.0.0.7:8101/0"), "10.0.0.7:8101", "10.0.0.7:8101/0", true},
		{bus.HeartbeatSubject("h1", "s1"), "h2", "s1", false},
		{bus.HeartbeatSubject("h1", "s1"), "h1", "s2", false},
		{bus.BusySubject("h1", "s1"), "", "s1", false},
		{bus.HeartbeatSubject("h1", "s1") + ".x", "h1", "s1", false},
		{"scanplane.v1.hb.h1", "h1", "", false},
		{"scanplane.v1.meta.changed", "h1", "s1", false},
		{"other.h1.s1", "h1", "s1", false},
	} {
		err := bus.CheckSignalSubject(tc.subject, tc.host, tc.server)
		if (err == nil) != tc.ok {
			t.Errorf("CheckSignalSubject(%q, %q, %q) = %v, want ok %v", tc.subject, tc.host, tc.server, err, tc.ok)
		}
		if err != nil && !errors.Is(err, bus.ErrSignalSubject) {
			t.Errorf("CheckSignalSubject(%q, ...) = %v, want ErrSignalSubject", tc.subject, err)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestFlagsNewFaults: bad values for the heterogeneous and antagonist
// faults are refused with exit status 2 and a message naming the field,
// before anything starts; -h lists both faults.
func TestFlagsNewFaults(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--fault", "antagonsit"}, `unknown fault "antagonsit"`},
		{[]string{"--fault", "heterogeneous", "--workers", "1"}, "Workers"},
		{[]string{"--fault", "none", "--workers", "0"}, "Workers 0"},
		{[]string{"--fault", "antagonist", "--antagonist-threads", "0"}, "AntagonistThreads 0"},
		{[]string{"--fault", "antagonist", "--antagonist-cpu", "-5"}, "AntagonistCPU -5"},
		{[]string{"--fault", "antagonist", "--antagonist-cpu", "1023"}, "AntagonistCPU 1023"},
		{[]string{"--quick", "--fault", "heterogeneous", "--workers", "1"}, "Workers"},
		{[]string{"--fault", "antagonist", "--antagonist-threads", "many"}, "invalid value"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("loadtest %q: exit %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &out, &errb); code != 0 {
		t.Fatalf("-h: exit %d", code)
	}
	for _, want := range []string{"heterogeneous", "antagonist", "-antagonist-threads", "-antagonist-cpu", "-workers"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("-h does not mention %s", want)
		}
	}
}

// TestFlagsClosedLoop: --closed-loop takes a client count in [1, 4096]
// and excludes --rate.
func TestFlagsClosedLoop(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--closed-loop", "-1"}, "--closed-loop -1 must be in [1, 4096]"},
		{[]string{"--closed-loop", "5000"}, "--closed-loop 5000 must be in [1, 4096]"},
		{[]string{"--closed-loop", "8", "--rate", "100"}, "exclude each other"},
		{[]string{"--closed-loop", "x"}, "invalid value"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("loadtest %q: exit %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/scanplane/scanplane/messages"
)

// TestHTTPAddrs: the HTTP addresses scanctl scan takes from the
// coordinators' answer: all dialable ones, or those of --coordinator in
// its order; a wildcard or missing address is left out and named when
// nothing is left.
func TestHTTPAddrs(t *testing.T) {
	live := []*messages.ClusterInfo{
		{CoordinatorAddress: "a:1", HttpAddress: "a:2"},
		{CoordinatorAddress: "b:1", HttpAddress: "0.0.0.0:2"},
		{CoordinatorAddress: "c:1", HttpAddress: "c:2"},
		{CoordinatorAddress: "d:1"},
	}
	for _, tc := range []struct {
		want     []string
		addrs    []string
		whyEmpty string
	}{
		{nil, []string{"a:2", "c:2"}, ""},
		{[]string{"c:1", "a:1"}, []string{"c:2", "a:2"}, ""},
		{[]string{"b:1"}, nil, `b:1 serves HTTP at "0.0.0.0:2"`},
		{[]string{"x:1"}, nil, "the live coordinators are a:1, b:1, c:1, d:1"},
	} {
		addrs, missing, unusable := httpAddrs(live, tc.want)
		if !slices.Equal(addrs, tc.addrs) || tc.whyEmpty != "" && !strings.Contains(missing+" "+unusable, tc.whyEmpty) {
			t.Errorf("httpAddrs(want %q) = %q, %q, %q; want %q and a reason naming %q", tc.want, addrs, missing, unusable, tc.addrs, tc.whyEmpty)
		}
	}
}

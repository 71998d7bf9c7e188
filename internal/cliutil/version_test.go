package cliutil

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestVersionOf(t *testing.T) {
	info := func(v string, settings ...string) func() (*debug.BuildInfo, bool) {
		bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: v}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return func() (*debug.BuildInfo, bool) { return bi, true }
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	const rev = "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		linked string
		read   func() (*debug.BuildInfo, bool)
		want   Build
	}{
		{"v1.2.3", info("v0.9.0"), Build{"v1.2.3", "unknown", "go1.99.1"}},
		{"", info("v0.9.0", "vcs.revision", rev, "vcs.modified", "false"), Build{"v0.9.0", rev, "go1.99.1"}},
		{"", info("(devel)", "vcs.revision", rev, "vcs.modified", "true"), Build{"devel", rev + "-dirty", "go1.99.1"}},
		{"", info(""), Build{"devel", "unknown", "go1.99.1"}},
		{"", none, Build{"devel", "unknown", runtime.Version()}},
	} {
		if got := VersionOf(tc.linked, tc.read); got != tc.want {
			t.Errorf("VersionOf(%q, ...) = %+v, want %+v", tc.linked, got, tc.want)
		}
	}
	b := Build{"v1.2.3", rev + "-dirty", "go1.99.1"}
	if got, want := b.String(), "v1.2.3 (commit "+rev+"-dirty, go1.99.1)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if v := Version(""); v.Version == "" || v.Commit == "" || v.GoVersion == "" {
		t.Errorf("Version() has an empty field: %+v", v)
	}
}

func TestBuildInfoCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(BuildInfoCollector(Build{"v1.2.3", "abc-dirty", "go1.99.1"}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "scanplane_build_info" || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, want one scanplane_build_info series", mfs)
	}
	m := mfs[0].GetMetric()[0]
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": "v1.2.3", "commit": "abc-dirty", "goversion": "go1.99.1"}
	if m.GetGauge().GetValue() != 1 || len(labels) != len(want) {
		t.Fatalf("series %v, want value 1 with labels %v", m, want)
	}
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, labels[k], v)
		}
	}
}

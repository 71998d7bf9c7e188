package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/scanplane/scanplane/coordinator"
)

// StreamModel is what each simulated client's TabletStreams are given.
type StreamModel struct {
	BatchRows, Window uint32
	StallTimeout      time.Duration
	IdleTimeout       time.Duration
	CoordinatorWait   time.Duration
	MaxRequestTime    time.Duration
	MaxResumes        int
}

// ServerModel configures the real scan servers and what the harness adds
// around them: block reads that are sometimes cold (slow), and heartbeats.
type ServerModel struct {
	Workers, MaxQueue, BatchRows, Window int
	AckTimeout                           time.Duration
	ColdRead                             float64 // chance that a block read is slow
	ColdReadMin, ColdReadMax             time.Duration
	Heartbeat                            time.Duration
}

// ProcFaults say how many process faults a run has. Each starts at a
// random instant of [0, Window].
type ProcFaults struct {
	HostPauses, HostKills   int // scanserver processes SIGSTOPped / SIGKILLed
	CoordPauses, CoordKills int // coordinators likewise
	// HostRestartRaces: scanserver processes killed and restarted at once
	// on the same address while every coordinator's endpoint to the
	// address is still failing (restartRace).
	HostRestartRaces int
	// Panics: actor panics injected (a router, a tablet actor or a scan
	// server); Reloads: profile reloads on every coordinator, during scans.
	Panics, Reloads int
	// Skew: each process's clock is off by up to ±Skew.
	Skew   time.Duration
	Window time.Duration
	// PauseMax bounds a pause; a killed process restarts on the same
	// address after RestartMin..RestartMax, or never with NeverRestart.
	PauseMax               time.Duration
	RestartMin, RestartMax time.Duration
	NeverRestart           float64
	// DetectMax bounds how long until peers notice a death (endpoint
	// terminated, a refused connection's dead letter, the cluster info
	// watch of clients).
	DetectMax time.Duration
	// LeaseTTL: a coordinator that is dead or paused this long drops out
	// of the others' members (its lease expired); it is back once it runs
	// again.
	LeaseTTL time.Duration
}

func (f ProcFaults) any() bool {
	return f.HostPauses+f.HostKills+f.HostRestartRaces+f.CoordPauses+f.CoordKills+f.Panics+f.Reloads > 0 || f.Skew != 0
}

// Config is one simulated run. ConfigFor derives one from a seed; every
// random choice during the run comes from Seed too, so a Config replays
// exactly.
type Config struct {
	Seed uint64
	// The cluster and the work.
	Hosts, ServersPerHost, Coordinators, Clients int
	ScansPerClient                               int
	Rows, Tablets                                int
	// ScanStartMax: scans start at a random instant of [0, ScanStartMax];
	// DeadlineMin..DeadlineMax is each scan's time budget.
	ScanStartMax             time.Duration
	DeadlineMin, DeadlineMax time.Duration
	// Profiles is the coordinators' profiles JSON (Reload swaps in
	// ReloadProfiles); scans pick one by scan_type among Hints.
	Profiles, ReloadProfiles string
	Hints                    []string
	// Unplaceable is a hint whose profile's group has no server; one scan
	// in 25 uses it and must fail with NO_SERVERS naming the group within
	// UnplaceableWait + DeadlineBound (in runs without faults).
	Unplaceable     string
	UnplaceableWait time.Duration
	// TabletIdle: tablet actors stop this long after their last scan
	// (and clients that kept their PID meet the stopped-actor gate).
	TabletIdle time.Duration
	Server     ServerModel
	Flow       coordinator.FlowConfig
	Stream     StreamModel
	Net        NetFaults
	Faults     ProcFaults
	// DeadlineBound: a scan ends at most this long after its deadline.
	// CalmBound: in a run without faults every scan ends this long after
	// it starts (a request that is lost between coordinators costs the
	// client its idle timeout, far more).
	DeadlineBound, CalmBound time.Duration
	// FlowBound: when no fault touched a request, no server runs or
	// queues an attempt of it this long after its scan ended.
	FlowBound time.Duration
	// SilenceBound: a request that has no data yet hears from its
	// coordinator (ScanRouted, ScanProgress, its first rows, an error) at
	// least this often, unless a fault touched it or a coordinator.
	SilenceBound time.Duration
	// LeakBound: nothing of a scan is left this long after the last
	// deadline and the last fault.
	LeakBound time.Duration
	// MaxEvents stops a run that does not converge (a livelock).
	MaxEvents int
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Hosts < 1, c.ServersPerHost < 1, c.Coordinators < 1, c.Clients < 1, c.ScansPerClient < 1:
		return errors.New("sim: Hosts, ServersPerHost, Coordinators, Clients and ScansPerClient must be >= 1")
	case c.Rows < 1 || c.Tablets < 1:
		return errors.New("sim: Rows and Tablets must be >= 1")
	case c.DeadlineMin <= 0 || c.DeadlineMax < c.DeadlineMin:
		return fmt.Errorf("sim: DeadlineMin %v..DeadlineMax %v must be a positive range", c.DeadlineMin, c.DeadlineMax)
	case c.Net.MinDelay < 0 || c.Net.MaxDelay < c.Net.MinDelay || c.Net.LateMax < c.Net.MaxDelay:
		return errors.New("sim: Net delays must satisfy 0 <= MinDelay <= MaxDelay <= LateMax")
	case c.MaxEvents < 1:
		return errors.New("sim: MaxEvents must be >= 1")
	}
	return c.Flow.Validate()
}

// profilesJSON routes scans to three policies: accumulo-host (default),
// adaptive, and clickhouse-random with hedging; "batch" goes to a group
// that has no server.
const profilesJSON = `[
 {"isDefault": true, "policy": "accumulo-host", "timeToWaitForScanServers": "2s",
  "attemptPlans": [{"servers": "1", "busyTimeout": "33ms", "salt": "one"}, {"servers": "100%", "busyTimeout": "100ms"}]},
 {"name": "adaptive", "scanTypeActivations": ["adaptive"], "policy": "adaptive", "timeToWaitForScanServers": "2s",
  "attemptPlans": [{"servers": "1", "busyTimeout": "33ms", "salt": "one"}, {"servers": "100%", "busyTimeout": "100ms"}]},
 {"name": "hedged", "scanTypeActivations": ["hedged"], "policy": "clickhouse-random", "hedge": true, "timeToWaitForScanServers": "2s",
  "hedgedConnectionTimeout": "20ms", "receiveDataTimeout": "40ms",
  "attemptPlans": [{"servers": "100%", "busyTimeout": "200ms"}]},
 {"name": "batch", "scanTypeActivations": ["batch"], "group": "batch", "policy": "adaptive", "timeToWaitForScanServers": "500ms",
  "attemptPlans": [{"servers": "100%", "busyTimeout": "100ms"}]}]`

// reloadJSON is what a reload swaps in: the same profiles with other
// policies and timeouts (the adaptive profile hedges now).
const reloadJSON = `[
 {"isDefault": true, "policy": "adaptive", "timeToWaitForScanServers": "2s",
  "attemptPlans": [{"servers": "100%", "busyTimeout": "50ms"}]},
 {"name": "adaptive", "scanTypeActivations": ["adaptive"], "policy": "clickhouse-random", "hedge": true, "timeToWaitForScanServers": "2s",
  "hedgedConnectionTimeout": "30ms", "receiveDataTimeout": "60ms", "attemptPlans": [{"servers": "100%", "busyTimeout": "150ms"}]},
 {"name": "hedged", "scanTypeActivations": ["hedged"], "policy": "accumulo-host", "timeToWaitForScanServers": "2s",
  "attemptPlans": [{"servers": "1", "busyTimeout": "33ms", "salt": "two"}, {"servers": "100%", "busyTimeout": "100ms"}]},
 {"name": "batch", "scanTypeActivations": ["batch"], "group": "batch", "policy": "adaptive", "timeToWaitForScanServers": "500ms",
  "attemptPlans": [{"servers": "100%", "busyTimeout": "100ms"}]}]`

// ConfigFor draws a run's shape and fault mix from its seed: about a
// quarter of the runs are calm, a third have network faults only, the
// rest network and process faults.
func ConfigFor(seed uint64) Config {
	r := rand.New(rand.NewPCG(seed, 0x5ca9))
	between := func(lo, hi int) int { return lo + r.IntN(hi-lo+1) }
	c := Config{
		Seed:  seed,
		Hosts: between(2, 3), ServersPerHost: between(1, 2), Coordinators: between(1, 3), Clients: between(1, 2),
		ScansPerClient: between(1, 3), Rows: between(20, 300), Tablets: between(1, 4),
		ScanStartMax: 1500 * time.Millisecond, DeadlineMin: time.Second, DeadlineMax: 12 * time.Second,
		Profiles: profilesJSON, ReloadProfiles: reloadJSON, Hints: []string{"", "adaptive", "hedged"},
		Unplaceable: "batch", UnplaceableWait: 500 * time.Millisecond,
		TabletIdle: time.Duration(between(1, 20)) * 100 * time.Millisecond,
		Server: ServerModel{Workers: between(1, 2), MaxQueue: between(0, 4), BatchRows: 50, Window: 4, AckTimeout: 30 * time.Second,
			ColdRead: 0.2, ColdReadMin: time.Millisecond, ColdReadMax: 80 * time.Millisecond, Heartbeat: time.Second},
		Flow: coordinator.DefaultFlowConfig(),
		Stream: StreamModel{BatchRows: uint32(between(3, 40)), Window: uint32(between(1, 4)), StallTimeout: 2 * time.Second,
			IdleTimeout: 2 * time.Second, CoordinatorWait: 3 * time.Second, MaxRequestTime: 30 * time.Second, MaxResumes: 10},
		Net:           NetFaults{MinDelay: 50 * time.Microsecond, MaxDelay: 2 * time.Millisecond, LateMax: 2 * time.Second},
		DeadlineBound: time.Second, CalmBound: 2500 * time.Millisecond, FlowBound: time.Second,
		SilenceBound: 1500 * time.Millisecond, LeakBound: 5 * time.Second,
		MaxEvents: 2_000_000,
		Faults: ProcFaults{Window: 3 * time.Second, PauseMax: 4 * time.Second, RestartMin: 100 * time.Millisecond,
			RestartMax: 5 * time.Second, NeverRestart: 0.2, DetectMax: 300 * time.Millisecond, LeaseTTL: 3 * time.Second},
	}
	class := r.IntN(12)
	if class >= 3 {
		p := func(max float64) float64 {
			if r.IntN(3) == 0 {
				return 0
			}
			return r.Float64() * max
		}
		c.Net.Drop, c.Net.Duplicate, c.Net.Reorder, c.Net.Late = p(0.03), p(0.03), p(0.03), p(0.03)
	}
	if class >= 7 {
		f := &c.Faults
		f.HostPauses, f.HostKills = r.IntN(3), r.IntN(2)
		f.CoordPauses = r.IntN(2)
		if r.IntN(3) == 0 {
			f.CoordKills = 1
		}
		f.Panics, f.Reloads = r.IntN(3), r.IntN(2)
		if r.IntN(2) == 0 {
			f.Skew = 5 * time.Second
		}
		f.HostRestartRaces = r.IntN(2)
	}
	return c
}

// calm reports whether the run has no fault at all.
func (c Config) calm() bool {
	return c.Net.Drop == 0 && c.Net.Duplicate == 0 && c.Net.Reorder == 0 && c.Net.Late == 0 && !c.Faults.any()
}

package protosim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	coordpkg "github.com/scanplane/scanplane/coordinator"
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
	// Profiles is the coordinators' profiles JSON; scans pick one by
	// scan_type among Hints ("" = the default profile).
	Profiles string
	Hints    []string
	// Unplaceable is a hint whose profile's group has no server; one scan
	// in 25 uses it and must fail with NO_SERVERS naming the group within
	// UnplaceableWait + DeadlineBound (in runs without faults).
	Unplaceable     string
	UnplaceableWait time.Duration
	Server          ServerModel
	Flow            coordpkg.FlowConfig
	Stream          StreamModel
	Net             NetFaults
	Faults          ProcFaults
	// DeadlineBound: a scan ends at most this long after its deadline.
	// FlowBound: when no fault touched a request, its flow, server jobs
	// and timers are gone this long after its scan ended. LeakBound:
	// whatever the faults, nothing of a scan is left this long after its
	// deadline (and the last fault).
	DeadlineBound, FlowBound, LeakBound time.Duration
	// MaxEvents stops a run that does not converge (a livelock).
	MaxEvents int
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Hosts < 1, c.ServersPerHost < 1, c.Coordinators < 1, c.Clients < 1, c.ScansPerClient < 1:
		return errors.New("protosim: Hosts, ServersPerHost, Coordinators, Clients and ScansPerClient must be >= 1")
	case c.Rows < 1 || c.Tablets < 1:
		return errors.New("protosim: Rows and Tablets must be >= 1")
	case c.DeadlineMin <= 0 || c.DeadlineMax < c.DeadlineMin:
		return fmt.Errorf("protosim: DeadlineMin %v..DeadlineMax %v must be a positive range", c.DeadlineMin, c.DeadlineMax)
	case c.Net.MinDelay < 0 || c.Net.MaxDelay < c.Net.MinDelay || c.Net.LateMax < c.Net.MaxDelay:
		return errors.New("protosim: Net delays must satisfy 0 <= MinDelay <= MaxDelay <= LateMax")
	case c.MaxEvents < 1:
		return errors.New("protosim: MaxEvents must be >= 1")
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

// ConfigFor draws a run's shape and fault mix from its seed: about a
// quarter of the runs are calm, a third have network faults only, the
// rest network and process faults. Probabilities are small so that most
// scans still complete.
func ConfigFor(seed uint64) Config {
	r := rand.New(rand.NewPCG(seed, 0x5ca9))
	between := func(lo, hi int) int { return lo + r.IntN(hi-lo+1) }
	c := Config{
		Seed:  seed,
		Hosts: between(2, 3), ServersPerHost: between(1, 2), Coordinators: between(1, 2), Clients: between(1, 2),
		ScansPerClient: between(1, 3), Rows: between(20, 300), Tablets: between(1, 4),
		ScanStartMax: 1500 * time.Millisecond, DeadlineMin: time.Second, DeadlineMax: 12 * time.Second,
		Profiles: profilesJSON, Hints: []string{"", "adaptive", "hedged"}, Unplaceable: "batch", UnplaceableWait: 500 * time.Millisecond,
		Server: ServerModel{Workers: between(1, 2), MaxQueue: between(0, 4), BatchRows: 50, Window: 4, AckTimeout: 30 * time.Second,
			ReadBase: 200 * time.Microsecond, ReadPerRow: 5 * time.Microsecond, ColdRead: 0.2, ColdReadMax: 80 * time.Millisecond,
			Heartbeat: time.Second},
		Flow: coordpkg.DefaultFlowConfig(),
		Stream: StreamModel{BatchRows: uint32(between(3, 40)), Window: uint32(between(1, 4)), StallTimeout: 2 * time.Second,
			IdleTimeout: 10 * time.Second, CoordinatorWait: 3 * time.Second, MaxRequestTime: 30 * time.Second, MaxResumes: 10},
		Net:           NetFaults{MinDelay: 50 * time.Microsecond, MaxDelay: 2 * time.Millisecond, LateMax: 2 * time.Second},
		DeadlineBound: time.Second, FlowBound: time.Second, LeakBound: 5 * time.Second,
		MaxEvents: 2_000_000,
		Faults: ProcFaults{Window: 3 * time.Second, PauseMax: 4 * time.Second, RestartMin: 100 * time.Millisecond,
			RestartMax: 5 * time.Second, NeverRestart: 0.2, DetectMax: 300 * time.Millisecond},
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
		if r.IntN(6) == 0 {
			f.ClientKills = 1
		}
	}
	return c
}

// calm reports whether the run has no fault at all.
func (c Config) calm() bool {
	f := c.Faults
	return c.Net.Drop == 0 && c.Net.Duplicate == 0 && c.Net.Reorder == 0 && c.Net.Late == 0 &&
		f.HostPauses+f.HostKills+f.CoordPauses+f.CoordKills+f.ClientKills == 0
}

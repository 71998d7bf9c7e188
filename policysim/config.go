package policysim

import (
	"errors"
	"fmt"
	"time"

	"github.com/scanplane/scanplane/scanflow"
)

// ErrBadConfig is wrapped by every Config.Validate error.
var ErrBadConfig = errors.New("policysim: bad configuration")

// Fault names a fault the model injects.
type Fault string

const (
	// FaultNone: every server healthy.
	FaultNone Fault = ""
	// FaultSlowServer: server 0's service times are SlowFactor times longer.
	FaultSlowServer Fault = "slowserver"
	// FaultSlowHost: every server of host 0 is SlowFactor times slower.
	FaultSlowHost Fault = "slowhost"
	// FaultHung: server 0 stops at Warmup: it starts, finishes and answers
	// nothing more and sends no heartbeats.
	FaultHung Fault = "hung"
)

// Config is one simulated setting. Times are virtual.
type Config struct {
	// Setting names the setting in the output.
	Setting string
	// Clients: coordinators (C3's clients), each with its own load view,
	// policy instance and random source. Default 150.
	Clients int
	// Servers: scan servers. Default 50.
	Servers int
	// ServersPerHost: server i runs on host i mod (Servers/ServersPerHost),
	// so a replica set of consecutive servers spans distinct hosts.
	// Default 1.
	ServersPerHost int
	// Workers: scans a server runs at once; the rest wait in its FIFO
	// queue. Default 4.
	Workers int
	// ServiceMean: mean of the exponential service time at the base rate
	// μ. Default 4ms.
	ServiceMean time.Duration
	// RateSwitch: every RateSwitch each server's rate is redrawn: μ or
	// RateFactor·μ with probability ½ each (0 = always μ). Default 500ms.
	RateSwitch time.Duration
	// RateFactor: the fast rate's multiple of μ. Default 3.
	RateFactor float64
	// Replication: servers holding each key, consecutive on a ring (key k
	// lives on servers k mod Servers, +1, ...); 0 = every server. The
	// policy is handed a view of those servers only. Default 3.
	Replication int
	// Keys: distinct keys (tablets). Default 4 × Servers.
	Keys int
	// Skew: Zipf exponent of key popularity; 0 = uniform. Default 0.
	Skew float64
	// OneWay: network latency of every message, one way. Default 250µs.
	OneWay time.Duration
	// Utilization: arrival rate over the cluster's average capacity
	// (Servers × Workers / mean service time, averaged over the rates).
	// Default 0.45.
	Utilization float64
	// Requests: requests arriving in the counted part, after Warmup.
	// Default 250000.
	Requests int
	// Warmup: arrivals before it are not counted. Default 2s.
	Warmup time.Duration
	// Heartbeat: period of each host's load report (queue, running scans)
	// to every coordinator, as the scan servers' HeartbeatInterval.
	// Default 1s.
	Heartbeat time.Duration
	// HeartbeatMisses: heartbeats a server may miss before a coordinator
	// drops it from its view. Default 3.
	HeartbeatMisses int
	// Fault and SlowFactor: the injected fault (default none) and how much
	// slower a slow server is (default 10).
	Fault      Fault
	SlowFactor float64
	// Seed of every random choice of the run. Default 1.
	Seed uint64
	// ServiceSeed, when not 0, seeds the service times instead of Seed:
	// the same workload (arrivals, keys, coordinators, slow servers) with
	// other service times, another sample of the same setting. Default 0.
	ServiceSeed uint64
	// Flow is the coordinator's flow configuration. Default
	// scanflow.DefaultFlowConfig().
	Flow scanflow.FlowConfig
	// Diagnose: record Result.Diag (what the policy saw and what was so
	// when it chose; it changes no result). Default off.
	Diagnose bool
}

// DefaultConfig returns the documented defaults (C3's setting at
// utilization 0.45).
func DefaultConfig() Config {
	return Config{Setting: "c3", Clients: 150, Servers: 50, ServersPerHost: 1, Workers: 4, ServiceMean: 4 * time.Millisecond,
		RateSwitch: 500 * time.Millisecond, RateFactor: 3, Replication: 3, Keys: 200, OneWay: 250 * time.Microsecond,
		Utilization: 0.45, Requests: 250000, Warmup: 2 * time.Second, Heartbeat: time.Second, HeartbeatMisses: 3,
		SlowFactor: 10, Seed: 1, Flow: scanflow.DefaultFlowConfig()}
}

// Validate names the first bad field and its value.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...)
	}
	switch {
	case c.Clients < 1:
		return bad("Clients %d must be >= 1", c.Clients)
	case c.Servers < 1:
		return bad("Servers %d must be >= 1", c.Servers)
	case c.ServersPerHost < 1 || c.Servers%c.ServersPerHost != 0:
		return bad("ServersPerHost %d must be >= 1 and divide Servers %d", c.ServersPerHost, c.Servers)
	case c.Workers < 1:
		return bad("Workers %d must be >= 1", c.Workers)
	case c.ServiceMean <= 0:
		return bad("ServiceMean %v must be > 0", c.ServiceMean)
	case c.RateSwitch < 0:
		return bad("RateSwitch %v must be >= 0", c.RateSwitch)
	case c.RateFactor < 1:
		return bad("RateFactor %g must be >= 1", c.RateFactor)
	case c.Replication < 0 || c.Replication > c.Servers:
		return bad("Replication %d must be in [0, Servers %d]", c.Replication, c.Servers)
	case c.Keys < 1:
		return bad("Keys %d must be >= 1", c.Keys)
	case c.Skew < 0:
		return bad("Skew %g must be >= 0", c.Skew)
	case c.OneWay < 0:
		return bad("OneWay %v must be >= 0", c.OneWay)
	case c.Utilization <= 0 || c.Utilization >= 1:
		return bad("Utilization %g must be in (0, 1)", c.Utilization)
	case c.Requests < 1:
		return bad("Requests %d must be >= 1", c.Requests)
	case c.Warmup < 0:
		return bad("Warmup %v must be >= 0", c.Warmup)
	case c.Heartbeat <= 0:
		return bad("Heartbeat %v must be > 0", c.Heartbeat)
	case c.HeartbeatMisses < 1:
		return bad("HeartbeatMisses %d must be >= 1", c.HeartbeatMisses)
	case c.Fault != FaultNone && c.Fault != FaultSlowServer && c.Fault != FaultSlowHost && c.Fault != FaultHung:
		return bad("Fault %q unknown (slowserver, slowhost, hung)", c.Fault)
	case c.Fault == FaultSlowHost && c.ServersPerHost < 2:
		return bad("Fault slowhost needs ServersPerHost >= 2, not %d", c.ServersPerHost)
	case c.SlowFactor < 1:
		return bad("SlowFactor %g must be >= 1", c.SlowFactor)
	}
	if err := c.Flow.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	return nil
}

// Capacity is the cluster's average capacity in requests per second.
func (c Config) Capacity() float64 {
	meanRate := 1.0 // in units of μ
	if c.RateSwitch > 0 {
		meanRate = (1 + c.RateFactor) / 2
	}
	return float64(c.Servers*c.Workers) * meanRate / c.ServiceMean.Seconds()
}

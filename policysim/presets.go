package policysim

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/scanplane/scanplane/selection"
)

// DefaultPolicies are the policies a preset compares: the project's,
// adaptive both with its defaults and without cache affinity (the
// simulated servers keep no cache), and the baselines.
var DefaultPolicies = []string{selection.PolicyAdaptive, AdaptiveNoCache, selection.PolicyC3, LeastOutstanding,
	selection.PolicyRoundRobin, selection.PolicyRandom, selection.PolicyBookKeeper, selection.PolicyPeakEWMA,
	selection.PolicyPrequal}

// AdaptiveNoCache is adaptive for servers with no block cache to keep
// (docs/policies.md, adaptive).
const AdaptiveNoCache = selection.PolicyAdaptive + ":cacheAffinity=false"

// Presets returns the settings of a preset:
//
//	c3      C3's simulation (DefaultConfig) at utilization 0.45 and 0.70
//	scale   C3's setting with 10, 100 and 1 000 servers at 0.70 (1 000
//	        servers: 1 000 000 requests)
//	faults  C3's setting at 0.45 with one server 10× slower (slowserver),
//	        one host of two servers 10× slower (slowhost), one server that
//	        hangs after the warm-up (hung), and Zipf 0.9 key popularity
//	        (skew)
//	loadtest
//	        the load tester's workload on its local cluster with 3 hosts
//	        of 2 servers (cmd/loadtest --hosts 3): one coordinator, every
//	        server a replica of every tablet, 16 tablets of Zipf 0.99
//	        popularity, 250 scans/s, scans of 1 ms mean on 4 workers at
//	        one rate; no fault (loadtest) and every scan 10× slower on
//	        host 0 (loadtest-slowhost, the load tester's slow-host)
//	small   20 clients, 12 servers, 20 000 requests: seconds, for tests
//	all     c3, scale and faults
func Presets(name string) ([]Config, error) {
	base := DefaultConfig()
	with := func(setting string, f func(*Config)) Config {
		c := base
		c.Setting = setting
		f(&c)
		return c
	}
	switch name {
	case "c3":
		return []Config{
			with("c3", func(c *Config) { c.Utilization = 0.45 }),
			with("c3", func(c *Config) { c.Utilization = 0.70 }),
		}, nil
	case "scale":
		var out []Config
		for _, n := range []int{10, 100, 1000} {
			out = append(out, with(fmt.Sprintf("scale-%d", n), func(c *Config) {
				c.Servers, c.Keys, c.Utilization = n, 4*n, 0.70
				if n == 1000 {
					// 1.4 M arrivals per second: half a second warms the
					// estimates up as two seconds do at 50 servers.
					c.Requests, c.Keys, c.Warmup = 1000000, n, 500*time.Millisecond
				}
			}))
		}
		return out, nil
	case "faults":
		return []Config{
			with("slowserver", func(c *Config) { c.Fault = FaultSlowServer }),
			with("slowhost", func(c *Config) { c.Fault, c.ServersPerHost = FaultSlowHost, 2 }),
			with("hung", func(c *Config) { c.Fault = FaultHung }),
			with("skew", func(c *Config) { c.Skew, c.Keys = 0.9, 1000 }),
		}, nil
	case "loadtest":
		lt := func(c *Config) {
			c.Clients, c.Servers, c.ServersPerHost, c.Replication, c.Keys, c.Skew = 1, 6, 2, 0, 16, 0.99
			c.ServiceMean, c.RateSwitch, c.Warmup, c.Requests = time.Millisecond, 0, 3*time.Second, 100000
			// 250 scans/s over 6 servers × 4 workers of 1 ms.
			c.Utilization = 250 / (6 * 4 / time.Millisecond.Seconds())
		}
		return []Config{
			with("loadtest", lt),
			with("loadtest-slowhost", func(c *Config) { lt(c); c.Fault = FaultSlowHost }),
		}, nil
	case "small":
		return []Config{with("small", func(c *Config) {
			c.Clients, c.Servers, c.Keys, c.Requests, c.Warmup = 20, 12, 48, 20000, 200*time.Millisecond
		})}, nil
	case "all":
		var out []Config
		for _, p := range []string{"c3", "scale", "faults"} {
			cs, _ := Presets(p)
			out = append(out, cs...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unknown preset %q (c3, scale, faults, loadtest, small, all)", ErrBadConfig, name)
}

// ProfilesJSON is the profiles document a run loads for policy: the load
// tester's (one default profile; attempt plans of 1 server, 2, then all,
// with Accumulo's 33ms busy timeouts, multiplier 8 and 5m cap; "hedge"
// on for the policies that hedge), and for c3 c3Clients set to the
// number of coordinators (C3's n). least-outstanding loads the random
// policy's profile for its escalation. A policy may carry options:
// "adaptive:spillCost=0+hedgeBudget=0.1" sets those options of the
// profile (values are JSON, else strings).
func ProfilesJSON(policy string, cfg Config) ([]byte, error) {
	name, opts, _ := strings.Cut(policy, ":")
	if name == LeastOutstanding {
		name = selection.PolicyRandom
	}
	prof := map[string]any{
		"name": "default", "isDefault": true, "scanTypeActivations": []string{}, "policy": name,
		"maxBusyTimeout": "5m", "busyTimeoutMultiplier": 8,
		"attemptPlans": []map[string]string{{"servers": "1", "busyTimeout": "33ms"}, {"servers": "2", "busyTimeout": "33ms"},
			{"servers": "100%", "busyTimeout": "33ms"}},
	}
	if name == selection.PolicyAdaptive || strings.HasPrefix(name, "clickhouse-") {
		prof["hedge"] = true
	}
	if name == selection.PolicyC3 {
		prof["c3Clients"] = cfg.Clients
	}
	if opts != "" {
		if err := selection.SetProfileOptions(prof, opts); err != nil {
			return nil, fmt.Errorf("%w: policy %q: %w", ErrBadConfig, policy, err)
		}
	}
	data, err := json.Marshal([]any{prof})
	if err != nil {
		return nil, err
	}
	ps, err := selection.ParseProfiles(data)
	if err != nil {
		return nil, fmt.Errorf("policysim: profiles for %s: %w", policy, err)
	}
	if w := ps.Warnings(); len(w) > 0 {
		// An option the policy does not read is a typo here.
		return nil, fmt.Errorf("%w: policy %q: %s", ErrBadConfig, policy, strings.Join(w, "; "))
	}
	return data, nil
}

// KnownPolicy reports whether name is a policy Run accepts with
// ProfilesJSON.
func KnownPolicy(policy string) bool {
	name, _, _ := strings.Cut(policy, ":")
	if name == LeastOutstanding {
		return true
	}
	names := selection.PolicyNames()
	sort.Strings(names)
	i := sort.SearchStrings(names, name)
	return i < len(names) && names[i] == name
}

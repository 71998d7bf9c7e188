package selection

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Options are the per-policy options of a profile (the extensions to
// Accumulo's JSON). Each field says its JSON name, unit and default; doc.go
// has the same table with the policies each option applies to. Setting an
// option in JSON for a policy it does not apply to is an error.
type Options struct {
	// Hedge ("hedge"): hedged requests / hedged dispatch. true
	// (clickhouse-*: ClickHouse's use_hedged_requests defaults to 1;
	// adaptive).
	Hedge bool
	// HedgedConnectionTimeout ("hedgedConnectionTimeout"): ClickHouse's
	// hedged_connection_timeout; Decision.HedgeDelay when hedging. 50ms.
	HedgedConnectionTimeout time.Duration
	// ReceiveDataTimeout ("receiveDataTimeout"): ClickHouse's
	// receive_data_timeout; Decision.DataTimeout when hedging. 2s.
	ReceiveDataTimeout time.Duration
	// ConnectTimeoutWithFailover ("connectTimeoutWithFailover"):
	// ClickHouse's connect_timeout_with_failover_ms; the busy timeout of
	// every clickhouse-* attempt (an attempt not accepted by then fails and
	// the next replica is tried); 0 = the attemptPlans' busy timeouts and
	// their escalation instead. 1s.
	ConnectTimeoutWithFailover time.Duration

	// ErrorHalfLife ("errorHalfLife"): the error and slowdown
	// (clickhouse-*) or error and busy (adaptive) counters halve once per
	// whole elapsed half-life; 0 = never. 60s; adaptive: 5s.
	ErrorHalfLife time.Duration
	// ErrorCap ("errorCap"): counters are capped; 0 = uncapped. 1000.
	ErrorCap uint32
	// MaxIgnoredErrors ("maxIgnoredErrors"): errors below this do not
	// count in the sort tuple. 0.
	MaxIgnoredErrors uint32
	// FirstOffset ("firstOffset"): first_or_random's preferred replica
	// index (load_balancing_first_offset). 0.
	FirstOffset int
	// ReplicaPriority ("replicaPriority"): ClickHouse's per-replica
	// <priority> (lower is preferred), a JSON object from a server ID or a
	// host name (the ID wins) to an integer; servers not listed have
	// DefaultReplicaPriority (1). Sorted after errors and slowdowns, before
	// the mode's priority. Empty.
	ReplicaPriority map[string]int
	// LeastRequestChoiceCount ("leastRequestChoiceCount"): least_request's
	// sample size (load_balancing_least_request_choice_count; below 2
	// counts as 2, at least the server count examines all). 2.
	LeastRequestChoiceCount int
	// LeastRequestActiveRequestBias ("leastRequestActiveRequestBias"):
	// least_request scores 1/(in-flight+1)^bias
	// (load_balancing_least_request_active_request_bias). 1.0.
	LeastRequestActiveRequestBias float64

	// ReorderThresholdPendingRequests ("reorderThresholdPendingRequests"):
	// BookKeeper's T; 0 = no reordering by pending requests, and then, as
	// in BookKeeper, slow replicas and those with a failure history are
	// ordered after healthy ones instead. 10 (BookKeeper's own default is
	// 0; scanplane reorders by pending requests out of the box).
	ReorderThresholdPendingRequests int
	// WriteSetSize ("writeSetSize"): the tablet's replicas: the first N
	// servers of its rendezvous order on distinct hosts (rack-aware like
	// BookKeeper's ensemble); 0 = every server of the group, in plain
	// rendezvous order. 3.
	WriteSetSize int
	// SpeculativeReadTimeout ("speculativeReadTimeout"): first
	// speculative re-dispatch after this; 0 = off. 2s.
	SpeculativeReadTimeout time.Duration
	// MaxSpeculativeReadTimeout ("maxSpeculativeReadTimeout"): cap of the
	// backed-off speculative timeout; 0 = speculativeReadTimeout (no
	// backoff), BookKeeper's default. 0.
	MaxSpeculativeReadTimeout time.Duration
	// SpeculativeBackoffMultiplier ("speculativeBackoffMultiplier"):
	// each further speculative dispatch waits prev × this (≥ 1). 2.0.
	SpeculativeBackoffMultiplier float64

	// ZoneTriggerLoad ("zoneTriggerLoad"): Ribbon's
	// triggeringLoadPerServerThreshold. 0.2.
	ZoneTriggerLoad float64
	// ZoneBlackoutPercent ("zoneBlackoutPercent"): a zone whose tripped
	// (adaptive: tripped or erroring) fraction reaches this is avoided.
	// 0.99999; adaptive: 0.5.
	ZoneBlackoutPercent float64
	// ActiveConnectionsLimit ("activeConnectionsLimit"): availability
	// filter skips servers with pending ≥ this; 0 = unlimited. 0.
	ActiveConnectionsLimit int
	// SubsetSize ("subsetSize"): ServerListSubsetFilter size; 0 = no
	// subset (all servers). 20.
	SubsetSize int
	// SubsetRefresh ("subsetRefresh"): how often the subset is refreshed
	// (Ribbon's server-list refresh interval); membership changes and an
	// empty live subset refresh at once. 30s.
	SubsetRefresh time.Duration
	// SubsetEvictPercent ("subsetEvictPercent"): forceEliminatePercent.
	// 0.1.
	SubsetEvictPercent float64
	// EliminationConnectionThreshold ("eliminationConnectionThreshold"):
	// subset members with pending above this are dropped at refresh. 0.
	EliminationConnectionThreshold int
	// EliminationFailureThreshold ("eliminationFailureThreshold"): subset
	// members with more failures in the last second are dropped. 0.
	EliminationFailureThreshold int
	// BreakerFailureThreshold ("breakerFailureThreshold"): consecutive
	// failures that trip a server's circuit breaker; 0 = no breaker. 3.
	BreakerFailureThreshold int
	// BreakerTimeoutFactor ("breakerTimeoutFactor"): blackout =
	// min(2^min(failures−threshold,16) × this, max). 10s; adaptive: 1s.
	BreakerTimeoutFactor time.Duration
	// BreakerMaxTimeout ("breakerMaxTimeout"): blackout cap. 30s;
	// adaptive: 5s.
	BreakerMaxTimeout time.Duration

	// HedgeBudget ("hedgeBudget"): hedges are declined (ErrNoHedge) while
	// LoadView.RecentHedges/RecentDispatches ≥ this; 0 = never hedge. 0.05.
	HedgeBudget float64
	// HedgeDelayMin ("hedgeDelayMin"): floor of the learned hedge delay,
	// just above a healthy server's start latency, so that the scans a
	// paused or CPU-starved server holds are hedged early while the
	// budget bounds the extra work (MEASUREMENTS.md, "adaptive changed").
	// 3ms.
	HedgeDelayMin time.Duration
	// HedgeDelayMax ("hedgeDelayMax"): ceiling of the learned hedge delay.
	// 1s.
	HedgeDelayMax time.Duration
	// HedgeDelayDefault ("hedgeDelayDefault"): hedge delay while
	// LoadView.StartLatencyP95 is unknown (0). 50ms.
	HedgeDelayDefault time.Duration
	// SpillCost ("spillCost"): the most score added per rank away from
	// the home host, in queued scans per worker: a scan leaves its home
	// host only when that saves more than this much queueing (plus 1).
	// Once LoadView.BlockTimes has samples of both, the cost is what they
	// show leaving home costs (away/home time per block − 1), if lower. 4.
	SpillCost float64
	// SpillHosts ("spillHosts"): hosts after the home host considered
	// before falling back to all servers. 2.
	SpillHosts int
	// InFlightWeight ("inFlightWeight"): each scan this coordinator has
	// in flight on a server adds this many scans to the server's last
	// reported queue (Active + QueueLen) in adaptive's queue term. A scan
	// of ours stands for the others' choices the report has not shown
	// yet: coordinators sharing servers see the same loads and send the
	// same way, as C3's concurrency compensation (q̂ = 1 + os·n + q̄)
	// assumes; it also moves scans off a cached home host sooner, so it
	// suits many coordinators without a cache to keep. 0 = the larger of
	// the report and our scans in flight. 0.
	InFlightWeight float64
	// HomeBand ("homeBand"): the host a scan goes to is the one nearest
	// home among the servers scoring within this much of the best (in
	// queued scans per worker): home wins near-ties, which keeps the
	// cache, and scans of coordinators sharing a stale view spread over
	// the tablets' home hosts instead of herding onto one server. Where
	// no cache is kept, 0 with inFlightWeight (which then spreads the
	// coordinators' scans) follows the queues more closely. 1.
	HomeBand float64
	// LatencyWeight ("latencyWeight"): adaptive adds this much score per
	// median by which a server's start-latency estimate
	// (LoadView.StartLatencyOf) exceeds the recent median start latency
	// (StartLatencyP50): a queue this coordinator's own scans met shows
	// there before a report of it arrives. 0 = none (the slowness term
	// alone, which starts at 1.5 medians). 0.
	LatencyWeight float64
	// CacheAffinity ("cacheAffinity"): whether the scan servers keep a
	// block cache worth keeping a tablet's scans on its home host. false
	// sets the defaults of HomeBand to 0, InFlightWeight to 16 and
	// LatencyWeight to 2, each unless the profile sets it: scans follow
	// the queues, and coordinators sharing servers spread their scans
	// instead of herding on the same reports. true.
	CacheAffinity bool
	// StaleHeartbeat ("staleHeartbeat"): a host whose newest heartbeat is
	// older than this (relative to LoadView.At) is suspect: its servers
	// score +8 and a hedge does not go to a sibling on it. 0 = ignore
	// heartbeats. 2s.
	StaleHeartbeat time.Duration

	// DecayTime ("decayTime"): peak-ewma's τ: a latency below the
	// estimate moves it by 1 − exp(−Δt/τ), and the estimate decays toward 0
	// with it while unobserved (Finagle's decayTime). 10s.
	DecayTime time.Duration
	// DefaultRTT ("defaultRTT"): peak-ewma's estimate for a server with no
	// latency sample yet (tower's default_rtt); 0 = Finagle's rule: cost 0,
	// and Penalty + pending once a scan is in flight there. 0s.
	DefaultRTT time.Duration
	// C3Clients ("c3Clients"): C3's n, the number of coordinators sharing
	// the scan servers (concurrency compensation: q̂ = 1 + os·n + q̄). 1.
	C3Clients int

	// ProbesPerQuery ("probesPerQuery"): prequal's r_probe, probes sent
	// per query (fractions spread over queries). 3.
	ProbesPerQuery float64
	// ProbePoolSize ("probePoolSize"): prequal's pool capacity (the newest
	// answer per server). 16.
	ProbePoolSize int
	// ProbeMaxAge ("probeMaxAge"): prequal drops answers older than this.
	// 1s.
	ProbeMaxAge time.Duration
	// ProbeRemovesPerQuery ("probeRemovesPerQuery"): prequal's r_remove,
	// answers removed per query, alternating oldest and worst. 1.
	ProbeRemovesPerQuery float64
	// RIFQuantile ("rifQuantile"): prequal's Q_RIF: an answer is hot when
	// its requests in flight exceed this quantile of recent answers'. 0.84.
	RIFQuantile float64
}

// Policy names.
const (
	PolicyAccumulo     = "accumulo"
	PolicyAccumuloHost = "accumulo-host"
	PolicyBookKeeper   = "bookkeeper"
	PolicyRibbonZone   = "ribbon-zone"
	PolicyRandom       = "random"
	PolicyRoundRobin   = "round-robin"
	PolicyAdaptive     = "adaptive"
	PolicyPeakEWMA     = "peak-ewma"
	PolicyC3           = "c3"
	PolicyPrequal      = "prequal"
	// ClickHouse policies are "clickhouse-" + a load_balancing mode:
	// random, nearest_hostname, hostname_levenshtein_distance, in_order,
	// first_or_random, round_robin, hostname_longest_common_prefix,
	// hostname_longest_common_suffix, least_request.
	clickhousePrefix = "clickhouse-"
	// PolicyClickHouseRand is "clickhouse-random".
	PolicyClickHouseRand = clickhousePrefix + "random"
)

// ClickHouse load_balancing modes, in the order of docs/policies.md.
var clickhouseModes = []string{"random", "nearest_hostname", "hostname_levenshtein_distance", "in_order", "first_or_random", "round_robin",
	"hostname_longest_common_prefix", "hostname_longest_common_suffix", "least_request"}

// DefaultReplicaPriority is the priority of a replica replicaPriority does
// not list: ClickHouse's default <priority> (Cluster.cpp).
const DefaultReplicaPriority = 1

// replicaPriority is s's replica priority: by server ID, else by host
// name, else DefaultReplicaPriority.
func (o *Options) replicaPriority(s *ServerLoad) int {
	if p, ok := o.ReplicaPriority[string(s.ID)]; ok {
		return p
	}
	if p, ok := o.ReplicaPriority[s.Host]; ok {
		return p
	}
	return DefaultReplicaPriority
}

// PolicyNames returns every policy name, sorted.
func PolicyNames() []string {
	out := []string{PolicyAccumulo, PolicyAccumuloHost, PolicyBookKeeper, PolicyRibbonZone, PolicyRandom, PolicyRoundRobin, PolicyAdaptive, PolicyPeakEWMA, PolicyC3, PolicyPrequal}
	for _, m := range clickhouseModes {
		out = append(out, clickhousePrefix+m)
	}
	sort.Strings(out)
	return out
}

func knownPolicy(name string) bool {
	for _, n := range PolicyNames() {
		if n == name {
			return true
		}
	}
	return false
}

// usesDecay reports whether a policy reads error/slowdown counters.
func usesDecay(policy string) bool {
	return strings.HasPrefix(policy, clickhousePrefix) || policy == PolicyAdaptive
}

// DefaultOptions returns the option defaults for policy.
func DefaultOptions(policy string) Options {
	o := Options{
		HedgedConnectionTimeout:         50 * time.Millisecond,
		ReceiveDataTimeout:              2 * time.Second,
		ConnectTimeoutWithFailover:      time.Second,
		ErrorHalfLife:                   60 * time.Second,
		ErrorCap:                        1000,
		LeastRequestChoiceCount:         2,
		LeastRequestActiveRequestBias:   1.0,
		ReorderThresholdPendingRequests: 10,
		WriteSetSize:                    3,
		SpeculativeReadTimeout:          2 * time.Second,
		SpeculativeBackoffMultiplier:    2.0,
		ZoneTriggerLoad:                 0.2,
		ZoneBlackoutPercent:             0.99999,
		SubsetSize:                      20,
		SubsetRefresh:                   30 * time.Second,
		SubsetEvictPercent:              0.1,
		BreakerFailureThreshold:         3,
		BreakerTimeoutFactor:            10 * time.Second,
		BreakerMaxTimeout:               30 * time.Second,
		HedgeBudget:                     0.05,
		HedgeDelayMin:                   3 * time.Millisecond,
		HedgeDelayMax:                   time.Second,
		HedgeDelayDefault:               50 * time.Millisecond,
		SpillCost:                       4,
		SpillHosts:                      2,
		HomeBand:                        1,
		CacheAffinity:                   true,
		StaleHeartbeat:                  2 * time.Second,
		DecayTime:                       defaultDecayTime,
		C3Clients:                       1,
		ProbesPerQuery:                  3,
		ProbePoolSize:                   defaultProbePoolSize,
		ProbeMaxAge:                     defaultProbeMaxAge,
		ProbeRemovesPerQuery:            1,
		RIFQuantile:                     0.84,
	}
	if strings.HasPrefix(policy, clickhousePrefix) {
		// ClickHouse's defaults (Settings.cpp): use_hedged_requests = 1.
		o.Hedge = true
	}
	if policy == PolicyAdaptive {
		o.Hedge = true
		o.ZoneBlackoutPercent = 0.5
		// Short memory: hard failures are handled by the per-scan host
		// exclusion, the circuit breaker and stale heartbeats; a minute-long
		// memory of a transient burst of timeouts exiles a healthy host.
		o.ErrorHalfLife = 5 * time.Second
		// Ribbon's 10–30 s blackouts outlast what they protect against here
		// and starve a tripped server of the success that would reset it.
		o.BreakerTimeoutFactor = time.Second
		o.BreakerMaxTimeout = 5 * time.Second
	}
	return o
}

func (o *Options) breaker() breaker {
	return breaker{threshold: o.BreakerFailureThreshold, factor: o.BreakerTimeoutFactor, max: o.BreakerMaxTimeout}
}

// optionSpec describes one option: its JSON name, the policies it applies
// to ("clickhouse-*" matches every ClickHouse mode), and how to set and
// print it.
type optionSpec struct {
	name    string
	applies []string
	set     func(o *Options, raw json.RawMessage) error
	get     func(o *Options) string
}

var (
	chAll     = []string{"clickhouse-*"}
	chAdapt   = []string{"clickhouse-*", PolicyAdaptive}
	bkOnly    = []string{PolicyBookKeeper}
	bkC3      = []string{PolicyBookKeeper, PolicyC3}
	peakOnly  = []string{PolicyPeakEWMA}
	ribbon    = []string{PolicyRibbonZone}
	ribAdapt  = []string{PolicyRibbonZone, PolicyAdaptive}
	adaptOnly = []string{PolicyAdaptive}
	prequal   = []string{PolicyPrequal}
)

func durOpt(name string, applies []string, f func(o *Options) *time.Duration) optionSpec {
	return optionSpec{name, applies,
		func(o *Options, raw json.RawMessage) error {
			d, err := jsonDuration(raw)
			if err != nil {
				return err
			}
			*f(o) = d
			return nil
		},
		func(o *Options) string { return FormatDuration(*f(o)) }}
}

func intOpt(name string, applies []string, lo, hi int64, f func(o *Options) *int) optionSpec {
	return optionSpec{name, applies,
		func(o *Options, raw json.RawMessage) error {
			v, err := jsonInt(raw, lo, hi)
			if err != nil {
				return err
			}
			*f(o) = int(v)
			return nil
		},
		func(o *Options) string { return strconv.Itoa(*f(o)) }}
}

func u32Opt(name string, applies []string, f func(o *Options) *uint32) optionSpec {
	return optionSpec{name, applies,
		func(o *Options, raw json.RawMessage) error {
			v, err := jsonInt(raw, 0, math.MaxUint32)
			if err != nil {
				return err
			}
			*f(o) = uint32(v)
			return nil
		},
		func(o *Options) string { return strconv.FormatUint(uint64(*f(o)), 10) }}
}

func floatOpt(name string, applies []string, lo, hi float64, loOpen bool, f func(o *Options) *float64) optionSpec {
	return optionSpec{name, applies,
		func(o *Options, raw json.RawMessage) error {
			v, err := jsonFloat(raw)
			if err != nil {
				return err
			}
			if v < lo || v > hi || (loOpen && v == lo) {
				open := "["
				if loOpen {
					open = "("
				}
				return fmt.Errorf("%v is out of range %s%v, %v]", v, open, lo, hi)
			}
			*f(o) = v
			return nil
		},
		func(o *Options) string { return strconv.FormatFloat(*f(o), 'g', -1, 64) }}
}

// optionSpecs is the table of every option, in documentation order.
var optionSpecs = []optionSpec{
	{"hedge", chAdapt,
		func(o *Options, raw json.RawMessage) error {
			var b bool
			if err := json.Unmarshal(raw, &b); err != nil {
				return fmt.Errorf("want true or false, got %s", raw)
			}
			o.Hedge = b
			return nil
		},
		func(o *Options) string { return strconv.FormatBool(o.Hedge) }},
	durOpt("hedgedConnectionTimeout", chAll, func(o *Options) *time.Duration { return &o.HedgedConnectionTimeout }),
	durOpt("receiveDataTimeout", chAll, func(o *Options) *time.Duration { return &o.ReceiveDataTimeout }),
	durOpt("connectTimeoutWithFailover", chAll, func(o *Options) *time.Duration { return &o.ConnectTimeoutWithFailover }),
	durOpt("errorHalfLife", chAdapt, func(o *Options) *time.Duration { return &o.ErrorHalfLife }),
	u32Opt("errorCap", chAdapt, func(o *Options) *uint32 { return &o.ErrorCap }),
	u32Opt("maxIgnoredErrors", chAll, func(o *Options) *uint32 { return &o.MaxIgnoredErrors }),
	intOpt("firstOffset", []string{"clickhouse-first_or_random"}, 0, math.MaxInt32, func(o *Options) *int { return &o.FirstOffset }),
	{"replicaPriority", chAll, setReplicaPriority, formatReplicaPriority},
	intOpt("leastRequestChoiceCount", []string{"clickhouse-least_request"}, 0, math.MaxInt32, func(o *Options) *int { return &o.LeastRequestChoiceCount }),
	floatOpt("leastRequestActiveRequestBias", []string{"clickhouse-least_request"}, 0, 1000, false, func(o *Options) *float64 { return &o.LeastRequestActiveRequestBias }),
	intOpt("reorderThresholdPendingRequests", bkOnly, 0, math.MaxInt32, func(o *Options) *int { return &o.ReorderThresholdPendingRequests }),
	intOpt("writeSetSize", bkC3, 0, math.MaxInt32, func(o *Options) *int { return &o.WriteSetSize }),
	durOpt("speculativeReadTimeout", bkOnly, func(o *Options) *time.Duration { return &o.SpeculativeReadTimeout }),
	durOpt("maxSpeculativeReadTimeout", bkOnly, func(o *Options) *time.Duration { return &o.MaxSpeculativeReadTimeout }),
	floatOpt("speculativeBackoffMultiplier", bkOnly, 1, 1000, false, func(o *Options) *float64 { return &o.SpeculativeBackoffMultiplier }),
	floatOpt("zoneTriggerLoad", ribbon, 0, math.MaxFloat64, false, func(o *Options) *float64 { return &o.ZoneTriggerLoad }),
	floatOpt("zoneBlackoutPercent", ribAdapt, 0, 1, true, func(o *Options) *float64 { return &o.ZoneBlackoutPercent }),
	intOpt("activeConnectionsLimit", ribbon, 0, math.MaxInt32, func(o *Options) *int { return &o.ActiveConnectionsLimit }),
	intOpt("subsetSize", ribbon, 0, math.MaxInt32, func(o *Options) *int { return &o.SubsetSize }),
	durOpt("subsetRefresh", ribbon, func(o *Options) *time.Duration { return &o.SubsetRefresh }),
	floatOpt("subsetEvictPercent", ribbon, 0, 1, false, func(o *Options) *float64 { return &o.SubsetEvictPercent }),
	intOpt("eliminationConnectionThreshold", ribbon, 0, math.MaxInt32, func(o *Options) *int { return &o.EliminationConnectionThreshold }),
	intOpt("eliminationFailureThreshold", ribbon, 0, math.MaxInt32, func(o *Options) *int { return &o.EliminationFailureThreshold }),
	intOpt("breakerFailureThreshold", ribAdapt, 0, math.MaxInt32, func(o *Options) *int { return &o.BreakerFailureThreshold }),
	durOpt("breakerTimeoutFactor", ribAdapt, func(o *Options) *time.Duration { return &o.BreakerTimeoutFactor }),
	durOpt("breakerMaxTimeout", ribAdapt, func(o *Options) *time.Duration { return &o.BreakerMaxTimeout }),
	floatOpt("hedgeBudget", adaptOnly, 0, 1, false, func(o *Options) *float64 { return &o.HedgeBudget }),
	durOpt("hedgeDelayMin", adaptOnly, func(o *Options) *time.Duration { return &o.HedgeDelayMin }),
	durOpt("hedgeDelayMax", adaptOnly, func(o *Options) *time.Duration { return &o.HedgeDelayMax }),
	durOpt("hedgeDelayDefault", adaptOnly, func(o *Options) *time.Duration { return &o.HedgeDelayDefault }),
	floatOpt("spillCost", adaptOnly, 0, 1e6, false, func(o *Options) *float64 { return &o.SpillCost }),
	floatOpt("inFlightWeight", adaptOnly, 0, 1e6, false, func(o *Options) *float64 { return &o.InFlightWeight }),
	floatOpt("homeBand", adaptOnly, 0, 1e6, false, func(o *Options) *float64 { return &o.HomeBand }),
	floatOpt("latencyWeight", adaptOnly, 0, 1e6, false, func(o *Options) *float64 { return &o.LatencyWeight }),
	{"cacheAffinity", adaptOnly,
		func(o *Options, raw json.RawMessage) error {
			var b bool
			if err := json.Unmarshal(raw, &b); err != nil {
				return fmt.Errorf("want true or false, got %s", raw)
			}
			o.CacheAffinity = b
			return nil
		},
		func(o *Options) string { return strconv.FormatBool(o.CacheAffinity) }},
	intOpt("spillHosts", adaptOnly, 0, 1000, func(o *Options) *int { return &o.SpillHosts }),
	durOpt("staleHeartbeat", adaptOnly, func(o *Options) *time.Duration { return &o.StaleHeartbeat }),
	durOpt("decayTime", peakOnly, func(o *Options) *time.Duration { return &o.DecayTime }),
	durOpt("defaultRTT", peakOnly, func(o *Options) *time.Duration { return &o.DefaultRTT }),
	intOpt("c3Clients", []string{PolicyC3}, 1, 1<<20, func(o *Options) *int { return &o.C3Clients }),
	floatOpt("probesPerQuery", prequal, 0, 64, false, func(o *Options) *float64 { return &o.ProbesPerQuery }),
	intOpt("probePoolSize", prequal, 1, 4096, func(o *Options) *int { return &o.ProbePoolSize }),
	durOpt("probeMaxAge", prequal, func(o *Options) *time.Duration { return &o.ProbeMaxAge }),
	floatOpt("probeRemovesPerQuery", prequal, 0, 64, false, func(o *Options) *float64 { return &o.ProbeRemovesPerQuery }),
	floatOpt("rifQuantile", prequal, 0, 1, false, func(o *Options) *float64 { return &o.RIFQuantile }),
}

// setReplicaPriority parses replicaPriority: an object of integers.
func setReplicaPriority(o *Options, raw json.RawMessage) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return fmt.Errorf("want an object from server ID or host name to an integer priority, got %s", raw)
	}
	out := make(map[string]int, len(m))
	for k, v := range m {
		if k == "" {
			return fmt.Errorf("empty server ID or host name")
		}
		p, err := jsonInt(v, math.MinInt32, math.MaxInt32)
		if err != nil {
			return fmt.Errorf("%q: %w", k, err)
		}
		out[k] = int(p)
	}
	o.ReplicaPriority = out
	return nil
}

// formatReplicaPriority prints replicaPriority as {name:p,...}, sorted.
func formatReplicaPriority(o *Options) string {
	keys := make([]string, 0, len(o.ReplicaPriority))
	for k := range o.ReplicaPriority {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s:%d", k, o.ReplicaPriority[k])
	}
	b.WriteByte('}')
	return b.String()
}

func findOption(name string) *optionSpec {
	for i := range optionSpecs {
		if optionSpecs[i].name == name {
			return &optionSpecs[i]
		}
	}
	return nil
}

func (s *optionSpec) appliesTo(policy string) bool {
	for _, a := range s.applies {
		if a == policy || (strings.HasSuffix(a, "*") && strings.HasPrefix(policy, strings.TrimSuffix(a, "*"))) {
			return true
		}
	}
	return false
}

// optionsFor lists the option names that apply to policy.
func optionsFor(policy string) []string {
	var out []string
	for i := range optionSpecs {
		if optionSpecs[i].appliesTo(policy) {
			out = append(out, optionSpecs[i].name)
		}
	}
	return out
}

// Adaptive's defaults without cache affinity (Options.CacheAffinity).
const (
	noCacheHomeBand       = 0
	noCacheInFlightWeight = 16
	noCacheLatencyWeight  = 2
)

// applyCacheAffinity gives an adaptive profile without cache affinity
// its defaults for the options it did not set (explicit lists the ones it
// did).
func applyCacheAffinity(policy string, o *Options, explicit []string) {
	if policy != PolicyAdaptive || o.CacheAffinity {
		return
	}
	for _, d := range []struct {
		name string
		v    float64
		f    *float64
	}{{"homeBand", noCacheHomeBand, &o.HomeBand}, {"inFlightWeight", noCacheInFlightWeight, &o.InFlightWeight},
		{"latencyWeight", noCacheLatencyWeight, &o.LatencyWeight}} {
		if !slices.Contains(explicit, d.name) {
			*d.f = d.v
		}
	}
}

// validateOptions checks cross-option constraints.
func validateOptions(policy string, o *Options) (field string, err error) {
	if policy == PolicyBookKeeper && o.SpeculativeReadTimeout > 0 && o.MaxSpeculativeReadTimeout > 0 &&
		o.MaxSpeculativeReadTimeout < o.SpeculativeReadTimeout {
		return "maxSpeculativeReadTimeout", fmt.Errorf("%s is less than speculativeReadTimeout %s",
			FormatDuration(o.MaxSpeculativeReadTimeout), FormatDuration(o.SpeculativeReadTimeout))
	}
	if policy == PolicyAdaptive && o.HedgeDelayMax > 0 && o.HedgeDelayMax < o.HedgeDelayMin {
		return "hedgeDelayMax", fmt.Errorf("%s is less than hedgeDelayMin %s",
			FormatDuration(o.HedgeDelayMax), FormatDuration(o.HedgeDelayMin))
	}
	if policy == PolicyPeakEWMA && o.DecayTime <= 0 {
		return "decayTime", fmt.Errorf("%s must be greater than 0", FormatDuration(o.DecayTime))
	}
	if policy == PolicyPrequal && o.ProbeMaxAge <= 0 {
		return "probeMaxAge", fmt.Errorf("%s must be greater than 0", FormatDuration(o.ProbeMaxAge))
	}
	if policy == PolicyRibbonZone && o.BreakerMaxTimeout < o.BreakerTimeoutFactor {
		return "breakerMaxTimeout", fmt.Errorf("%s is less than breakerTimeoutFactor %s",
			FormatDuration(o.BreakerMaxTimeout), FormatDuration(o.BreakerTimeoutFactor))
	}
	return "", nil
}

// SetProfileOptions sets, in prof (one profile of a profiles document),
// the options of a "name=value+name=value" list, as cmd/policysim's and
// cmd/loadtest's -policies take them after a policy's name: a value that
// parses as JSON is that JSON value, else the string.
func SetProfileOptions(prof map[string]any, list string) error {
	for _, kv := range strings.Split(list, "+") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("%w: option %q is not name=value", ErrBadConfig, kv)
		}
		var val any
		if json.Unmarshal([]byte(v), &val) != nil {
			val = v
		}
		prof[k] = val
	}
	return nil
}

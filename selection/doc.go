// Package selection is the pure heart of scanplane: given a tablet, a
// profile, this scan's attempt history, a load view, the time and a random
// source, a Policy decides which scan server runs the next attempt, with
// what busy timeout, after what delay, and when to hedge. It also owns the
// profiles configuration (Accumulo's JSON, extended) and the LoadView type.
//
// # Concurrency contract
//
// Everything here is pure: no goroutines, no clocks, no global randomness,
// no IO. A Policy value and a Profiles value may be shared by any number of
// goroutines. Each call gets its own Input; Input.Rand and Input.State are
// owned by the caller (one TabletState per tablet actor, never shared).
// LoadView values are immutable once built by NewLoadView (which also
// precomputes the per-group server, host and zone indexes the policies
// read); never modify a ServerLoad reachable from a view.
//
// # How a call works
//
//   - Candidates are the view's servers with Alive == true and Group ==
//     profile.Group (an empty group means "default" on both sides). None →
//     ErrNoServer.
//   - Input.Attempts is this scan's history, oldest first. Results for which
//     Failed() is true (busy, error, timeout, stalled) count as attempts for
//     plan escalation (Accumulo's "attempts"); IsError() results count for the
//     error delay (error delay). Every policy avoids servers that already failed in
//     this scan while another candidate remains.
//   - Input.Hedge asks for an additional, parallel dispatch while earlier
//     attempts are pending, started-without-data or slow. The policy then
//     never returns a server with such an in-flight attempt; it returns
//     ErrNoHedge when it does not hedge (the policy never hedges, hedging is
//     off, the budget is spent, or no other server is left). Ask only while
//     no attempt has delivered data. A hedge decision has Delay 0.
//   - Decision.HedgeDelay (not accepted by then → ask for a hedge) and
//     Decision.DataTimeout (no first data by then → ask for a hedge) are set
//     only by policies that hedge; 0 means "do not". Ask for at most one
//     hedge per attempt (whichever timer fires first) and mark that attempt
//     Slow in the history of the hedge call.
//   - Busy timeout and delay: plan-based policies per docs/policies.md (busy timeout escalation, error delay)
//     (accumulo-host: the reached plan's timeout, see docs/policies.md). Policies without plans
//     (except clickhouse-*, below) use the same busy timeout escalation by number of failed attempts over the
//     profile's attemptPlans (Accumulo's default plans when absent), so that
//     policies differ only in where scans go; Decision.PlanIndex is the plan
//     whose timeout was used.
//   - Decision.Candidates is filled only when Input.Explain is set.
//   - clickhouse-* use connectTimeoutWithFailover (1s, ClickHouse's
//     default) as every attempt's busy timeout, not the plans', so an
//     attempt not accepted within hedgedConnectionTimeout (50ms) is hedged
//     before it times out. With connectTimeoutWithFailover 0 the plans'
//     timeouts apply, and with Accumulo's 33ms plans an unaccepted attempt
//     is retried before 50ms: only receiveDataTimeout hedges then.
//
// # What the load view must carry
//
// LoadView.Decays = Profiles.Decays() (DefaultDecay first), and each
// ServerLoad's Errors, Slowdowns and Busy indexed like it (each failed try
// adds 1 error, each hedged-over attempt 1 slowdown, each busy answer or
// busy timeout 1 busy; ClickHouse resets slowdowns on a failed
// connection); ConsecutiveFailures/LastFailure/RecentFailures (reset by a
// success); InFlight, QueueLen, Active, Workers; StartLatency (EWMA of
// dispatch → first data, with StartLatencyAt) and LastHeartbeat per
// server; StartLatencyP50, StartLatencyP95,
// RecentDispatches and RecentHedges for the view. Policies read only what
// they need; absent data counts as zero.
//
// # Policies
//
//	accumulo                 docs/policies.md, accumulo: salted rendezvous subset of N servers per plan, exclude tried, random pick
//	accumulo-host            docs/policies.md, accumulo-host: plan counts hosts; random non-exhausted host, random untried server on it
//	clickhouse-random        docs/policies.md, clickhouse, load_balancing=random
//	clickhouse-nearest_hostname
//	clickhouse-hostname_levenshtein_distance
//	clickhouse-in_order
//	clickhouse-first_or_random
//	clickhouse-round_robin
//	clickhouse-hostname_longest_common_prefix
//	clickhouse-hostname_longest_common_suffix
//	clickhouse-least_request
//	bookkeeper               docs/policies.md, bookkeeper: affinity order, pending-threshold move-to-front, speculative re-dispatch
//	ribbon-zone              docs/policies.md, ribbon-zone: subset filter, zone avoidance, availability filtering, round robin
//	peak-ewma                docs/policies.md, peak-ewma: Finagle's power of two choices over peak-EWMA latency × (in flight + 1)
//	c3                       docs/policies.md, c3: C3's (NSDI'15) ranking of the tablet's replicas, without its rate control
//	prequal                  docs/policies.md, prequal: Prequal's (NSDI'24) probe pool (real probes to the scan servers) and hot-cold lexicographic rule
//	random, round-robin      baselines
//	adaptive                 scanplane's own (below)
//
// Rendezvous hashing (hash.go) is Accumulo's RendezvousHasher bit for bit:
// Guava's murmur3_128 (x64, seed 0) of the end row (or the byte 5), the prev
// end row (or the byte 7), the table, the member's name and the salt if
// non-empty, with no length prefixes; members ordered by the 16 hash bytes
// compared as signed bytes, smallest first. Given the same table string and
// server names, a tablet gets the same subsets as in Accumulo (pinned by
// Accumulo's own tests, ported in accumulo_hash_test.go). The names differ:
// a server is "<actor address>/<index>" (the scan servers of one process
// share its address) where Accumulo hashes "host:port", and the table is its
// name where Accumulo hashes the table id (docs/policies.md, rendezvous
// order).
// ClickHouse's "configuration order" of a tablet's replicas is the tablet's
// unsalted rendezvous order of the group's servers, so in_order,
// first_or_random and round_robin keep per-tablet affinity instead of
// sending every tablet to the same first server; a replica's config
// priority is the replicaPriority option's (ClickHouse's default 1).
//
// Load ("pending") for bookkeeper, ribbon-zone and adaptive is
// max(InFlight, Active+QueueLen): this coordinator's own in-flight scans
// (fresh) or the server's last report of running plus queued scans (sees
// all coordinators), whichever is larger; see pending().
//
// # Profiles JSON
//
// Accumulo's profiles array loads unchanged, in the lenient syntax its
// parser (Gson) accepts (an object {"profiles": [...]} is accepted too;
// docs/policies.md, Profiles JSON). Per profile:
//
//	| field                    | default                      | meaning |
//	|--------------------------|------------------------------|---------|
//	| isDefault                | false                        | exactly one profile must be true |
//	| scanTypeActivations      | []                           | scan_type hint values ("" included); a value in two profiles is an error |
//	| group                    | "default"                    | resource group of the servers to use |
//	| timeToWaitForScanServers | 36500d                       | how long the coordinator waits when the group has no servers (0 = fail at once) |
//	| maxBusyTimeout           | absent = no cap              | cap of escalated busy timeouts |
//	| busyTimeoutMultiplier    | 0                            | integer; 0 → timeout 0 (wait forever) after the plans |
//	| attemptPlans             | required (accumulo, accumulo-host); else Accumulo's default plans | [{servers, busyTimeout, salt}] |
//	| servers                  | required                     | "N" (N > 0) or "P%" (0 < P ≤ 100, decimals allowed; max(1, round(P/100.0 × total)) in float64); accumulo-host counts hosts |
//	| busyTimeout              | required                     | duration |
//	| salt                     | ""                           | rendezvous salt |
//	| name                     | "default" / first scan type / "profile<i>" | display name (extension) |
//	| policy                   | "accumulo"                   | one of PolicyNames() (extension) |
//
// Durations are an unsigned integer followed by d, h, m, s or ms (no suffix
// = seconds; decimals rejected); a JSON integer means seconds. Server
// counts and integers may be JSON numbers or strings. null means absent.
// Unknown fields and keys given twice (the last wins) are accepted, as in
// Accumulo, and listed by Profiles.Warnings. Options of another policy,
// bad values, a missing or duplicate default profile, duplicate scan
// types and unknown policies are rejected with an error that wraps
// ErrBadConfig (and ErrUnknownPolicy) and names the profile and the field.
//
// Policy options (Options; "clickhouse-*" = every ClickHouse mode):
//
//	| option                          | default        | policies                 | meaning |
//	|---------------------------------|----------------|--------------------------|---------|
//	| hedge                           | true           | clickhouse-*, adaptive   | hedged requests (ClickHouse's use_hedged_requests, default 1) |
//	| hedgedConnectionTimeout         | 50ms           | clickhouse-*             | HedgeDelay when hedging (hedged_connection_timeout_ms) |
//	| receiveDataTimeout              | 2s             | clickhouse-*             | DataTimeout when hedging (receive_data_timeout_ms) |
//	| connectTimeoutWithFailover      | 1s             | clickhouse-*             | busy timeout of every attempt (connect_timeout_with_failover_ms); 0 = the attemptPlans' busy timeouts |
//	| errorHalfLife                   | 60s; adaptive: 5s | clickhouse-*, adaptive | error, slowdown (clickhouse-*) and busy (adaptive) counters halve per whole half-life (0 = never) |
//	| errorCap                        | 1000           | clickhouse-*, adaptive   | cap of those counters (0 = none) |
//	| maxIgnoredErrors                | 0              | clickhouse-*             | errors − this (≥ 0) in the sort tuple |
//	| firstOffset                     | 0              | clickhouse-first_or_random | preferred replica index (mod N) |
//	| replicaPriority                 | {}             | clickhouse-*             | ClickHouse's per-replica <priority>: {server ID or host: integer}, others 1; lower first, after errors and slowdowns |
//	| leastRequestChoiceCount         | 2              | clickhouse-least_request | servers sampled (at least 2) |
//	| leastRequestActiveRequestBias   | 1.0            | clickhouse-least_request | score 1/(in-flight+1)^bias |
//	| reorderThresholdPendingRequests | 10             | bookkeeper               | T; 0 = no pending reordering but slow replicas last (BookKeeper's own default is 0) |
//	| writeSetSize                    | 3              | bookkeeper, c3           | replicas: first N of the rendezvous order on distinct hosts; 0 = all servers |
//	| speculativeReadTimeout          | 2s             | bookkeeper               | first speculative re-dispatch; 0 = off |
//	| maxSpeculativeReadTimeout       | 0s             | bookkeeper               | cap of the backed-off timeout; 0 = speculativeReadTimeout (BookKeeper's default) |
//	| speculativeBackoffMultiplier    | 2.0            | bookkeeper               | backoff per speculative dispatch made (≥ 1) |
//	| zoneTriggerLoad                 | 0.2            | ribbon-zone              | triggeringLoadPerServerThreshold |
//	| zoneBlackoutPercent             | 0.99999; adaptive: 0.5 | ribbon-zone, adaptive | avoid a zone whose tripped (adaptive: unhealthy) fraction reaches this |
//	| activeConnectionsLimit          | 0 (unlimited)  | ribbon-zone              | availability filter: skip servers with pending ≥ this |
//	| subsetSize                      | 20             | ribbon-zone              | ServerListSubsetFilter size; 0 = all servers |
//	| subsetRefresh                   | 30s            | ribbon-zone              | subset refresh interval (membership changes refresh at once) |
//	| subsetEvictPercent              | 0.1            | ribbon-zone              | forceEliminatePercent |
//	| eliminationConnectionThreshold  | 0              | ribbon-zone              | drop members with pending above this at refresh |
//	| eliminationFailureThreshold     | 0              | ribbon-zone              | drop members with more failures in the last 1 s |
//	| breakerFailureThreshold         | 3              | ribbon-zone, adaptive    | consecutive failures that trip the circuit breaker (0 = none) |
//	| breakerTimeoutFactor            | 10s; adaptive: 1s | ribbon-zone, adaptive | blackout = min(2^min(f−threshold,16) × factor, max) |
//	| breakerMaxTimeout               | 30s; adaptive: 5s | ribbon-zone, adaptive | blackout cap |
//	| hedgeBudget                     | 0.05           | adaptive                 | decline hedges while RecentHedges/RecentDispatches ≥ this (0 = never hedge) |
//	| hedgeDelayMin                   | 3ms            | adaptive                 | floor of the learned hedge delay |
//	| hedgeDelayMax                   | 1s             | adaptive                 | ceiling of the learned hedge delay |
//	| hedgeDelayDefault               | 50ms           | adaptive                 | hedge delay while StartLatencyP95 is unknown |
//	| spillCost                       | 4              | adaptive                 | score per host rank away from home (queued scans per worker) |
//	| spillHosts                      | 2              | adaptive                 | hosts after home scored before falling back to all servers |
//	| inFlightWeight                  | 0              | adaptive                 | scans added to a server's reported queue per scan of ours in flight there (0 = the larger of the two) |
//	| homeBand                        | 1              | adaptive                 | near-best band (queued scans per worker) in which the host nearest home wins |
//	| latencyWeight                   | 0              | adaptive                 | score per median by which a server's start-latency estimate exceeds StartLatencyP50 (0 = none) |
//	| cacheAffinity                   | true           | adaptive                 | false: no block cache to keep scans home for; homeBand, inFlightWeight and latencyWeight default to 0, 16 and 2 |
//	| staleHeartbeat                  | 2s             | adaptive                 | a host with no heartbeat for this long scores +8 and is not a sibling-hedge target (0 = ignore) |
//	| decayTime                       | 10s            | peak-ewma                | τ of the peak-EWMA latency (Finagle's decayTime; > 0) |
//	| defaultRTT                      | 0s             | peak-ewma                | estimate of a server with no sample (tower's default_rtt); 0 = Finagle's: 0, penalty once in flight |
//	| c3Clients                       | 1              | c3                       | C3's n: coordinators sharing the servers (q̂ = 1 + os·n + q̄) |
//	| probesPerQuery                  | 3              | prequal                  | Prequal's r_probe: probes per query (fractions spread over queries) |
//	| probePoolSize                   | 16             | prequal                  | probe pool capacity (newest answer per server) |
//	| probeMaxAge                     | 1s             | prequal                  | answers older than this leave the pool (> 0) |
//	| probeRemovesPerQuery            | 1              | prequal                  | Prequal's r_remove: answers removed per query, oldest and worst in turn |
//	| rifQuantile                     | 0.84           | prequal                  | Prequal's Q_RIF: hot above this quantile of recent RIFs |
//
// # The adaptive policy
//
// adaptive combines host affinity (the cache) with queue awareness, error
// avoidance and budgeted hedging:
//
//  1. Home: the tablet's hosts are ordered by rendezvous hash of the host
//     name (HostOrder; every host equally likely whatever its server count).
//     The first is the home host, whose block cache holds the tablet.
//  2. Score every live server of the home host and of the next spillHosts
//     hosts:
//     score = queue/workers (queue wait in scans per worker), where
//     queue is the larger of the server's last reported Active +
//     QueueLen and this coordinator's scans in flight there; with
//     inFlightWeight > 0 it is the report plus inFlightWeight × our scans
//     in flight: a scan of ours stands for the other coordinators' scans
//     sent on the same view that no report shows yet (C3's concurrency
//     compensation, os·n), so coordinators sharing servers spread instead
//     of herding onto the replica that last reported the shortest queue.
//     It is 0 by default because it also moves scans off a cached home
//     host sooner (fewer cache hits with a few coordinators)
//     + spill × host rank (0 at home: leaving home costs cache misses),
//     where spill is spillCost or, once the view's BlockTimes hold 16
//     scans each at home and away, what leaving home costs here: the
//     scan servers' time per block away over at home, minus 1 (in
//     service times of a home scan), if less than spillCost. Where
//     caches hold every tablet, or none, the ratio is near 1 and scans
//     follow the queues; where a tablet is cached only at home, they stay
//     there until its queue outweighs the misses.
//     + 2 × decayed errors (errorHalfLife/errorCap, at most 8 counted)
//     + 1 × decayed busy answers (at most 2: pending is the live load; a
//     larger memory of past saturation outlives it)
//     + a slowness term, at most 8: the larger of L/StartLatencyP95 − 1,
//     where L is the server's start-latency estimate or, when longer, how
//     long it has held a scan of this coordinator without any answer (its
//     silence: ServerLoad.UnansweredSince, counted for at most 4 s), and
//     3 × (estimate/M − 1.5), M the median of the group's servers'
//     estimates (a healthy server's estimate, a mean over hits and misses,
//     often exceeds the median scan), the estimate decayed toward M with
//     6 s when every server of its host (two or more) is slow so, else 2 s
//     (a slow machine is remembered, one server's outlier is not: its
//     sibling would carry the host alone meanwhile). In the first term the
//     estimate decays toward the fleet median with time since its last
//     sample (LoadView.StartLatencyOf, τ = 2 s), so a server slow once and
//     then left alone is forgiven. The
//     silence shows a paused or hung server within milliseconds, where the
//     estimate learns only when the paused scans finally answer; only a
//     server's own silence counts, so the sibling of one paused server
//     keeps the host's traffic (and the cache) until a scan sent to it goes
//     unanswered too. The median term catches a whole slow host, whose
//     scans can be a share of the fleet's large enough to set the p95
//     itself; its 1.5 medians of slack keep the ordinary spread of
//     healthy servers' estimates from sending scans away from the cache.
//     Slowdown counts are not used: hedging after the p95 hedges about 5%
//     of every server's scans, so a count grows with traffic and would
//     push a busy server's traffic to its sibling and back; the latency
//     estimate measures slowness per scan.
//     + latencyWeight (0) × max(0, L/StartLatencyP50 − 1), L the
//     server's start-latency estimate: the queue this coordinator's own
//     scans met there, which shows before a report of it arrives
//     + 8 when its zone is avoided (zone avoidance: with ≥ 2 zones, a zone
//     whose fraction of tripped or erroring servers reaches
//     zoneBlackoutPercent)
//     + 8 when its host's newest heartbeat is older than staleHeartbeat (a
//     paused or hung host process; it leaves the view after missed
//     heartbeats, this reacts sooner)
//     Tripped servers (circuit breaker as ribbon-zone) and servers that
//     already failed or are in flight in this scan are skipped, and so is
//     every server of a host where an attempt of this scan timed out or
//     stalled: no answer at all means the host process may be paused or
//     hung, and its siblings share it. The host is the one nearest home
//     among the servers scoring within homeBand (1) of the best, so home
//     wins near-ties (the cache) and a scan leaves home only when the home
//     host's queues exceed the next hosts' by more than spillCost +
//     homeBand; it comes back when they drain. The band also spreads the
//     scans of coordinators choosing on the same stale reports over the
//     tablets' home hosts; with homeBand 0 a large inFlightWeight (16)
//     spreads them instead, and scans follow the queues more closely,
//     which suits servers with no cache to keep (cacheAffinity false sets
//     both, and latencyWeight 2). On that host the server
//     is random with probability ∝ exp(−(score − host best)/0.5), none 3
//     or more worse (a soft version of Prequal's "cold" set): siblings
//     near each other share the traffic instead of herding onto one while
//     the view is stale, and a sibling one point worse still gets about
//     1/8 as much, which keeps its latency estimate fresh so it can come
//     back (a hard cut-off starves it of the samples that would forgive
//     it). A busy home server is thus retried on a sibling first. (Defaults chosen with the
//     simulation in sim_test.go and the load test: spilling too eagerly
//     loses more to cache misses than it saves in queueing.)
//  3. If no server of those hosts is usable, power of two choices over all
//     live servers: two random usable ones (up to 16 draws), the lower score
//     wins (host rank = spillHosts+1); then a full scan; if every server is
//     tripped, tried or on an excluded host, the least bad one not in flight
//     (any, when not hedging), so a live server is always found for a
//     primary dispatch.
//  4. Hedging (hedge = true): HedgeDelay = DataTimeout =
//     clamp(StartLatencyP95, hedgeDelayMin, hedgeDelayMax), or
//     hedgeDelayDefault while the p95 is unknown. A hedge is declined
//     (ErrNoHedge) while RecentHedges ≥ hedgeBudget × RecentDispatches (with
//     at least one hedge counted). The hedge goes first to a sibling of the
//     newest in-flight attempt's server on the same host (keeps the cache),
//     picked softly as in 2 among the healthy ones (not tripped, no decayed
//     errors, latency L below 2 × p95, not tried or in flight in this
//     scan), if the host is not suspect (its newest heartbeat not older than
//     staleHeartbeat, no other attempt of this scan in flight on it, none
//     timed out or stalled there, and not silent: when the attempt was not
//     even started, some server of the host answered after it was sent);
//     otherwise it is scored as in 2–3 with that host excluded.
package selection

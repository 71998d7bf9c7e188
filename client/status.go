package client

import (
	"slices"

	"github.com/scanplane/scanplane/messages"
)

// Status is a coordinator's status: its counters, the scan servers in
// its view (Servers), the live coordinators' leases (Coordinators), the
// tables it knows (Tables) and, from Client.Status, every other live
// coordinator's counters (Peers). Its JSON encoding (encoding/json) has
// the field names of the coordinators' /status JSON and of scanctl
// status --json.
type Status struct {
	// Servers: the scan servers in this coordinator's view, by id.
	Servers []ServerStatus `json:"servers"`
	// TabletActors: tablet actors active on this coordinator.
	TabletActors uint32 `json:"tablet_actors"`
	// ScansStarted: scan requests this coordinator started.
	ScansStarted uint64 `json:"scans_started"`
	// ScansFailed: scan requests that ended in an error.
	ScansFailed uint64 `json:"scans_failed"`
	// Dispatches: attempts sent to scan servers.
	Dispatches uint64 `json:"dispatches"`
	// Hedges: hedged attempts (a second server started while the first was slow).
	Hedges uint64 `json:"hedges"`
	// ProfilesSummary: the selection profiles, one line each.
	ProfilesSummary string `json:"profiles_summary"`
	// StartedUnixMs: when this coordinator started (Unix ms, its clock).
	StartedUnixMs int64 `json:"started_unix_ms"`
	// Busy: attempts a scan server refused as busy.
	Busy uint64 `json:"busy"`
	// Timeouts: attempts that timed out.
	Timeouts uint64 `json:"timeouts"`
	// DeadLetters: messages the actor system could not deliver
	DeadLetters uint64 `json:"dead_letters"`
	// PublishErrors: NATS publishes that failed
	PublishErrors uint64 `json:"publish_errors"`
	// BadMessages: wire messages refused by validation (heartbeats, signals, requests)
	BadMessages uint64 `json:"bad_messages"`
	// Flows: scan requests in flight in tablet actors
	Flows uint32 `json:"flows"`
	// HostActors: host actors (one per scan-server host).
	HostActors uint32 `json:"host_actors"`
	// Overloaded: requests refused because a bounded queue was full
	Overloaded uint64 `json:"overloaded"`
	// MemberID: this coordinator's lease key (ClusterInfo.member_id)
	MemberID string `json:"member_id"`
	// Coordinators: the live coordinator leases this coordinator sees, by member_id
	Coordinators []CoordinatorInfo `json:"coordinators"`
	// ProbesSent: Prequal probes sent to scan servers (policy prequal)
	ProbesSent uint64 `json:"probes_sent"`
	// ProbeReplies: probe answers fed into a prequal pool
	ProbeReplies uint64 `json:"probe_replies"`
	// Version: the coordinator's build version ("devel" when the build has none)
	Version string `json:"version"`
	// Tables: the tables in this coordinator's metadata view, by name
	Tables []TableStatus `json:"tables"`
	// DirectRequests: scan requests a client sent straight to a tablet actor (not through the router)
	DirectRequests uint64 `json:"direct_requests"`
	// Rerouted: client messages for a tablet actor that had stopped, sent on to the router
	Rerouted uint64 `json:"rerouted"`
	// Address: this coordinator's actor address
	Address string `json:"address"`
	// Reforwarded: forwards to an owner that were not delivered and were routed again
	Reforwarded uint64 `json:"reforwarded"`
	// ProgressSent: ScanProgress messages sent to clients
	ProgressSent uint64 `json:"progress_sent"`
	// ActorFailures: actor panics recovered by supervision
	ActorFailures uint64 `json:"actor_failures"`
	// Peers: every other live coordinator's own counters (their servers, tables, leases and peers left out), as they answered this one's /status; a coordinator that did not answer in time is missing.
	Peers []Status `json:"peers"`
}

// ServerStatus is one scan server as a coordinator sees it.
type ServerStatus struct {
	// ID: the server id (host:port/index).
	ID string `json:"id"`
	// Host: its host.
	Host string `json:"host"`
	// Zone: its zone.
	Zone string `json:"zone"`
	// Group: its group (placement).
	Group string `json:"group"`
	// Alive: it heartbeats.
	Alive bool `json:"alive"`
	// QueueLen: scans waiting in its queue at its last heartbeat.
	QueueLen uint32 `json:"queue_len"`
	// InFlight: scans this coordinator has running on it.
	InFlight uint32 `json:"in_flight"`
	// Errors: its error rate (decayed).
	Errors float64 `json:"errors"`
	// BusyTotal: busy signals from it, every coordinator's.
	BusyTotal uint64 `json:"busy_total"`
	// Dispatched: attempts sent to it.
	Dispatched uint64 `json:"dispatched"`
	// CacheHitRatio: its host's block cache hit ratio.
	CacheHitRatio float64 `json:"cache_hit_ratio"`
	// LastHeartbeatUnixMs: when its last heartbeat came (Unix ms).
	LastHeartbeatUnixMs int64 `json:"last_heartbeat_unix_ms"`
	// Incarnation: random per server start: a change means a restart.
	Incarnation string `json:"incarnation"`
	// Timeouts: timeouts on it, every coordinator's.
	Timeouts uint64 `json:"timeouts"`
	// Slowdowns: times it was seen slow.
	Slowdowns uint32 `json:"slowdowns"`
	// StartLatencyUs: EWMA of dispatch → first data, decayed toward the fleet median
	StartLatencyUs int64 `json:"start_latency_us"`
	// LastStartUnixMs: when the last start-latency sample was taken
	LastStartUnixMs int64 `json:"last_start_unix_ms"`
	// Hedges: this coordinator's attempts on the server since it (or this incarnation of the server) started: hedges among the dispatches, and the attempts that ended busy, timed out, or in an error or a stall. busy_total and timeouts above count the load signals of every coordinator and scan server instead.
	Hedges uint64 `json:"hedges"`
	// AttemptsBusy: this coordinator's attempts on it that ended busy.
	AttemptsBusy uint64 `json:"attempts_busy"`
	// AttemptsTimedOut: ... that timed out.
	AttemptsTimedOut uint64 `json:"attempts_timed_out"`
	// AttemptsFailed: ... that ended in an error or a stall.
	AttemptsFailed uint64 `json:"attempts_failed"`
}

// CoordinatorInfo is one live coordinator's lease as a coordinator sees it.
type CoordinatorInfo struct {
	// CoordinatorAddress: actor remote host:port
	CoordinatorAddress string `json:"coordinator_address"`
	// RouterID: actor id of the scan router
	RouterID string `json:"router_id"`
	// HTTPAddress: its HTTP port (metrics, public API).
	HTTPAddress string `json:"http_address"`
	// StartedUnixMs: when it started (Unix ms, its clock).
	StartedUnixMs int64 `json:"started_unix_ms"`
	// Version: its build version.
	Version string `json:"version"`
	// Incarnation: random per coordinator start: a change means a restart
	Incarnation string `json:"incarnation"`
	// MemberID: the lease key: unique per process start (the actor system id); [A-Za-z0-9_=-], at most 128 bytes
	MemberID string `json:"member_id"`
	// NATSNode: name of the embedded NATS server; empty with an external NATS
	NATSNode string `json:"nats_node"`
	// NATSURL: client URL of the embedded NATS server; empty with an external NATS
	NATSURL string `json:"nats_url"`
	// RenewedUnixMs: when the holder last renewed the lease (its clock; informative only)
	RenewedUnixMs int64 `json:"renewed_unix_ms"`
	// TabletActors: tablet actors (grains) active on this coordinator at the last renewal
	TabletActors uint32 `json:"tablet_actors"`
	// Kinds: Proto.Actor cluster grain kinds this member hosts
	Kinds []string `json:"kinds"`
	// ClusterName: Proto.Actor cluster name
	ClusterName string `json:"cluster_name"`
}

// TableStatus is one table as a coordinator's metadata view has it.
type TableStatus struct {
	// Name: the table.
	Name string `json:"name"`
	// CurrentGeneration: the newest current generation seen (0: only cached generations known)
	CurrentGeneration uint64 `json:"current_generation"`
	// CachedGenerations: generations whose metadata the coordinator holds, ascending
	CachedGenerations []uint64 `json:"cached_generations"`
}

func statusFrom(m *messages.StatusReply) Status {
	out := Status{
		TabletActors:    m.GetTabletActors(),
		ScansStarted:    m.GetScansStarted(),
		ScansFailed:     m.GetScansFailed(),
		Dispatches:      m.GetDispatches(),
		Hedges:          m.GetHedges(),
		ProfilesSummary: m.GetProfilesSummary(),
		StartedUnixMs:   m.GetStartedUnixMs(),
		Busy:            m.GetBusy(),
		Timeouts:        m.GetTimeouts(),
		DeadLetters:     m.GetDeadLetters(),
		PublishErrors:   m.GetPublishErrors(),
		BadMessages:     m.GetBadMessages(),
		Flows:           m.GetFlows(),
		HostActors:      m.GetHostActors(),
		Overloaded:      m.GetOverloaded(),
		MemberID:        m.GetMemberId(),
		ProbesSent:      m.GetProbesSent(),
		ProbeReplies:    m.GetProbeReplies(),
		Version:         m.GetVersion(),
		DirectRequests:  m.GetDirectRequests(),
		Rerouted:        m.GetRerouted(),
		Address:         m.GetAddress(),
		Reforwarded:     m.GetReforwarded(),
		ProgressSent:    m.GetProgressSent(),
		ActorFailures:   m.GetActorFailures(),
	}
	out.Servers = make([]ServerStatus, 0, len(m.GetServers()))
	for _, x := range m.GetServers() {
		out.Servers = append(out.Servers, serverStatusFrom(x))
	}
	out.Coordinators = make([]CoordinatorInfo, 0, len(m.GetCoordinators()))
	for _, x := range m.GetCoordinators() {
		out.Coordinators = append(out.Coordinators, coordinatorInfoFrom(x))
	}
	out.Tables = make([]TableStatus, 0, len(m.GetTables()))
	for _, x := range m.GetTables() {
		out.Tables = append(out.Tables, tableStatusFrom(x))
	}
	out.Peers = make([]Status, 0, len(m.GetPeers()))
	for _, x := range m.GetPeers() {
		out.Peers = append(out.Peers, statusFrom(x))
	}
	return out
}

func serverStatusFrom(m *messages.ServerStatus) ServerStatus {
	out := ServerStatus{
		ID:                  m.GetId(),
		Host:                m.GetHost(),
		Zone:                m.GetZone(),
		Group:               m.GetGroup(),
		Alive:               m.GetAlive(),
		QueueLen:            m.GetQueueLen(),
		InFlight:            m.GetInFlight(),
		Errors:              m.GetErrors(),
		BusyTotal:           m.GetBusyTotal(),
		Dispatched:          m.GetDispatched(),
		CacheHitRatio:       m.GetCacheHitRatio(),
		LastHeartbeatUnixMs: m.GetLastHeartbeatUnixMs(),
		Incarnation:         m.GetIncarnation(),
		Timeouts:            m.GetTimeouts(),
		Slowdowns:           m.GetSlowdowns(),
		StartLatencyUs:      m.GetStartLatencyUs(),
		LastStartUnixMs:     m.GetLastStartUnixMs(),
		Hedges:              m.GetHedges(),
		AttemptsBusy:        m.GetAttemptsBusy(),
		AttemptsTimedOut:    m.GetAttemptsTimedOut(),
		AttemptsFailed:      m.GetAttemptsFailed(),
	}
	return out
}

func coordinatorInfoFrom(m *messages.ClusterInfo) CoordinatorInfo {
	out := CoordinatorInfo{
		CoordinatorAddress: m.GetCoordinatorAddress(),
		RouterID:           m.GetRouterId(),
		HTTPAddress:        m.GetHttpAddress(),
		StartedUnixMs:      m.GetStartedUnixMs(),
		Version:            m.GetVersion(),
		Incarnation:        m.GetIncarnation(),
		MemberID:           m.GetMemberId(),
		NATSNode:           m.GetNatsNode(),
		NATSURL:            m.GetNatsUrl(),
		RenewedUnixMs:      m.GetRenewedUnixMs(),
		TabletActors:       m.GetTabletActors(),
		Kinds:              slices.Clone(m.GetKinds()),
		ClusterName:        m.GetClusterName(),
	}
	return out
}

func tableStatusFrom(m *messages.TableStatus) TableStatus {
	out := TableStatus{
		Name:              m.GetName(),
		CurrentGeneration: m.GetCurrentGeneration(),
		CachedGenerations: slices.Clone(m.GetCachedGenerations()),
	}
	return out
}

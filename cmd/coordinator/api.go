package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"strings"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/coordinator"
	"github.com/scanplane/scanplane/internal/clientsys"
	"github.com/scanplane/scanplane/messages"
)

// apiClient starts the client the public API (package gateway) scans
// with: on the coordinator's own actor system, sending to its own router,
// with the coordinator's certificate on NATS.
func apiClient(ctx context.Context, co *coordinator.Coordinator, natsURL string, tlsCfg *tls.Config, log *slog.Logger) (*client.Client, error) {
	cfg := client.DefaultConfig()
	cfg.NATSURL, cfg.Coordinator, cfg.TLS = natsURL, co.Address(), tlsCfg
	cfg.Logger = log
	return client.Dial(clientsys.WithSystem(ctx, co.ActorSystem()), cfg)
}

// apiStatus is a coordinator's status as the public API answers it.
func apiStatus(st *messages.StatusReply) *scanplanev1.StatusResponse {
	out := &scanplanev1.StatusResponse{MemberId: st.GetMemberId(), Version: st.GetVersion(), StartedUnixMs: st.GetStartedUnixMs()}
	for _, ci := range st.GetCoordinators() {
		out.Coordinators = append(out.Coordinators, &scanplanev1.Coordinator{MemberId: ci.GetMemberId(), Address: ci.GetCoordinatorAddress(),
			HttpAddress: ci.GetHttpAddress(), Version: ci.GetVersion(), StartedUnixMs: ci.GetStartedUnixMs()})
	}
	for _, s := range st.GetServers() {
		out.Servers = append(out.Servers, &scanplanev1.ScanServer{Id: s.GetId(), Host: s.GetHost(), Zone: s.GetZone(), Group: s.GetGroup(),
			Alive: s.GetAlive(), QueueLen: s.GetQueueLen(), InFlight: s.GetInFlight(), CacheHitRatio: s.GetCacheHitRatio()})
	}
	if p := strings.TrimSpace(st.GetProfilesSummary()); p != "" {
		out.Profiles = strings.Split(p, "\n")
	}
	return out
}

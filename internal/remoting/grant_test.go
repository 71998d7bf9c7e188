package remoting

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scanplane/scanplane/internal/grants"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/messages"
)

// grantSeen is what an actor behind the Guard got: a ScanRequest's table
// and its grant header.
type grantSeen struct{ table, grant string }

// TestGuardGrants: on a mutual-TLS remote, a certificate from `scanctl
// secrets client alice --tables demo,logs-*` gets its scan requests for
// those tables through with its grant in GrantHeader; one for another
// table reaches only the scan entry (the router, which answers it with a
// permission error) and is refused (ReasonGrant) on the way to any other
// actor. The default client and admin certificates may scan every table
// and carry no header; a grant header from the network is refused
// whoever sends it.
func TestGuardGrants(t *testing.T) {
	sec := newSecrets(t)
	alice, err := grants.Parse("alice", "demo,logs-*")
	if err != nil {
		t.Fatal(err)
	}
	if err := secrets.IssueClient(sec.dir, alice, secrets.ClientOptions{}); err != nil {
		t.Fatal(err)
	}
	sys, g, _, addr := guardedRemoteWith(t, sec.tls(t, "coordinator"))
	seen := make(chan grantSeen, 16)
	for _, id := range []string{"tablet", ScanEntry} {
		_, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
			switch m := c.Message().(type) {
			case *messages.ScanRequest:
				var h string
				if hd := c.MessageHeader(); hd != nil {
					h = hd.Get(GrantHeader)
				}
				pg, ok, err := PeerGrant(c)
				if ok != (h != "") || err != nil || (ok && pg.URI().String() != h) {
					t.Errorf("PeerGrant = %v, %v, %v for header %q", pg, ok, err, h)
				}
				seen <- grantSeen{table: m.GetTablet().GetTable(), grant: h}
			case *messages.Cancel:
				seen <- grantSeen{table: "marker " + m.GetReason()}
			}
		}), id)
		if err != nil {
			t.Fatal(err)
		}
	}
	const me = "127.0.0.1:7000"
	tablet, entry := actor.NewPID(sys.Address(), "tablet"), actor.NewPID(sys.Address(), ScanEntry)
	req := func(table string) *messages.ScanRequest {
		return &messages.ScanRequest{RequestId: "r", Client: &messages.Pid{Address: me, Id: "c"}, Tablet: &messages.TabletRef{Table: table}}
	}
	aliceURI := alice.URI().String()
	forged := func(b *remote.MessageBatch) *remote.MessageBatch {
		return withEnvelope(b, func(e *remote.MessageEnvelope) {
			e.MessageHeader = &remote.MessageHeader{HeaderData: map[string]string{GrantHeader: grants.All("x").URI().String()}}
		})
	}
	for _, tc := range []struct {
		name, cert string
		batch      *remote.MessageBatch
		to         *actor.PID
		want       *grantSeen // nil: refused for reason
		reason     Reason
	}{
		{"alice scans demo", "alice", batchOf(tablet, req("demo")), tablet, &grantSeen{"demo", aliceURI}, 0},
		{"alice scans logs-7", "alice", batchOf(tablet, req("logs-7")), tablet, &grantSeen{"logs-7", aliceURI}, 0},
		{"alice scans other on a tablet actor", "alice", batchOf(tablet, req("other")), tablet, nil, ReasonGrant},
		{"alice scans logs on a tablet actor", "alice", batchOf(tablet, req("logs")), tablet, nil, ReasonGrant},
		{"alice scans other at the router", "alice", batchOf(entry, req("other")), entry, &grantSeen{"other", aliceURI}, 0},
		// Fields as an unmarshal merges them: the last table counts.
		{"alice, tablet field twice, other last", "alice", batchOf(tablet, req("demo"), req("other")), tablet, nil, ReasonGrant},
		{"alice, tablet field twice, demo last", "alice", batchOf(tablet, req("other"), req("demo")), tablet, &grantSeen{"demo", aliceURI}, 0},
		{"alice forges a grant header", "alice", forged(batchOf(tablet, req("demo"))), tablet, nil, ReasonHeader},
		{"client scans other", "client", batchOf(tablet, req("other")), tablet, &grantSeen{"other", ""}, 0},
		{"client forges a grant header", "client", forged(batchOf(tablet, req("other"))), tablet, nil, ReasonHeader},
		{"admin scans other", "admin", batchOf(tablet, req("other")), tablet, &grantSeen{"other", ""}, 0},
		{"coordinator forwards other", "coordinator", batchOf(tablet, req("other")), tablet, &grantSeen{"other", ""}, 0},
		{"coordinator forges a grant header", "coordinator", forged(batchOf(tablet, req("other"))), tablet, nil, ReasonHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := refusedCounts(g)
			conn := dialTLS(t, addr, sec.tls(t, tc.cert))
			sendStream(t, conn, me, tc.batch, batchOf(tc.to, &messages.Cancel{Reason: tc.name}))
			var got []grantSeen
			for timeout := time.After(30 * time.Second); ; {
				select {
				case s := <-seen:
					if s.table != "marker "+tc.name {
						got = append(got, s)
						continue
					}
				case <-timeout:
					t.Fatal("the marker did not arrive")
				}
				break
			}
			d := diffCounts(before, refusedCounts(g))
			if tc.want != nil {
				if len(got) != 1 || got[0] != *tc.want || len(d) != 0 {
					t.Fatalf("got %+v, refusals %v; want %+v delivered", got, d, *tc.want)
				}
				return
			}
			if len(got) != 0 || len(d) != 1 || d[tc.reason] != 1 {
				t.Fatalf("got %+v, refusals %v; want one %q refusal", got, d, tc.reason)
			}
		})
	}
}

// TestGuardRefusesBadGrant: a client certificate of the cluster CA whose
// grant URI does not parse gets no stream (PermissionDenied, counted as
// no_role), so a mistyped grant never widens into every table.
func TestGuardRefusesBadGrant(t *testing.T) {
	sec := newSecrets(t)
	sys, g, _, addr := guardedRemoteWith(t, sec.tls(t, "coordinator"))
	bad, err := url.Parse("scanplane://principal/alice?tables=de.mo")
	if err != nil {
		t.Fatal(err)
	}
	cfg := sec.certWith(t, secrets.CertSpec{CommonName: "scanplane client", Role: "client", URIs: []*url.URL{bad}})
	before := g.RefusedBy(ReasonNoRole)
	err = sendStreamErr(t, dialTLS(t, addr, cfg), "127.0.0.1:7000",
		batchOf(actor.NewPID(sys.Address(), "probe"), &messages.ScanRequest{Tablet: &messages.TabletRef{Table: "demo"}}))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `table "de.mo"`) || g.RefusedBy(ReasonNoRole) != before+1 {
		t.Fatalf("stream ended with %v, no_role refusals %d; want PermissionDenied naming the bad table, one refusal", err, g.RefusedBy(ReasonNoRole)-before)
	}
}

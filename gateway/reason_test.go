package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/scanplane/scanplane/client"
)

// TestEveryCodeHasAReason: every error the gateway maps to a status code
// also has a reason in the status's ErrorInfo, so the API client maps it
// back to the same error.
func TestEveryCodeHasAReason(t *testing.T) {
	for _, c := range codes {
		reason := client.APIErrorReason(fmt.Errorf("x: %w", c.err))
		if reason == "" {
			t.Errorf("%v (code %v) has no API error reason", c.err, c.code)
			continue
		}
		var ce *connect.Error
		if !errors.As(toStatus(fmt.Errorf("x: %w", c.err)), &ce) || len(ce.Details()) != 1 {
			t.Errorf("toStatus(%v) carries no ErrorInfo", c.err)
			continue
		}
		v, err := ce.Details()[0].Value()
		if info, ok := v.(*errdetails.ErrorInfo); err != nil || !ok || info.GetReason() != reason || info.GetDomain() != client.APIErrorDomain {
			t.Errorf("toStatus(%v): detail %v, %v; want ErrorInfo %s in %s", c.err, v, err, reason, client.APIErrorDomain)
		}
	}
}

// TestAPIClientErrors: the Go client's API type, against this server
// (gRPC over h2c), gets the client library's errors back: a denied
// table is ErrPermissionDenied and asks no other address, a server with
// no client yet is ErrNoCoordinator once CoordinatorWait passed, a scan
// past MaxScans is ErrOverloaded.
func TestAPIClientErrors(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var enter sync.Once
	cfg := DefaultConfig()
	cfg.MaxScans = 1
	cfg.Client = func() *client.Client { return nil }
	cfg.MayScan = func(p Principal, table string) error {
		switch table {
		case "secret":
			return fmt.Errorf("principal %q may not scan table %q", p.Name, table)
		case "hold": // the held scan is retried (no client): it signals once
			enter.Do(func() { close(entered) })
			<-release
		}
		return nil
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Register(mux)
	srv := httptest.NewUnstartedServer(mux)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)

	ccfg := client.DefaultConfig()
	ccfg.API = []string{srv.Listener.Addr().String()}
	ccfg.CoordinatorWait = 200 * time.Millisecond
	a, err := client.NewAPI(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	scan := func(table string) error {
		rows := a.Scan(context.Background(), table, client.Range{}, client.ScanOptions{})
		defer rows.Close()
		for rows.Next() {
		}
		return rows.Err()
	}
	if err := scan("secret"); !errors.Is(err, client.ErrPermissionDenied) {
		t.Errorf("denied table: %v; want ErrPermissionDenied", err)
	}
	if err := scan("t"); !errors.Is(err, client.ErrNoCoordinator) {
		t.Errorf("no client: %v; want ErrNoCoordinator", err)
	}
	held := make(chan error, 1)
	go func() { held <- scan("hold") }()
	<-entered
	err = scan("t")
	close(release)
	<-held
	if !errors.Is(err, client.ErrOverloaded) {
		t.Errorf("scan past MaxScans: %v; want ErrOverloaded", err)
	}
}

package cliutil

import (
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/scanplane/scanplane/internal/netlimit"
	"github.com/scanplane/scanplane/internal/secrets"
)

// HTTPTokenFile is the bearer token file of a secrets directory
// (DIR/http.token, 0600): 32 random bytes, hex.
const HTTPTokenFile = secrets.HTTPTokenFile

// HTTPTokenUsage is the usage text of a --http-token-file flag.
const HTTPTokenUsage = "with --secrets: `FILE` holding the bearer token the HTTP endpoint accepts besides a client or admin certificate (default: DIR/" + HTTPTokenFile + " of --secrets when it exists)"

// HTTPRoles are the certificate roles (the subject's organizational unit,
// see CertSpec) a secured HTTP endpoint accepts as authentication.
var HTTPRoles = []string{"client", "admin"}

// ErrHTTPUnauthorized is what a secured HTTP endpoint answers (401) to a
// request that presents neither a client or admin certificate of the
// cluster CA nor the bearer token.
var ErrHTTPUnauthorized = errors.New("unauthorized: present a client or admin certificate of the cluster CA, or Authorization: Bearer <token of --http-token-file>")

// ReadHTTPToken reads a bearer token file (surrounding white space is
// not part of the token). A file that group or others may read, or a
// token shorter than 16 bytes, is refused; errors name flag.
func ReadHTTPToken(flag, path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("--%s %s has mode %v, readable by others; make it 0600 (chmod 600 %s)", flag, path, st.Mode().Perm(), path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	tok := []byte(strings.TrimSpace(string(data)))
	if len(tok) < 16 {
		return nil, fmt.Errorf("--%s %s: the token has %d bytes, want at least 16", flag, path, len(tok))
	}
	return tok, nil
}

// HTTPSecurity is how a secured HTTP endpoint (--http with --secrets)
// authenticates: TLS with the role's certificate, a client certificate
// of the cluster CA with role client or admin, or the bearer token. A
// nil *HTTPSecurity is plain HTTP without authentication.
type HTTPSecurity struct {
	TLS *tls.Config
	// Token: the accepted bearer token; nil = certificates only.
	Token []byte
}

// LoadHTTPSecurity returns the HTTP security of a process of role with
// secrets directory dir (SecretsDir's value) and --http-token-file
// tokenFile: nil for an empty dir (plain HTTP; a tokenFile without dir is
// an error, a token in clear text protects nothing). The token is
// tokenFile's, else DIR/http.token's when that exists, else none
// (certificates only).
func LoadHTTPSecurity(dir, role, tokenFile string) (*HTTPSecurity, error) {
	if dir == "" {
		if tokenFile != "" {
			return nil, errors.New("--http-token-file needs --secrets (a bearer token over plain HTTP travels in clear text)")
		}
		return nil, nil
	}
	cfg, err := RemoteTLS(dir, role)
	if err != nil {
		return nil, err
	}
	// Certificates are optional at the handshake (a token may do
	// instead), but one given must verify against the cluster CA: a
	// certificate of another CA fails the handshake.
	cfg.ClientAuth = tls.VerifyClientCertIfGiven
	s := &HTTPSecurity{TLS: cfg}
	flag := "http-token-file"
	if tokenFile == "" {
		p := filepath.Join(dir, HTTPTokenFile)
		if _, err := os.Stat(p); err != nil {
			return s, nil
		}
		tokenFile, flag = p, "secrets"
	}
	if s.Token, err = ReadHTTPToken(flag, tokenFile); err != nil {
		return nil, err
	}
	return s, nil
}

// Handler wraps h: a request without a verified client or admin
// certificate or the bearer token gets 401 (ErrHTTPUnauthorized's text
// and nothing of h); a certificate of another role of the cluster gets
// 403. A nil s returns h.
func (s *HTTPSecurity) Handler(h http.Handler) http.Handler {
	if s == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			leaf := r.TLS.VerifiedChains[0][0]
			for _, ou := range leaf.Subject.OrganizationalUnit {
				if slices.Contains(HTTPRoles, ou) {
					h.ServeHTTP(w, r)
					return
				}
			}
			if !s.tokenOK(r) {
				http.Error(w, fmt.Sprintf("forbidden: certificate role %v; want %s", leaf.Subject.OrganizationalUnit, strings.Join(HTTPRoles, " or ")), http.StatusForbidden)
				return
			}
		}
		if !s.tokenOK(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="scanplane"`)
			http.Error(w, ErrHTTPUnauthorized.Error(), http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *HTTPSecurity) tokenOK(r *http.Request) bool {
	if len(s.Token) == 0 {
		return false
	}
	auth := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), s.Token) == 1
}

// Scheme is "https" when s secures the endpoint, else "http".
func (s *HTTPSecurity) Scheme() string {
	if s == nil {
		return "http"
	}
	return "https"
}

// ListenHTTP listens on addr (host:port; port 0 = ephemeral) for an HTTP
// endpoint; ServeListener adds the TLS of sec (nil = plain) and the
// limits. Errors name flag.
func ListenHTTP(flag, addr string, sec *HTTPSecurity) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", flag, addr, err)
	}
	return l, nil
}

// ServeListener is ServeListenerLimits with DefaultHTTPLimits.
func ServeListener(l net.Listener, handler http.Handler, sec *HTTPSecurity, log *slog.Logger) func() {
	return ServeListenerLimits(l, handler, sec, log, DefaultHTTPLimits)
}

// ServeListenerLimits serves handler, wrapped by sec's authentication, on
// l (a listener of ListenHTTP: TLS is added here, over the connection
// cap) as HTTP/1.1 and HTTP/2 (h2c on plain TCP) within lim until the
// returned close function is called. The server's own errors go to log
// at warn level (nil = the standard logger), at most lim.LogBurst lines
// per lim.LogEvery and then one line with the number held back: a
// refused TLS handshake is "http: TLS handshake error from ADDR: REASON"
// (a certificate of another CA or an expired one), a connection over
// the cap "http: refused connection from ADDR: N connections open, the
// most this endpoint takes". lim must be valid (HTTPLimits.Validate).
func ServeListenerLimits(l net.Listener, handler http.Handler, sec *HTTPSecurity, log *slog.Logger, lim HTTPLimits) func() {
	emit := func(s string) { stdlog.Print(s) }
	if log != nil {
		emit = func(s string) { log.Warn(s) }
	}
	th := newLogThrottle(lim.LogBurst, lim.LogEvery, emit, func(n int, every time.Duration) {
		emit(fmt.Sprintf("http: %d more server errors (failed TLS handshakes, refused connections) in the last %v not logged", n, every))
	})
	capped := &capListener{Listener: l, slots: netlimit.NewSlots(lim.MaxConns), sources: netlimit.NewSources(lim.MaxConnsPerSource),
		onRefuse: func(addr string, open int64, fromSource bool) {
			if fromSource {
				th.line(fmt.Sprintf("http: refused connection from %s: %d connections open from its source, the most this endpoint takes", addr, open))
				return
			}
			th.line(fmt.Sprintf("http: refused connection from %s: %d connections open, the most this endpoint takes", addr, open))
		}}
	// HTTP/2 besides HTTP/1: over TLS by ALPN, over plain TCP with prior
	// knowledge (h2c), so that gRPC clients reach the API the endpoint
	// may serve.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(true)
	var ln net.Listener = capped
	if sec != nil {
		cfg := sec.TLS.Clone()
		if !slices.Contains(cfg.NextProtos, "h2") {
			cfg.NextProtos = append([]string{"h2", "http/1.1"}, cfg.NextProtos...)
		}
		ln = tls.NewListener(capped, cfg)
	}
	hs := &http.Server{Handler: sec.Handler(handler), ReadHeaderTimeout: lim.HeaderTimeout, IdleTimeout: lim.IdleTimeout,
		ErrorLog: stdlog.New(th, "", 0), Protocols: &protocols}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(ln)
	}()
	return func() { _ = hs.Close(); <-done; th.stop() }
}

// HandlePprof registers Go's profiling handlers (net/http/pprof) under
// /debug/pprof/ on mux, an endpoint's own mux: they are served only on
// its --http listener and behind its authentication (ServeListener). The
// package's init also registers them on http.DefaultServeMux, which
// scanplane's processes never serve.
func HandlePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index) // and every named profile: heap, allocs, goroutine, ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

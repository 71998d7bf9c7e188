package clustertest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestGet: Get sends the bearer token only when one is given and returns
// the status and body the server wrote.
func TestGet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "method "+r.Method, http.StatusMethodNotAllowed)
			return
		}
		if h, ok := r.Header["Authorization"]; ok {
			if len(h) != 1 || h[0] != "Bearer tok" {
				http.Error(w, "bad header", http.StatusForbidden)
				return
			}
			_, _ = io.WriteString(w, "hello "+r.URL.Path)
			return
		}
		http.Error(w, "no token", http.StatusUnauthorized)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		bearer string
		code   int
		body   string
	}{
		{"", http.StatusUnauthorized, "no token\n"},
		{"tok", http.StatusOK, "hello /p"},
		{"other", http.StatusForbidden, "bad header\n"},
	} {
		code, body, err := Get(context.Background(), srv.Client(), srv.URL+"/p", tc.bearer)
		if err != nil || code != tc.code || body != tc.body {
			t.Errorf("bearer %q: %d %q %v; want %d %q", tc.bearer, code, body, err, tc.code, tc.body)
		}
	}
	if _, _, err := Get(context.Background(), srv.Client(), "http://\x7f", ""); err == nil {
		t.Error("a bad URL: no error")
	}
}

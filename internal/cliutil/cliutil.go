// Package cliutil holds what the scanplane commands share: logging setup,
// flag parsing and help (one-line flag errors, usage checks), the build
// version, byte-size flags, ready files, the HTTP endpoint and its status
// JSON, and parent-death handling. It owns no state; everything is safe
// for concurrent use.
package cliutil

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Logger returns a logger on w at the named level (--log-level: debug,
// info, warn, error) in the named format (--log-format: text, the
// key=value lines of slog.TextHandler, or json, one JSON object per line
// from slog.JSONHandler with the keys time, level, msg and one per
// attribute).
func Logger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// LogFormatUsage is the usage text of a --log-format flag.
const LogFormatUsage = "log line `FORMAT`: text (key=value) or json (one object per line)"

var sizeRe = regexp.MustCompile(`^(\d+)\s*([KMGT]i?B?|B)?$`)

// ParseBytes parses sizes like 256MiB, 64KiB, 1GB, 1048576.
func ParseBytes(s string) (int64, error) {
	m := sizeRe.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (KiB, MiB, GiB)", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %v", s, err)
	}
	mult := int64(1)
	switch strings.TrimSuffix(strings.TrimSuffix(m[2], "B"), "i") {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	case "T":
		mult = 1 << 40
	}
	return n * mult, nil
}

// ServeHTTP listens on addr (host:port; port 0 = ephemeral) and serves
// handler there until the returned close function is called. It returns
// the address it listens on. An address that cannot be listened on is an
// error naming flag.
func ServeHTTP(flag, addr string, handler http.Handler) (string, func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--%s %s: %w", flag, addr, err)
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(l)
	}()
	return l.Addr().String(), func() { _ = hs.Close(); <-done }, nil
}

// ExitWhenStdinCloses calls fn once stdin reaches EOF: a parent that holds
// our stdin pipe and dies takes us with it (scanctl up's children).
func ExitWhenStdinCloses(fn func()) {
	go func() {
		_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
		fn()
	}()
}

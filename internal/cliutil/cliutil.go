// Package cliutil holds what the scanplane commands share: logging setup,
// byte-size flags, ready files, and parent-death handling. It owns no
// state; everything is safe for concurrent use.
package cliutil

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Logger returns a text logger on w at the named level.
func Logger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

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

// WriteReadyFile atomically writes v as JSON to path (no-op for "").
func WriteReadyFile(path string, v any) error {
	if path == "" {
		return nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ExitWhenStdinCloses calls fn once stdin reaches EOF: a parent that holds
// our stdin pipe and dies takes us with it (scanctl up's children).
func ExitWhenStdinCloses(fn func()) {
	go func() {
		_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
		fn()
	}()
}

// Ready is what the coordinator and scanserver write to --ready-file.
type Ready struct {
	NATS        string   `json:"nats,omitempty"`
	Actor       string   `json:"actor,omitempty"`
	HTTP        string   `json:"http,omitempty"`
	Host        string   `json:"host,omitempty"`
	Servers     []string `json:"servers,omitempty"`
	PID         int      `json:"pid"`
	Incarnation string   `json:"incarnation,omitempty"`
}

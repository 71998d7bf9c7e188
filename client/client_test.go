package client

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/scanplane/scanplane/tablets"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(*Config){
		"NATSURL":        func(c *Config) { c.NATSURL = "" },
		"Window":         func(c *Config) { c.Window = 0 },
		"BatchRows":      func(c *Config) { c.BatchRows = 1 << 30 },
		"BatchBytes":     func(c *Config) { c.BatchBytes = 100 },
		"Window 256":     func(c *Config) { c.Window, c.BatchBytes = 256, 1<<20 },
		"StallTimeout":   func(c *Config) { c.StallTimeout = 0 },
		"IdleTimeout":    func(c *Config) { c.IdleTimeout = -1 },
		"MaxResumes":     func(c *Config) { c.MaxResumes = -1 },
		"RequestTimeout": func(c *Config) { c.RequestTimeout = 0 },
		"Listen":         func(c *Config) { c.Listen = "nope" },
		"Coordinator":    func(c *Config) { c.Coordinator = "nope" },
	}
	for field, mod := range cases {
		c := DefaultConfig()
		mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: want an error naming the field, got %v", field, err)
		}
		if _, err := New(c); err == nil {
			t.Errorf("%s: New accepted a bad config", field)
		}
	}
}

func TestScanRejectsBadInputWithoutIO(t *testing.T) {
	c, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		table string
		rng   tablets.Range
	}{
		{"bad name!", tablets.Range{}},
		{"", tablets.Range{}},
		{"t", tablets.Range{Start: []byte("b"), End: []byte("a")}},
	} {
		rows := c.Scan(context.Background(), tc.table, tc.rng, ScanOptions{})
		if rows.Next() || rows.Err() == nil {
			t.Errorf("%q %s: want an error", tc.table, tc.rng)
		}
	}
}

func TestScanErrorIs(t *testing.T) {
	var err error = &ScanError{Code: CodeNoServers, Message: "none"}
	if !errors.Is(err, ErrScan) || !strings.Contains(err.Error(), "NO_SERVERS") {
		t.Fatal(err)
	}
}

func TestInboxOrderAndClose(t *testing.T) {
	in := newInbox()
	for i := 0; i < 100; i++ {
		in.put(i)
	}
	for i := 0; i < 100; i++ {
		m, closed := in.take()
		if closed || m.(int) != i {
			t.Fatalf("take %d: %v %v", i, m, closed)
		}
	}
	if m, closed := in.take(); m != nil || closed {
		t.Fatal("empty inbox")
	}
	in.close()
	if _, closed := in.take(); !closed {
		t.Fatal("closed inbox")
	}
}

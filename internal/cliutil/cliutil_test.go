package cliutil

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/scanplane/scanplane/messages"
)

func TestParseBytes(t *testing.T) {
	good := map[string]int64{"0": 0, "1048576": 1 << 20, "64KiB": 64 << 10, "256MiB": 256 << 20, "1GiB": 1 << 30, "2GB": 2 << 30, "3M": 3 << 20, "5B": 5, "1 MiB": 1 << 20}
	for s, want := range good {
		if got, err := ParseBytes(s); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "lots", "-1", "1.5GiB", "1XB", "MiB"} {
		if _, err := ParseBytes(s); err == nil {
			t.Errorf("ParseBytes(%q) accepted", s)
		}
	}
}

func TestLogger(t *testing.T) {
	if _, err := Logger(os.Stderr, "debug", "text"); err != nil {
		t.Fatal(err)
	}
	if _, err := Logger(os.Stderr, "loud", "text"); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Fatalf("bad level: %v", err)
	}
	if _, err := Logger(os.Stderr, "info", "xml"); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Fatalf("bad format: %v", err)
	}
	var buf bytes.Buffer
	log, err := Logger(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Info("scan done", "request", "r1", "rows", 3)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("json log line %q: %v", buf.String(), err)
	}
	if line["msg"] != "scan done" || line["request"] != "r1" || line["rows"] != 3.0 || line["level"] != "INFO" {
		t.Fatalf("json log line %q", buf.String())
	}
	buf.Reset()
	log, _ = Logger(&buf, "info", "text")
	log.Info("scan done", "request", "r1")
	if !strings.Contains(buf.String(), `msg="scan done" request=r1`) {
		t.Fatalf("text log line %q", buf.String())
	}
}

// TestWriteStatusJSON: every field is present, false and zero included,
// under the .proto names, and protojson reads it back.
func TestWriteStatusJSON(t *testing.T) {
	st := &messages.StatusReply{Servers: []*messages.ServerStatus{{Id: "a/0", Host: "a", Alive: false}}, ScansStarted: 5}
	rec := httptest.NewRecorder()
	WriteStatusJSON(rec, st)
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"scans_started", "scans_failed", "tablet_actors", "servers"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("status lacks %q: %s", k, rec.Body.String())
		}
	}
	srv := raw["servers"].([]any)[0].(map[string]any)
	if v, ok := srv["alive"]; !ok || v != false {
		t.Errorf(`server lacks "alive": false: %v`, srv)
	}
	if v, ok := srv["queue_len"]; !ok || v != 0.0 {
		t.Errorf(`server lacks "queue_len": 0: %v`, srv)
	}
	var back messages.StatusReply
	if err := protojson.Unmarshal(rec.Body.Bytes(), &back); err != nil || !proto.Equal(&back, st) {
		t.Fatalf("round trip: %v, %v", &back, err)
	}
}

// TestStatusJSONNumbers: every integer of /status is a JSON number, the
// 64-bit counters like the 32-bit ones, at any depth (servers, peers,
// tables' generation lists); fields keep the .proto order and protojson
// reads it all back.
func TestStatusJSONNumbers(t *testing.T) {
	st := &messages.StatusReply{ScansStarted: 5, Dispatches: 2, TabletActors: 3, StartedUnixMs: 1700000000123, PublishErrors: 1<<53 - 1,
		Servers:      []*messages.ServerStatus{{Id: "a/0", Host: "a", Dispatched: 2, QueueLen: 1, Errors: 0.5, CacheHitRatio: 0.25, LastHeartbeatUnixMs: 17}},
		Tables:       []*messages.TableStatus{{Name: "t", CurrentGeneration: 4, CachedGenerations: []uint64{3, 4}}},
		Coordinators: []*messages.ClusterInfo{{MemberId: "m", StartedUnixMs: 9, Kinds: []string{"tablet"}}},
		Peers:        []*messages.StatusReply{{Address: "p", ScansStarted: 7}}}
	data, err := MarshalStatus(st)
	if err != nil {
		t.Fatal(err)
	}
	var raw any
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	var walk func(path string, fd protoreflect.FieldDescriptor, v any)
	walkMsg := func(path string, md protoreflect.MessageDescriptor, v any) {
		obj, ok := v.(map[string]any)
		if !ok {
			t.Errorf("%s: %T, want an object", path, v)
			return
		}
		for i := range md.Fields().Len() {
			fd := md.Fields().Get(i)
			fv, ok := obj[string(fd.Name())]
			if !ok {
				t.Errorf("%s.%s missing", path, fd.Name())
				continue
			}
			if fd.IsList() {
				for j, e := range fv.([]any) {
					walk(fmt.Sprintf("%s.%s[%d]", path, fd.Name(), j), fd, e)
				}
				continue
			}
			walk(path+"."+string(fd.Name()), fd, fv)
		}
	}
	walk = func(path string, fd protoreflect.FieldDescriptor, v any) {
		switch fd.Kind() {
		case protoreflect.MessageKind:
			walkMsg(path, fd.Message(), v)
		case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Uint32Kind, protoreflect.Uint64Kind,
			protoreflect.Sint32Kind, protoreflect.Sint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind,
			protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind, protoreflect.FloatKind:
			if _, ok := v.(float64); !ok {
				t.Errorf("%s = %#v (%T), want a JSON number", path, v, v)
			}
		}
	}
	walkMsg("status", st.ProtoReflect().Descriptor(), raw)
	for _, want := range []string{`"scans_started":5`, `"publish_errors":9007199254740991`, `"cached_generations":[3,4]`, `"started_unix_ms":1700000000123`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("status JSON lacks %s: %s", want, data)
		}
	}
	if i, j := strings.Index(string(data), `"servers"`), strings.Index(string(data), `"tablet_actors"`); i < 0 || j < i {
		t.Errorf("fields out of .proto order: %s", data)
	}
	var back messages.StatusReply
	if err := protojson.Unmarshal(data, &back); err != nil || !proto.Equal(&back, st) {
		t.Fatalf("round trip: %v, %v", &back, err)
	}
}

// TestServeHTTP: an ephemeral port is served and closing stops it; a bad
// address is an error naming the flag.
func TestServeHTTP(t *testing.T) {
	addr, stop, err := ServeHTTP("http", "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("body %q", body)
	}
	http.DefaultClient.CloseIdleConnections()
	stop()
	if _, err := http.Get("http://" + addr + "/"); err == nil {
		t.Fatal("still serving after close")
	}
	http.DefaultClient.CloseIdleConnections()
	if _, _, err := ServeHTTP("http", "nope", nil); err == nil || !strings.Contains(err.Error(), "--http nope") {
		t.Fatalf("bad address: %v", err)
	}
}

package wire

import (
	"errors"
	"strings"
	"testing"

	"github.com/scanplane/scanplane/messages"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func TestValidateProbe(t *testing.T) {
	long := strings.Repeat("x", MaxNameLen+1)
	good := &messages.Probe{Id: 1, ReplyTo: &messages.Pid{Address: "nonhost", Id: "a"}, Server: "h:1/0"}
	if err := ValidateProbe(good); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		m     *messages.Probe
		field string
	}{
		{&messages.Probe{Id: 1, Server: "h:1/0"}, "reply_to"},
		{&messages.Probe{Id: 1, ReplyTo: &messages.Pid{Address: long, Id: "a"}}, "reply_to.address"},
		{&messages.Probe{Id: 1, ReplyTo: &messages.Pid{Address: "a", Id: "b"}, Server: long}, "server"},
	} {
		err := ValidateProbe(c.m)
		if err == nil || !strings.Contains(err.Error(), c.field) || !errors.Is(err, ErrBadMessage) {
			t.Errorf("%v: error %v does not name %s", c.m, err, c.field)
		}
	}
	// Unknown fields (a newer prober) are ignored.
	b, err := proto.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(b, 99, protowire.VarintType)
	b = protowire.AppendVarint(b, 7)
	var got messages.Probe
	if err := proto.Unmarshal(b, &got); err != nil || ValidateProbe(&got) != nil || got.GetId() != 1 {
		t.Fatalf("probe with an unknown field: %v %v %+v", err, ValidateProbe(&got), &got)
	}
	for _, c := range []struct {
		m     *messages.ProbeReply
		field string
	}{
		{&messages.ProbeReply{Server: "s"}, "id"},
		{&messages.ProbeReply{Id: 1, Rif: MaxQueueLen + MaxWorkers + 1}, "rif"},
		{&messages.ProbeReply{Id: 1, LatencyUs: -1}, "latency_us"},
		{&messages.ProbeReply{Id: 1, Server: long}, "server"},
	} {
		if err := ValidateProbeReply(c.m); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%v: error %v does not name %s", c.m, err, c.field)
		}
	}
}

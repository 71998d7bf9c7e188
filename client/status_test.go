package client

import (
	"encoding/json"
	"reflect"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/messages"
)

// fill sets every field of m to a value of its own (n, counting up), a
// list to two elements, a message once more nested (depth).
func fill(m protoreflect.Message, n *int, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		*n++
		if fd.Kind() == protoreflect.MessageKind {
			if depth == 0 {
				continue
			}
			if fd.IsList() {
				l := m.Mutable(fd).List()
				for range 2 {
					e := l.NewElement()
					fill(e.Message(), n, depth-1)
					l.Append(e)
				}
			} else {
				fill(m.Mutable(fd).Message(), n, depth-1)
			}
			continue
		}
		v := scalar(fd, *n)
		if fd.IsList() {
			l := m.Mutable(fd).List()
			l.Append(v)
			l.Append(scalar(fd, *n+1000))
			continue
		}
		m.Set(fd, v)
	}
}

func scalar(fd protoreflect.FieldDescriptor, n int) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(string(fd.Name()) + "-" + string(rune('a'+n%26)))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(n) + 0.5)
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(int64(n) << 33)
	case protoreflect.Uint64Kind:
		return protoreflect.ValueOfUint64(uint64(n) << 34)
	case protoreflect.Uint32Kind:
		return protoreflect.ValueOfUint32(uint32(n))
	}
	panic("status field of kind " + fd.Kind().String())
}

// TestStatusJSONMatchesStatusEndpoint: a Status converted from a reply
// with every field set encodes (encoding/json) to the same JSON as the
// coordinators' /status writes for the reply (cliutil.MarshalStatus):
// the same field names and values, none left out.
func TestStatusJSONMatchesStatusEndpoint(t *testing.T) {
	reply := &messages.StatusReply{}
	n := 0
	fill(reply.ProtoReflect(), &n, 2)
	want, err := cliutil.MarshalStatus(reply)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(statusFrom(reply))
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("Status JSON:\n%s\n/status JSON:\n%s", got, want)
	}
}

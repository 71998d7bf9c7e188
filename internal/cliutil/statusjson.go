package cliutil

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// WriteStatusJSON writes msg as the JSON of an HTTP status endpoint
// (MarshalStatus).
func WriteStatusJSON(w http.ResponseWriter, msg proto.Message) {
	data, err := MarshalStatus(msg)
	if err != nil {
		http.Error(w, "encoding status: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(data, '\n'))
}

// MarshalStatus encodes msg as the protobuf JSON mapping does with every
// field present (false, 0, "" and empty lists included, so a dead server
// shows "alive": false) under the .proto field names (snake_case), in
// field order, except that every integer is a JSON number: the mapping
// writes 64-bit integers as strings, which made counters of one object
// strings and numbers by their width. protojson.Unmarshal reads it back.
func MarshalStatus(msg proto.Message) ([]byte, error) {
	var b bytes.Buffer
	if err := statusMessage(&b, msg.ProtoReflect()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func statusMessage(b *bytes.Buffer, m protoreflect.Message) error {
	if !m.IsValid() {
		b.WriteString("null")
		return nil
	}
	fields := m.Descriptor().Fields()
	b.WriteByte('{')
	for i := range fields.Len() {
		fd := fields.Get(i)
		if i > 0 {
			b.WriteByte(',')
		}
		statusString(b, string(fd.Name()))
		b.WriteByte(':')
		var err error
		switch {
		case fd.IsList():
			err = statusList(b, fd, m.Get(fd).List())
		case fd.IsMap():
			err = statusMap(b, fd, m.Get(fd).Map())
		case fd.HasPresence() && !m.Has(fd):
			b.WriteString("null")
		default:
			err = statusValue(b, fd, m.Get(fd))
		}
		if err != nil {
			return fmt.Errorf("%s: %w", fd.Name(), err)
		}
	}
	b.WriteByte('}')
	return nil
}

func statusList(b *bytes.Buffer, fd protoreflect.FieldDescriptor, l protoreflect.List) error {
	b.WriteByte('[')
	for i := range l.Len() {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := statusValue(b, fd, l.Get(i)); err != nil {
			return err
		}
	}
	b.WriteByte(']')
	return nil
}

// statusMap writes a map with its keys in order (as strings: JSON object
// keys).
func statusMap(b *bytes.Buffer, fd protoreflect.FieldDescriptor, m protoreflect.Map) error {
	keys := map[string]protoreflect.MapKey{}
	m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys[k.String()] = k
		return true
	})
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	slices.Sort(names)
	b.WriteByte('{')
	for i, k := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		statusString(b, k)
		b.WriteByte(':')
		if err := statusValue(b, fd.MapValue(), m.Get(keys[k])); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

func statusValue(b *bytes.Buffer, fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return statusMessage(b, v.Message())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			statusString(b, string(ev.Name()))
		} else {
			b.WriteString(strconv.Itoa(int(v.Enum())))
		}
	case protoreflect.BoolKind:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		// JSON has no NaN or infinities: the mapping's strings for them.
		switch f := v.Float(); {
		case math.IsNaN(f):
			statusString(b, "NaN")
		case math.IsInf(f, 1):
			statusString(b, "Infinity")
		case math.IsInf(f, -1):
			statusString(b, "-Infinity")
		default:
			bits := 64
			if fd.Kind() == protoreflect.FloatKind {
				bits = 32
			}
			b.WriteString(strconv.FormatFloat(f, 'g', -1, bits))
		}
	case protoreflect.StringKind:
		statusString(b, v.String())
	case protoreflect.BytesKind:
		statusString(b, base64.StdEncoding.EncodeToString(v.Bytes()))
	default:
		return fmt.Errorf("field kind %v has no JSON encoding here", fd.Kind())
	}
	return nil
}

func statusString(b *bytes.Buffer, s string) {
	data, _ := json.Marshal(s) // a string always encodes
	b.Write(data)
}

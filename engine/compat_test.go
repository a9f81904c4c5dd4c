package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
)

// TestRequestSpeaksToClientsOfV1: the engine API once carried the plugin
// protocol's Request; its own Request, Layer, Batch, Runtime and enums
// keep every field and value of that Request as protocol v1 froze it
// (testdata/protocol/v1/plugin.desc), with the same number, name, type
// and label, so a client built then still speaks to a server now
// (presence, added to two fields since, does not change the wire). And the
// engine API imports no other proto file.
func TestRequestSpeaksToClientsOfV1(t *testing.T) {
	if imports := dispatchv1.File_dispatch_proto.Imports(); imports.Len() != 0 {
		t.Errorf("dispatch.proto imports %s", imports.Get(0).Path())
	}
	data, err := os.ReadFile(filepath.Join("..", "testdata", "protocol", "v1", "plugin.desc"))
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(data, &set); err != nil || len(set.File) != 1 {
		t.Fatalf("pinned descriptor set: %d files, %v", len(set.File), err)
	}
	pinned := set.File[0]
	live := protodesc.ToFileDescriptorProto(dispatchv1.File_dispatch_proto)
	short := func(typeName string) string { return typeName[strings.LastIndex(typeName, ".")+1:] }

	liveMsgs := map[string]*descriptorpb.DescriptorProto{}
	for _, m := range live.MessageType {
		liveMsgs[m.GetName()] = m
	}
	for _, m := range pinned.MessageType {
		switch m.GetName() {
		case "Request", "Layer", "Batch", "Runtime":
		default:
			continue
		}
		lm := liveMsgs[m.GetName()]
		if lm == nil {
			t.Errorf("message %s: missing", m.GetName())
			continue
		}
		fields := map[int32]*descriptorpb.FieldDescriptorProto{}
		for _, f := range lm.Field {
			fields[f.GetNumber()] = f
		}
		for _, f := range m.Field {
			lf := fields[f.GetNumber()]
			switch {
			case lf == nil:
				t.Errorf("%s field %d (%s): missing", m.GetName(), f.GetNumber(), f.GetName())
			case lf.GetName() != f.GetName() || lf.GetType() != f.GetType() || lf.GetLabel() != f.GetLabel() ||
				short(lf.GetTypeName()) != short(f.GetTypeName()):
				t.Errorf("%s field %d: %v, pinned %v", m.GetName(), f.GetNumber(), lf, f)
			}
		}
	}
	liveEnums := map[string]*descriptorpb.EnumDescriptorProto{}
	for _, e := range live.EnumType {
		liveEnums[e.GetName()] = e
	}
	for _, e := range pinned.EnumType {
		switch e.GetName() {
		case "ForwardMode", "Method", "Platform":
		default:
			continue
		}
		le := liveEnums[e.GetName()]
		if le == nil {
			t.Errorf("enum %s: missing", e.GetName())
			continue
		}
		values := map[int32]string{}
		for _, v := range le.Value {
			values[v.GetNumber()] = v.GetName()
		}
		for _, v := range e.Value {
			if values[v.GetNumber()] != v.GetName() {
				t.Errorf("%s value %d: %q, pinned %q", e.GetName(), v.GetNumber(), values[v.GetNumber()], v.GetName())
			}
		}
	}
}

package vendortest

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/conformance"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/vendortest/v1pluspb"
	"github.com/attnplug/attnplug/wire"
	"github.com/attnplug/attnplug/wire/pluginv1"
	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
)

// TestV1FixtureLoads checks that the current host loads a plugin built
// from the pinned v1 protocol alone, dispatches through it, and that it
// passes the current conformance suite.
func TestV1FixtureLoads(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs the conformance suite on the v1 protocol fixture (make test runs it)")
	}
	dir := pluginDir(t, v1Bin)
	r := host(t, "", nil, "plugins", "--json", "--plugin-dir", dir)
	var list []struct {
		Name            string   `json:"name"`
		ProtocolVersion int      `json:"protocol_version"`
		Names           []string `json:"names"`
		Status          string   `json:"status"`
		Reason          string   `json:"reason"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || r.code != 0 {
		t.Fatalf("plugins: exit %d, %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	if len(list) != 1 || list[0].Name != "v1fixture" || list[0].ProtocolVersion != 1 || list[0].Reason != "" {
		t.Fatalf("plugins: %s", r.stdout)
	}
	stdin := `{"backend":"v1fixture","forward_mode":"EXTEND","extend_prefix_lens":[0,0],"seq_lens":[100,200]}
{"backend":"v1fixture","forward_mode":"EXTEND","extend_prefix_lens":[0,5],"seq_lens":[100,200]}
{"backend":"v1fixture","forward_mode":"DECODE"}
`
	r = host(t, stdin, nil, "dispatch", "--strict", "--plugin-dir", dir)
	if r.code != 0 {
		t.Fatalf("dispatch: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	as := answers(t, r.stdout)
	want := []string{"MHA", "MLA", "MLA"}
	if len(as) != len(want) {
		t.Fatalf("answers: %s", r.stdout)
	}
	for i, a := range as {
		if a.Method != want[i] || a.Plugin != "v1fixture" || a.Fallback != "" {
			t.Errorf("request %d: %+v, want %s from v1fixture", i+1, a, want[i])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := conformance.Run(ctx, conformance.Options{Binary: v1Bin, MaxRequests: 500})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed {
		var sb strings.Builder
		rep.WriteText(&sb)
		t.Fatalf("the v1 fixture does not conform:\n%s", sb.String())
	}
}

// TestFutureVersionRefused checks that a plugin speaking a protocol version
// the host does not is refused, with a message naming both versions.
func TestFutureVersionRefused(t *testing.T) {
	dir := pluginDir(t, faultBin)
	r := host(t, "", []string{"ATTNPLUG_FAULT=protocol=2"}, "plugins", "--json", "--plugin-dir", dir)
	var list []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("plugins: exit %d, %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	if len(list) != 1 || list[0].Status != "broken" {
		t.Fatalf("plugins: %s", r.stdout)
	}
	// go-plugin's own message names both: "incompatible API version with
	// plugin. Plugin version: 2, Client versions: [1]".
	if reason := list[0].Reason; !strings.Contains(reason, "Plugin version: 2") || !strings.Contains(reason, "Client versions: [1]") {
		t.Errorf("reason %q does not name the plugin's version 2 and the host's 1", reason)
	}
	r = host(t, "", []string{"ATTNPLUG_FAULT=protocol=2"}, "conform", faultBin)
	if r.code != 1 || !strings.Contains(r.stdout, "the plugin speaks protocol version 2, this host speaks 1") {
		t.Errorf("conform: exit %d\n%s", r.code, r.stdout)
	}
}

// TestProtocolV1Frozen checks the live protocol against the pinned v1
// descriptor (testdata/protocol/v1/plugin.desc, protoc's descriptor set of
// testdata/protocol/v1/plugin.proto): every message, field, enum value and
// RPC of v1 is still there with the same number, name, type and label.
// Additions pass.
func TestProtocolV1Frozen(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "testdata", "protocol", "v1", "plugin.desc"))
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(data, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.File) != 1 {
		t.Fatalf("%d files in the pinned descriptor set", len(set.File))
	}
	pinned := set.File[0]
	live := protodesc.ToFileDescriptorProto(pluginv1.File_plugin_proto)
	if pinned.GetPackage() != live.GetPackage() {
		t.Fatalf("package %q, pinned %q", live.GetPackage(), pinned.GetPackage())
	}
	liveMsgs := map[string]*descriptorpb.DescriptorProto{}
	for _, m := range live.MessageType {
		liveMsgs[m.GetName()] = m
	}
	for _, pm := range pinned.MessageType {
		lm := liveMsgs[pm.GetName()]
		if lm == nil {
			t.Errorf("message %s of v1 is gone", pm.GetName())
			continue
		}
		lf := map[int32]*descriptorpb.FieldDescriptorProto{}
		for _, f := range lm.Field {
			lf[f.GetNumber()] = f
		}
		for _, pf := range pm.Field {
			f := lf[pf.GetNumber()]
			switch {
			case f == nil:
				t.Errorf("%s field %d (%s) of v1 is gone", pm.GetName(), pf.GetNumber(), pf.GetName())
			case f.GetName() != pf.GetName() || f.GetType() != pf.GetType() || f.GetLabel() != pf.GetLabel() || f.GetTypeName() != pf.GetTypeName():
				t.Errorf("%s field %d changed: %v, was %v", pm.GetName(), pf.GetNumber(), f, pf)
			}
		}
	}
	liveEnums := map[string]*descriptorpb.EnumDescriptorProto{}
	for _, e := range live.EnumType {
		liveEnums[e.GetName()] = e
	}
	for _, pe := range pinned.EnumType {
		le := liveEnums[pe.GetName()]
		if le == nil {
			t.Errorf("enum %s of v1 is gone", pe.GetName())
			continue
		}
		lv := map[string]int32{}
		for _, v := range le.Value {
			lv[v.GetName()] = v.GetNumber()
		}
		for _, pv := range pe.Value {
			if n, ok := lv[pv.GetName()]; !ok || n != pv.GetNumber() {
				t.Errorf("enum %s value %s = %d changed or gone", pe.GetName(), pv.GetName(), pv.GetNumber())
			}
		}
	}
	if len(pinned.Service) != 1 || len(live.Service) != 1 || pinned.Service[0].GetName() != live.Service[0].GetName() {
		t.Fatalf("services: live %v, pinned %v", live.Service, pinned.Service)
	}
	lm := map[string]*descriptorpb.MethodDescriptorProto{}
	for _, m := range live.Service[0].Method {
		lm[m.GetName()] = m
	}
	for _, pm := range pinned.Service[0].Method {
		m := lm[pm.GetName()]
		if m == nil || m.GetInputType() != pm.GetInputType() || m.GetOutputType() != pm.GetOutputType() {
			t.Errorf("RPC %s of v1 changed or gone: %v", pm.GetName(), m)
		}
	}
}

// v1Service is the v1 service's path; the v1plus messages travel under it.
const v1Service = "/attnplug.plugin.v1.Backend/"

// connPlugin is a go-plugin plugin whose host side is the bare connection.
type connPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
}

func (connPlugin) GRPCServer(*goplugin.GRPCBroker, *grpc.Server) error { return nil }

func (connPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return c, nil
}

// plusHost is a host built against v1plus: it knows the Kernels RPC and the
// kv_cache_budget field.
type plusHost struct{ conn grpc.ClientConnInterface }

func (h plusHost) call(ctx context.Context, method string, in, out proto.Message) error {
	return h.conn.Invoke(ctx, v1Service+method, in, out)
}

// kernels asks the plugin for its kernels; supported is false for a
// plugin built before the RPC existed, which is no error.
func (h plusHost) kernels(ctx context.Context) (kernels []string, supported bool, err error) {
	var out v1pluspb.KernelsResponse
	if err := h.call(ctx, "Kernels", &v1pluspb.KernelsRequest{}, &out); err != nil {
		if wire.Unsupported(err) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return out.Kernels, true, nil
}

func plusRequest(backend string, mode v1pluspb.ForwardMode) *v1pluspb.Request {
	return &v1pluspb.Request{
		Backend:       backend,
		Layer:         &v1pluspb.Layer{ChunkedPrefixCacheThreshold: 8192},
		Batch:         &v1pluspb.Batch{ForwardMode: mode, ExtendPrefixLens: []int64{0}, ExtendPrefixLensKnown: true, SeqLens: []int64{64}, SeqLensKnown: true},
		Runtime:       &v1pluspb.Runtime{Platform: v1pluspb.Platform_PLATFORM_CUDA},
		KvCacheBudget: 1 << 20,
	}
}

// TestNewHostOldPlugin: a host built against v1plus talks to the v1
// fixture binary (pinned v1, started with go-plugin as the host starts
// plugins). The added request field is ignored, and the added RPC answers
// Unimplemented, which the host reads as "not supported".
func TestNewHostOldPlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  wire.Handshake(),
		VersionedPlugins: map[int]goplugin.PluginSet{wire.ProtocolVersion: {wire.PluginName: connPlugin{}}},
		Cmd:              exec.Command(v1Bin),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           hclog.NewNullLogger(),
	})
	defer client.Kill()
	rpc, err := client.Client()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rpc.Dispense(wire.PluginName)
	if err != nil {
		t.Fatal(err)
	}
	h := plusHost{raw.(*grpc.ClientConn)}

	var desc v1pluspb.DescribeResponse
	if err := h.call(ctx, "Describe", &v1pluspb.DescribeRequest{}, &desc); err != nil {
		t.Fatal(err)
	}
	if desc.Name != "v1fixture" || desc.ProtocolVersion != 1 || len(desc.Features) != 0 {
		t.Errorf("describe: %v", &desc)
	}
	var resp v1pluspb.DispatchResponse
	if err := h.call(ctx, "Dispatch", &v1pluspb.DispatchRequest{Request: plusRequest("v1fixture", v1pluspb.ForwardMode_FORWARD_MODE_EXTEND)}, &resp); err != nil {
		t.Fatalf("dispatch with a field v1 lacks: %v", err)
	}
	if resp.Method != v1pluspb.Method_METHOD_MHA || resp.Kernel != "" {
		t.Errorf("dispatch: %v", &resp)
	}
	kernels, supported, err := h.kernels(ctx)
	if err != nil || supported || kernels != nil {
		t.Errorf("kernels from a v1 plugin: %v, supported %v, %v; want not supported, no error", kernels, supported, err)
	}
	// The plugin is still fine after the unknown RPC.
	if err := h.call(ctx, "Dispatch", &v1pluspb.DispatchRequest{Request: plusRequest("v1fixture", v1pluspb.ForwardMode_FORWARD_MODE_DECODE)}, &resp); err != nil || resp.Method != v1pluspb.Method_METHOD_MLA {
		t.Errorf("dispatch after Kernels: %v, %v", &resp, err)
	}
	// The current host's client (with every RPC added since v1) works too.
	c := wire.NewClient(raw.(*grpc.ClientConn))
	req := core.NewRequest("v1fixture", core.ModeExtend)
	req.Runtime.Platform = core.PlatformCUDA
	if m, err := c.Dispatch(ctx, &req); err != nil || m != core.MHA {
		t.Errorf("wire.Client dispatch: %s, %v", m, err)
	}
	// Device code came after v1: the old plugin has none, and says so
	// without failing.
	dev := core.DeviceInfo{Platform: core.PlatformCUDA, ComputeCapability: 90}
	if ms, err := c.KernelModules(ctx, dev); !errors.Is(err, core.ErrNoPlan) || errors.Is(err, core.ErrProtocol) || ms != nil {
		t.Errorf("wire.Client kernel modules from a v1 plugin: %v, %v; want ErrNoPlan", ms, err)
	}
	preq := core.PlanRequest{Backend: "v1fixture", Method: core.MLA, DType: "bf16", Device: dev,
		Shape: core.PlanShape{SeqLens: []int64{10}, QLens: []int64{1}, PageSize: 1, NumPages: 10}}
	if p, err := c.PlanKernel(ctx, &preq); !errors.Is(err, core.ErrNoPlan) || p != nil {
		t.Errorf("wire.Client plan kernel from a v1 plugin: %v, %v; want ErrNoPlan", p, err)
	}
	if m, err := c.Dispatch(ctx, &req); err != nil || m != core.MHA {
		t.Errorf("wire.Client dispatch after the device RPCs: %s, %v", m, err)
	}
}

// plusPlugin is a plugin built against v1plus: it fills the added fields
// and serves the added RPC.
type plusPlugin struct {
	v1pluspb.UnimplementedBackendServer
}

func (plusPlugin) Describe(context.Context, *v1pluspb.DescribeRequest) (*v1pluspb.DescribeResponse, error) {
	return &v1pluspb.DescribeResponse{
		Name: "plus", Version: "1.1.0", ProtocolVersion: 1,
		Handlers: []*v1pluspb.Handler{{
			Name:    "plus",
			Reads:   &v1pluspb.Reads{Facts: []v1pluspb.Fact{v1pluspb.Fact_FACT_MODE}},
			Methods: []v1pluspb.Method{v1pluspb.Method_METHOD_MLA},
		}},
		Features: []string{"kernels"},
	}, nil
}

func (plusPlugin) Dispatch(context.Context, *v1pluspb.DispatchRequest) (*v1pluspb.DispatchResponse, error) {
	return &v1pluspb.DispatchResponse{Method: v1pluspb.Method_METHOD_MLA, Kernel: "acme_flash_mla"}, nil
}

func (plusPlugin) DispatchBatch(_ context.Context, in *v1pluspb.DispatchBatchRequest) (*v1pluspb.DispatchBatchResponse, error) {
	out := &v1pluspb.DispatchBatchResponse{}
	for range in.Requests {
		out.Results = append(out.Results, &v1pluspb.Result{Method: v1pluspb.Method_METHOD_MLA})
	}
	return out, nil
}

func (plusPlugin) Kernels(context.Context, *v1pluspb.KernelsRequest) (*v1pluspb.KernelsResponse, error) {
	return &v1pluspb.KernelsResponse{Kernels: []string{"acme_flash_mla"}}, nil
}

// serve serves register's service on a loopback listener and returns a
// connection to it.
func serve(t *testing.T, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestOldHostNewPlugin: the current host's client, which knows only v1's
// fields, talks to a plugin built against v1plus. The added response
// fields arrive as unknown fields and are ignored; everything of v1 works.
func TestOldHostNewPlugin(t *testing.T) {
	conn := serve(t, func(s *grpc.Server) {
		desc := v1pluspb.Backend_ServiceDesc
		desc.ServiceName = "attnplug.plugin.v1.Backend"
		s.RegisterService(&desc, plusPlugin{})
	})
	ctx := context.Background()
	c := wire.NewClient(conn)
	d, err := c.Describe(ctx)
	if err != nil || d.Name != "plus" || len(d.Handlers) != 1 || d.Handlers[0].Methods[0] != core.MLA {
		t.Fatalf("describe: %+v, %v", d, err)
	}
	req := core.NewRequest("plus", core.ModeDecode)
	req.Runtime.Platform = core.PlatformCUDA
	if m, err := c.Dispatch(ctx, &req); err != nil || m != core.MLA {
		t.Errorf("dispatch: %s, %v", m, err)
	}
	out := make([]core.Result, 2)
	if err := c.DispatchBatch(ctx, []core.Request{req, req}, out); err != nil || out[0].Method != core.MLA || out[1].Err != nil {
		t.Errorf("dispatch batch: %+v, %v", out, err)
	}
	// What the v1 messages make of the added fields: unknown fields, kept
	// as bytes, which decode to the new value under v1plus.
	raw := pluginv1.NewBackendClient(conn)
	resp, err := raw.Dispatch(ctx, &pluginv1.DispatchRequest{Request: &pluginv1.Request{
		Backend: "plus", Batch: &pluginv1.Batch{ForwardMode: pluginv1.ForwardMode_FORWARD_MODE_DECODE},
		Runtime: &pluginv1.Runtime{Platform: pluginv1.Platform_PLATFORM_CUDA},
	}})
	if err != nil {
		t.Fatal(err)
	}
	unknown := resp.ProtoReflect().GetUnknown()
	if len(unknown) == 0 {
		t.Fatal("the added field did not arrive as an unknown field")
	}
	var plus v1pluspb.DispatchResponse
	if err := proto.Unmarshal(unknown, &plus); err != nil || plus.Kernel != "acme_flash_mla" {
		t.Errorf("unknown bytes decode to %v, %v", &plus, err)
	}
	dresp, err := raw.Describe(ctx, &pluginv1.DescribeRequest{})
	if err != nil || len(dresp.ProtoReflect().GetUnknown()) == 0 {
		t.Errorf("describe: unknown fields %d, %v", len(dresp.ProtoReflect().GetUnknown()), err)
	}
}

// TestNewHostCurrentServer: a host built against v1plus talks to the
// current wire.Server: the added field is ignored, the added RPC is
// Unimplemented.
func TestNewHostCurrentServer(t *testing.T) {
	b, err := core.NewRuleBackend("cur", "1.0.0", nil, core.Rule{
		Name: "cur", Decide: func(*core.Request) core.Method { return core.MLA },
		Methods: []core.Method{core.MLA},
	})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, func(s *grpc.Server) { pluginv1.RegisterBackendServer(s, wire.NewServer(b)) })
	h := plusHost{conn}
	ctx := context.Background()
	var resp v1pluspb.DispatchResponse
	if err := h.call(ctx, "Dispatch", &v1pluspb.DispatchRequest{Request: plusRequest("cur", v1pluspb.ForwardMode_FORWARD_MODE_EXTEND)}, &resp); err != nil || resp.Method != v1pluspb.Method_METHOD_MLA {
		t.Errorf("dispatch: %v, %v", &resp, err)
	}
	if ks, supported, err := h.kernels(ctx); err != nil || supported {
		t.Errorf("kernels: %v, %v, %v; want not supported", ks, supported, err)
	}
}

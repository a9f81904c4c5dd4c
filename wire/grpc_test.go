package wire

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	pb "github.com/attnplug/attnplug/wire/pluginv1"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// connect serves b through go-plugin's in-process gRPC connection and
// returns the host's Client.
func connect(t *testing.T, b core.Backend) *Client {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, VersionedPlugins(b)[ProtocolVersion])
	// Close asks the server, through go-plugin's controller, to stop; a
	// second Stop from here would race with it.
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(PluginName)
	if err != nil {
		t.Fatalf("Dispense: %v", err)
	}
	c, ok := raw.(*Client)
	if !ok {
		t.Fatalf("Dispense: got %T, want *wire.Client", raw)
	}
	return c
}

func ruleBackend(t *testing.T) *core.RuleBackend {
	t.Helper()
	cpr := core.ChunkedPrefixRule{OneShot: true}
	b, err := core.NewRuleBackend("test", "1.2.3", nil,
		core.TritonRule(),
		core.Rule{Name: "oneshot", Decide: cpr.Decide, Reads: cpr.Reads(), Methods: cpr.Methods(),
			Hardware: []core.Hardware{{Platforms: []core.Platform{core.PlatformCUDA}, MinCapability: 90}}},
		core.Rule{Name: "old", AliasOf: "oneshot", Deprecated: "use oneshot", Decide: cpr.Decide, Reads: cpr.Reads(), Methods: cpr.Methods()},
	)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func request(backend string, mode core.ForwardMode, prefix, seq []int64) core.Request {
	r := core.NewRequest(backend, mode)
	r.Runtime.Platform = core.PlatformCUDA
	r.Batch.ExtendPrefixLens, r.Batch.SeqLens, r.Batch.MaxChunkCapacity = prefix, seq, 131072
	return r
}

func TestGRPCRoundTrip(t *testing.T) {
	ctx := testContext(t)
	b := ruleBackend(t)
	c := connect(t, b)

	t.Run("describe", func(t *testing.T) {
		got, err := c.Describe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := b.Describe(ctx)
		want.ProtocolVersion = ProtocolVersion
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Describe:\n got %#v\nwant %#v", got, want)
		}
	})

	t.Run("dispatch", func(t *testing.T) {
		reqs := []core.Request{
			request("triton", core.ModeExtend, []int64{0}, []int64{10}),
			request("triton", core.ModeDecode, nil, nil),
			request("oneshot", core.ModeExtend, []int64{0, 0}, []int64{10, 20}),
			request("oneshot", core.ModeExtend, []int64{}, []int64{}),
			request("oneshot", core.ModeExtend, []int64{8191}, []int64{9000}),
			request("old", core.ModeExtend, []int64{8192}, []int64{9000}),
		}
		for _, r := range reqs {
			want, err := b.Dispatch(ctx, &r)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Dispatch(ctx, &r)
			if err != nil || got != want {
				t.Errorf("Dispatch(%s %v): got %v, %v, want %v, nil", r.Backend, r.Batch, got, err, want)
			}
		}
	})

	t.Run("dispatch_unknown_backend", func(t *testing.T) {
		r := request("nope", core.ModeDecode, nil, nil)
		_, err := c.Dispatch(ctx, &r)
		if !errors.Is(err, core.ErrUnknownBackend) || err.Error() != `test: unknown backend "nope"` {
			t.Errorf("Dispatch(nope): got %v, want ErrUnknownBackend %q", err, `test: unknown backend "nope"`)
		}
	})

	t.Run("dispatch_invalid_request", func(t *testing.T) {
		r := request("triton", core.ModeExtend, []int64{-1}, []int64{1})
		_, err := c.Dispatch(ctx, &r)
		if !errors.Is(err, core.ErrInvalidRequest) || err.Error() != "extend_prefix_lens[0]: negative length -1" {
			t.Errorf("Dispatch(negative): got %v, want ErrInvalidRequest naming the field", err)
		}
	})

	t.Run("dispatch_batch_mixed", func(t *testing.T) { checkBatchMixed(t, ctx, c) })

	t.Run("dispatch_batch_empty", func(t *testing.T) {
		if err := c.DispatchBatch(ctx, nil, nil); err != nil {
			t.Errorf("DispatchBatch(nil): got %v, want nil", err)
		}
	})

	t.Run("dispatch_batch_length_mismatch", func(t *testing.T) {
		err := c.DispatchBatch(ctx, make([]core.Request, 2), make([]core.Result, 1))
		if err == nil || err.Error() != "dispatch batch: 1 results for 2 requests" {
			t.Errorf("got %v, want a length mismatch error", err)
		}
	})

	t.Run("configure", func(t *testing.T) {
		if err := c.Configure(ctx, core.HostInfo{Platform: core.PlatformCUDA, ComputeCapability: 90}); err != nil {
			t.Errorf("Configure(sm90): got %v, want nil", err)
		}
	})

	t.Run("cancelled_context", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		r := request("triton", core.ModeDecode, nil, nil)
		if _, err := c.Dispatch(cctx, &r); !errors.Is(err, context.Canceled) {
			t.Errorf("Dispatch with a cancelled context: got %v, want context.Canceled", err)
		}
	})
}

// checkBatchMixed sends one batch of valid and invalid requests and checks
// each result: a method for the valid ones, the kind and message of the error
// for the others.
func checkBatchMixed(t *testing.T, ctx context.Context, c *Client) {
	reqs := []core.Request{
		request("triton", core.ModeExtend, []int64{0}, []int64{10}),
		request("triton", core.ModeExtend, []int64{0}, []int64{-10}),
		request("nope", core.ModeDecode, nil, nil),
		request("oneshot", core.ModeExtend, []int64{0}, []int64{10}),
		request("oneshot", core.ModeExtend, []int64{11}, []int64{10}),
		request("old", core.ModeDecode, nil, nil),
		request("", core.ModeDecode, nil, nil),
	}
	out := make([]core.Result, len(reqs))
	if err := c.DispatchBatch(ctx, reqs, out); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		m       core.Method
		is      error
		message string
	}{
		{core.MHA, nil, ""},
		{0, core.ErrInvalidRequest, "seq_lens[0]: negative length -10"},
		{0, core.ErrUnknownBackend, `test: unknown backend "nope"`},
		{core.MHAOneShot, nil, ""},
		{0, core.ErrInvalidRequest, "extend_prefix_lens[0]: prefix 11 is longer than seq_lens[0] = 10"},
		{core.MLA, nil, ""},
		{0, core.ErrInvalidRequest, "backend: must not be empty"},
	}
	for i, w := range want {
		got := out[i]
		if w.is == nil {
			if got.Err != nil || got.Method != w.m {
				t.Errorf("result %d: got %v, %v, want %v", i, got.Method, got.Err, w.m)
			}
			continue
		}
		if !errors.Is(got.Err, w.is) || got.Err.Error() != w.message {
			t.Errorf("result %d: got %v, want %v %q", i, got.Err, w.is, w.message)
		}
	}
}

// badBackend answers what it is told to, valid or not. It is not a
// BatchBackend, so the server's DispatchBatch falls back to Dispatch.
type badBackend struct {
	method  core.Method
	err     error
	methods []core.Method
}

func (b *badBackend) Describe(context.Context) (*core.Description, error) {
	return &core.Description{Name: "bad", Version: "0.0.1", Handlers: []core.HandlerInfo{{Name: "bad", Methods: b.methods}}}, nil
}

func (b *badBackend) Dispatch(context.Context, *core.Request) (core.Method, error) {
	return b.method, b.err
}

func TestGRPCBadBackend(t *testing.T) {
	ctx := testContext(t)
	r := request("bad", core.ModeDecode, nil, nil)
	tests := []struct {
		name    string
		backend *badBackend
		is      error
		message string
		batchIs error // a batch result has no code for ErrRefused
	}{
		{"invalid_method", &badBackend{method: 42}, core.ErrProtocol, "protocol violation: unknown method 42", core.ErrProtocol},
		{"zero_method", &badBackend{method: 0}, core.ErrProtocol, "protocol violation: unknown method 0", core.ErrProtocol},
		{"unavailable", &badBackend{err: fmt.Errorf("bad: %w", core.ErrUnavailable)}, core.ErrUnavailable, "bad: backend unavailable", core.ErrUnavailable},
		{"refused", &badBackend{err: fmt.Errorf("bad: %w", core.ErrRefused)}, core.ErrRefused, "bad: refused", core.ErrProtocol},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := connect(t, tt.backend)
			m, err := c.Dispatch(ctx, &r)
			if !errors.Is(err, tt.is) || err.Error() != tt.message || m != 0 {
				t.Errorf("Dispatch: got %v, %v, want 0 and %v %q", m, err, tt.is, tt.message)
			}
			out := make([]core.Result, 2)
			if err := c.DispatchBatch(ctx, []core.Request{r, r}, out); err != nil {
				t.Fatal(err)
			}
			for i, res := range out {
				if !errors.Is(res.Err, tt.batchIs) {
					t.Errorf("DispatchBatch result %d: got %v, %v, want %v", i, res.Method, res.Err, tt.batchIs)
				}
			}
		})
	}
	t.Run("describe_invalid_method", func(t *testing.T) {
		c := connect(t, &badBackend{methods: []core.Method{core.MLA, 42}})
		_, err := c.Describe(ctx)
		if !errors.Is(err, core.ErrProtocol) || !strings.Contains(err.Error(), "unknown method 42") {
			t.Errorf("Describe: got %v, want ErrProtocol naming method 42", err)
		}
	})
	t.Run("configure_without_configurer_accepts", func(t *testing.T) {
		c := connect(t, &badBackend{method: core.MLA})
		if err := c.Configure(ctx, core.HostInfo{Platform: core.PlatformNPU}); err != nil {
			t.Errorf("Configure: got %v, want nil", err)
		}
	})
}

func TestGRPCConfigureRefused(t *testing.T) {
	ctx := testContext(t)
	b, err := core.NewRuleBackend("cuda_only", "1.0.0", nil, core.Rule{
		Name: "x", Decide: core.TritonDecide, Methods: core.TritonRule().Methods,
		Hardware: []core.Hardware{{Platforms: []core.Platform{core.PlatformCUDA}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := connect(t, b)
	err = c.Configure(ctx, core.HostInfo{Platform: core.PlatformNPU})
	if !errors.Is(err, core.ErrRefused) || !strings.Contains(err.Error(), "needs platform cuda, host is npu") {
		t.Errorf("Configure(npu): got %v, want ErrRefused saying what x needs", err)
	}
}

func TestServerDirect(t *testing.T) {
	ctx := testContext(t)
	s := NewServer(ruleBackend(t))
	t.Run("batch_over_limit", func(t *testing.T) {
		_, err := s.DispatchBatch(ctx, &pb.DispatchBatchRequest{Requests: make([]*pb.Request, MaxBatchRequests+1)})
		back := FromStatus(err)
		if !errors.Is(back, core.ErrInvalidRequest) || back.Error() != "requests: batch of 65537 is larger than the limit of 65536" {
			t.Errorf("got %v, want an ErrInvalidRequest naming the limit", back)
		}
	})
	t.Run("nil_entries_get_their_error", func(t *testing.T) {
		r := request("triton", core.ModeDecode, nil, nil)
		resp, err := s.DispatchBatch(ctx, &pb.DispatchBatchRequest{Requests: []*pb.Request{nil, requestToProto(&r)}})
		if err != nil {
			t.Fatal(err)
		}
		res := resp.GetResults()
		if len(res) != 2 || res[0].GetErrorCode() != pb.ErrorCode_ERROR_CODE_INVALID_REQUEST || res[0].GetErrorMessage() != "request: missing" {
			t.Fatalf("results: got %v, want request 0 refused as missing", res)
		}
		if res[1].GetErrorCode() != 0 || res[1].GetMethod() != pb.Method_METHOD_MLA {
			t.Errorf("result 1: got %v, want MLA", res[1])
		}
	})
	t.Run("dispatch_nil", func(t *testing.T) {
		_, err := s.Dispatch(ctx, &pb.DispatchRequest{})
		if back := FromStatus(err); !errors.Is(back, core.ErrInvalidRequest) {
			t.Errorf("Dispatch without a request: got %v, want ErrInvalidRequest", back)
		}
	})
	t.Run("describe_sets_protocol_version", func(t *testing.T) {
		d, err := s.Describe(ctx, &pb.DescribeRequest{})
		if err != nil || d.GetProtocolVersion() != ProtocolVersion {
			t.Errorf("Describe: got %v, %v, want protocol version %d", d, err, ProtocolVersion)
		}
	})
}

// fakeRPC is a pluginv1 client whose answers a test sets.
type fakeRPC struct {
	pb.BackendClient
	batch    *pb.DispatchBatchResponse
	describe *pb.DescribeResponse
}

func (f *fakeRPC) DispatchBatch(context.Context, *pb.DispatchBatchRequest, ...grpc.CallOption) (*pb.DispatchBatchResponse, error) {
	return f.batch, nil
}

func (f *fakeRPC) Describe(context.Context, *pb.DescribeRequest, ...grpc.CallOption) (*pb.DescribeResponse, error) {
	return f.describe, nil
}

func TestClientChecksAnswers(t *testing.T) {
	ctx := testContext(t)
	reqs := []core.Request{request("a", core.ModeDecode, nil, nil), request("a", core.ModeDecode, nil, nil)}
	t.Run("wrong_result_count", func(t *testing.T) {
		c := &Client{rpc: &fakeRPC{batch: &pb.DispatchBatchResponse{Results: []*pb.Result{{Method: pb.Method_METHOD_MLA}}}}}
		err := c.DispatchBatch(ctx, reqs, make([]core.Result, 2))
		if !errors.Is(err, core.ErrProtocol) || err.Error() != "protocol violation: dispatch batch: 1 results for 2 requests" {
			t.Errorf("got %v, want ErrProtocol naming the counts", err)
		}
	})
	t.Run("unknown_method_in_batch", func(t *testing.T) {
		c := &Client{rpc: &fakeRPC{batch: &pb.DispatchBatchResponse{Results: []*pb.Result{{Method: 42}, {Method: pb.Method_METHOD_DSA_NPU}}}}}
		out := make([]core.Result, 2)
		if err := c.DispatchBatch(ctx, reqs, out); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(out[0].Err, core.ErrProtocol) || out[1] != (core.Result{Method: core.DSANPU}) {
			t.Errorf("results: got %+v, want ErrProtocol then DSA_NPU", out)
		}
	})
	t.Run("empty_describe", func(t *testing.T) {
		c := &Client{rpc: &fakeRPC{}}
		if _, err := c.Describe(ctx); !errors.Is(err, core.ErrProtocol) {
			t.Errorf("Describe with no answer: got %v, want ErrProtocol", err)
		}
	})
}

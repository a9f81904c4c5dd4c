// Command attnplug-backend-v1fixture is a plugin built against the pinned
// copy of plugin protocol version 1 (testdata/protocol/v1/plugin.proto) and
// nothing else of attnplug: its own generated code, go-plugin and gRPC. It
// stands for a vendor plugin built when v1 was frozen and never rebuilt;
// the tests check that every later host still loads it.
//
// It serves one name, "v1fixture": MHA for an extend batch without
// speculation whose prefix sum is 0, MLA otherwise.
package main

import (
	"context"
	"fmt"
	"os"

	pb "example.com/attnplug-v1fixture/pluginv1"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The v1 handshake, as frozen.
var handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "ATTNPLUG_PLUGIN",
	MagicCookieValue: "d1ab7b1e-attention-backend-5b3c",
}

const (
	name      = "v1fixture"
	maxLength = 1 << 40
	maxBatch  = 1 << 20
)

type server struct {
	pb.UnimplementedBackendServer
}

func (server) Describe(context.Context, *pb.DescribeRequest) (*pb.DescribeResponse, error) {
	return &pb.DescribeResponse{
		Name:            name,
		Version:         "1.0.0",
		ProtocolVersion: 1,
		Handlers: []*pb.Handler{{
			Name: name,
			Reads: &pb.Reads{Facts: []pb.Fact{
				pb.Fact_FACT_MODE, pb.Fact_FACT_PREFIX_SUM_ZERO,
			}},
			Methods: []pb.Method{pb.Method_METHOD_MHA, pb.Method_METHOD_MLA},
		}},
	}, nil
}

// decide validates r and decides it; the error is a gRPC status.
func decide(r *pb.Request) (pb.Method, error) {
	b := r.GetBatch()
	mode := b.GetForwardMode()
	if mode < pb.ForwardMode_FORWARD_MODE_EXTEND || mode > pb.ForwardMode_FORWARD_MODE_DLLM_EXTEND {
		return 0, status.Errorf(codes.InvalidArgument, "forward_mode: unknown mode %d", int32(mode))
	}
	if p := r.GetRuntime().GetPlatform(); p < 0 || p > pb.Platform_PLATFORM_CPU {
		return 0, status.Errorf(codes.InvalidArgument, "runtime.platform: unknown platform %d", int32(p))
	}
	pre, seq := b.GetExtendPrefixLens(), b.GetSeqLens()
	for field, v := range map[string][]int64{"extend_prefix_lens": pre, "seq_lens": seq} {
		if len(v) > maxBatch {
			return 0, status.Errorf(codes.InvalidArgument, "%s: %d entries", field, len(v))
		}
		for i, x := range v {
			if x < 0 || x > maxLength {
				return 0, status.Errorf(codes.InvalidArgument, "%s[%d]: length %d out of range", field, i, x)
			}
		}
	}
	if b.GetExtendPrefixLensKnown() && b.GetSeqLensKnown() {
		if len(pre) != len(seq) {
			return 0, status.Errorf(codes.InvalidArgument, "extend_prefix_lens: %d entries, seq_lens %d", len(pre), len(seq))
		}
		for i := range pre {
			if pre[i] > seq[i] {
				return 0, status.Errorf(codes.InvalidArgument, "extend_prefix_lens[%d]: longer than its sequence", i)
			}
		}
	}
	if r.GetBackend() != name {
		return 0, status.Errorf(codes.NotFound, "v1fixture: unknown backend %q", r.GetBackend())
	}
	var sum int64
	for _, x := range pre {
		sum += x
	}
	switch mode {
	case pb.ForwardMode_FORWARD_MODE_EXTEND, pb.ForwardMode_FORWARD_MODE_MIXED,
		pb.ForwardMode_FORWARD_MODE_SPLIT_PREFILL, pb.ForwardMode_FORWARD_MODE_DLLM_EXTEND:
		if sum == 0 {
			return pb.Method_METHOD_MHA, nil
		}
	}
	return pb.Method_METHOD_MLA, nil
}

func (server) Dispatch(_ context.Context, in *pb.DispatchRequest) (*pb.DispatchResponse, error) {
	m, err := decide(in.GetRequest())
	if err != nil {
		return nil, err
	}
	return &pb.DispatchResponse{Method: m}, nil
}

func (server) DispatchBatch(_ context.Context, in *pb.DispatchBatchRequest) (*pb.DispatchBatchResponse, error) {
	out := &pb.DispatchBatchResponse{}
	for _, r := range in.GetRequests() {
		m, err := decide(r)
		res := &pb.Result{Method: m}
		if err != nil {
			st := status.Convert(err)
			res = &pb.Result{ErrorCode: pb.ErrorCode_ERROR_CODE_INVALID_REQUEST, ErrorMessage: st.Message()}
			if st.Code() == codes.NotFound {
				res.ErrorCode = pb.ErrorCode_ERROR_CODE_UNKNOWN_BACKEND
			}
		}
		out.Results = append(out.Results, res)
	}
	return out, nil
}

// backendPlugin is the go-plugin plugin serving the Backend service.
type backendPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

func (backendPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterBackendServer(s, server{})
	return nil
}

func (backendPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, fmt.Errorf("v1fixture: plugin side only")
}

func main() {
	if os.Getenv(handshake.MagicCookieKey) != handshake.MagicCookieValue {
		fmt.Fprintln(os.Stderr, "attnplug-backend-v1fixture: an attnplug backend plugin (protocol v1 fixture); the attnplug host starts it")
		os.Exit(1)
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  handshake,
		VersionedPlugins: map[int]plugin.PluginSet{1: {"backend": backendPlugin{}}},
		GRPCServer:       plugin.DefaultGRPCServer,
		Logger:           hclog.New(&hclog.LoggerOptions{Name: name, Output: os.Stderr, JSONFormat: true}),
	})
}

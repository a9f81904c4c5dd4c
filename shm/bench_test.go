package shm

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// benchBytes is the tensor size of the benchmarks: 256 MiB.
const benchBytes = 256 << 20

// BenchmarkShm compares a 256 MiB tensor's round trip to a peer and back:
// through shared memory (the host writes the input into a segment, the
// peer maps it by path, writes an output of the same size and unmaps it,
// the host reads the output) against the same bytes sent as a gRPC message
// over a unix socket and echoed back, as a kernel call would have to
// without shared memory. The B/s column is the tensor's bytes per second of
// round trip; the ratio of the ns/op columns is the saving.
func BenchmarkShm(b *testing.B) {
	src := make([]byte, benchBytes)
	for i := range src {
		src[i] = byte(i * 7)
	}
	dst := make([]byte, benchBytes)
	b.Run("shm_256MiB", func(b *testing.B) {
		seg, err := Create(2 * benchBytes)
		if err != nil {
			b.Fatal(err)
		}
		defer seg.Close()
		b.SetBytes(benchBytes)
		for b.Loop() {
			copy(seg.Bytes()[:benchBytes], src) // the host writes the input
			m, err := Open(seg.Path(), seg.Size())
			if err != nil {
				b.Fatal(err)
			}
			copy(m.Bytes()[benchBytes:], m.Bytes()[:benchBytes]) // the peer writes the output
			m.Close()
			copy(dst, seg.Bytes()[benchBytes:]) // the host reads it
		}
	})
	b.Run("grpc_256MiB", func(b *testing.B) {
		conn := echoServer(b)
		b.SetBytes(benchBytes)
		ctx := context.Background()
		for b.Loop() {
			out := new(wrapperspb.BytesValue)
			if err := conn.Invoke(ctx, "/bench.Echo/Echo", wrapperspb.Bytes(src), out); err != nil {
				b.Fatal(err)
			}
			copy(dst, out.Value)
		}
	})
}

// echoServer serves an echo of BytesValue messages on a unix socket, as a
// plugin's gRPC server would, and returns a connection to it.
func echoServer(b *testing.B) *grpc.ClientConn {
	b.Helper()
	sock := filepath.Join(b.TempDir(), "echo.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	const max = 2 * benchBytes
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(max), grpc.MaxSendMsgSize(max))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "bench.Echo",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Echo",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.BytesValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				out := make([]byte, len(in.Value)) // the peer's output tensor
				copy(out, in.Value)
				return wrapperspb.Bytes(out), nil
			},
		}},
	}, struct{}{})
	go srv.Serve(lis)
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(max), grpc.MaxCallSendMsgSize(max)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return conn
}

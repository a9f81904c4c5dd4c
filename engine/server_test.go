package engine

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/engine/client"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// serve runs a Server over a registry without plugins (the triton rules
// answer) on a unix socket, and returns a Client of it.
func serve(t *testing.T, strict bool, cfg Config) (*Client, *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	reg, err := registry.New(ctx, registry.Config{PluginDirs: []string{t.TempDir()}, Platform: core.PlatformCUDA, Strict: strict,
		CallTimeout: 2 * time.Second, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return serveRegistry(t, reg, cfg)
}

// serveRegistry serves reg on a unix socket and returns a Client and a
// plain connection of it.
func serveRegistry(t *testing.T, reg *registry.Registry, cfg Config) (*Client, *grpc.ClientConn) {
	t.Helper()
	_, sock := startServer(t, reg, cfg)
	c, err := client.Dial("unix://"+sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return c, conn
}

// startServer serves reg with cfg on a unix socket, with the server
// options ahead put before the server's own, until the test ends; it
// returns the Server and the socket's path.
func startServer(t *testing.T, reg *registry.Registry, cfg Config, ahead ...grpc.ServerOption) (*Server, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(reg, cfg)
	g := grpc.NewServer(append(ahead, s.ServerOptions()...)...)
	s.Register(g)
	go g.Serve(lis)
	t.Cleanup(func() { s.Stop(); g.Stop() })
	return s, sock
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestClientKeepsErrorIdentity: in-process round trip of the Client and
// the Server: answers, and errors for which errors.Is and errors.As hold
// as they did on the server.
func TestClientKeepsErrorIdentity(t *testing.T) {
	c, _ := serve(t, true, Config{})
	ctx := testContext(t)

	ok := core.NewRequest("triton", core.ModeDecode)
	a, err := c.Dispatch(ctx, &ok)
	if err != nil || a.Method != core.MLA || a.Plugin != core.PluginCore {
		t.Fatalf("triton decode: %+v, %v", a, err)
	}

	bad := core.NewRequest("triton", core.ModeExtend)
	bad.Batch.SeqLens = []int64{-5}
	unknown := core.NewRequest("no_such_backend", core.ModeDecode)
	reqs := []core.Request{ok, bad, unknown}
	out := make([]core.BatchAnswer, len(reqs))
	if err := c.DispatchBatch(ctx, reqs, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Err != nil || out[0].Answer.Method != core.MLA {
		t.Errorf("batch[0]: %+v", out[0])
	}
	var fe *core.FieldError
	if !errors.Is(out[1].Err, core.ErrInvalidRequest) || !errors.As(out[1].Err, &fe) || fe.Field != "seq_lens[0]" {
		t.Errorf("batch[1]: %v, want an invalid seq_lens[0]", out[1].Err)
	}
	if !errors.Is(out[2].Err, core.ErrRefused) || errors.Is(out[2].Err, core.ErrInvalidRequest) {
		t.Errorf("batch[2] under strict: %v, want core.ErrRefused", out[2].Err)
	}
	if _, err := c.Dispatch(ctx, &unknown); !errors.Is(err, core.ErrRefused) {
		t.Errorf("Dispatch under strict: %v, want core.ErrRefused", err)
	}
	if err := c.DispatchBatch(ctx, reqs, out[:1]); err == nil {
		t.Error("DispatchBatch with a short out: no error")
	}
}

// TestHybridRouting: a request without a backend goes where sglang's
// hybrid attention backend sends it. Neither name is served, and under
// strict the refusal names the backend the request was routed to.
func TestHybridRouting(t *testing.T) {
	for _, spec := range []bool{false, true} {
		_, conn := serve(t, true, Config{Prefill: "prefill_name", Decode: "decode_name", SpeculativeDecode: spec})
		rpc := dispatchv1.NewDispatcherClient(conn)
		for _, m := range core.ForwardModes() {
			want, other := "prefill_name", "decode_name"
			if m == core.ModeDecode || m == core.ModeIdle || (spec && (m == core.ModeTargetVerify || m == core.ModeDraftExtendV2)) {
				want, other = other, want
			}
			resp, err := rpc.Dispatch(testContext(t), &dispatchv1.DispatchRequest{Request: &dispatchv1.Request{Batch: &dispatchv1.Batch{ForwardMode: dispatchv1.ForwardMode(m)}}})
			if err != nil {
				t.Fatal(err)
			}
			got := resp.GetAnswer()
			if got.GetErrorCode() != dispatchv1.ErrorCode_ERROR_CODE_REFUSED || !strings.Contains(got.GetError(), want) || strings.Contains(got.GetError(), other) {
				t.Errorf("speculative decode %v, %s: %v; want a refusal of %s", spec, m, got, want)
			}
		}
	}
}

// TestBatchLimitAndHealth: a batch past the limit is refused as a whole,
// with the code of an invalid request; health says SERVING.
func TestBatchLimitAndHealth(t *testing.T) {
	c, conn := serve(t, false, Config{})
	reqs := make([]core.Request, maxServeBatch+1)
	for i := range reqs {
		reqs[i] = core.NewRequest("triton", core.ModeDecode)
	}
	err := c.DispatchBatch(testContext(t), reqs, make([]core.BatchAnswer, len(reqs)))
	if !errors.Is(err, core.ErrInvalidRequest) {
		t.Errorf("batch of %d: %v, want core.ErrInvalidRequest", len(reqs), err)
	}
	hc, err := healthpb.NewHealthClient(conn).Check(testContext(t), &healthpb.HealthCheckRequest{Service: dispatchv1.Dispatcher_ServiceDesc.ServiceName})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: %v, %v", hc, err)
	}
}

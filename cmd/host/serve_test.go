package main

import (
	"bufio"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/reference"
	"github.com/attnplug/attnplug/internal/testbin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

// server is a running attnplug serve of a test.
type server struct {
	cmd     *exec.Cmd
	socket  string
	metrics string
	conn    *grpc.ClientConn
	stderr  *syncBuf
}

var readyLine = regexp.MustCompile(`listening on unix://(\S+), metrics (\S+)`)

// startServer runs attnplug serve from tree with args, and waits for its
// ready line.
func startServer(t *testing.T, tree *testbin.Bins, env []string, args ...string) *server {
	t.Helper()
	dir, err := os.MkdirTemp("", "ap-serve-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	args = append([]string{"serve", "--listen", "unix://" + sock, "--metrics-listen", "127.0.0.1:0", "--match-hardware=false", "--log-level", "info"}, args...)
	cmd := exec.Command(tree.Host, args...)
	cmd.Env = append(append(os.Environ(), "ATTNPLUG_CACHE_DIR="+warmCacheDir(t)), env...)
	return startServerCmd(t, cmd)
}

// startServerCmd starts cmd, an attnplug serve, and waits for its ready
// line; the test's end interrupts it.
func startServerCmd(t *testing.T, cmd *exec.Cmd) *server {
	t.Helper()
	pr, pw := io.Pipe()
	s := &server{cmd: cmd, stderr: &syncBuf{}}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		pw.Close()
	})
	ready := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			s.stderr.Write([]byte(sc.Text() + "\n"))
			if m := readyLine.FindStringSubmatch(sc.Text()); m != nil && !sent {
				ready <- m
				sent = true
			}
		}
	}()
	select {
	case m := <-ready:
		s.socket, s.metrics = m[1], m[2]
	case <-testContext(t).Done():
		t.Fatalf("serve never said it was ready; stderr:\n%s", s.stderr)
	}
	var err error
	s.conn, err = grpc.NewClient("unix://"+s.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.conn.Close() })
	return s
}

func pbRequest(backend string, mode core.ForwardMode) *dispatchv1.Request {
	return &dispatchv1.Request{Backend: backend, Batch: &dispatchv1.Batch{
		ForwardMode:      dispatchv1.ForwardMode(mode),
		ExtendPrefixLens: []int64{0}, ExtendPrefixLensKnown: true,
		SeqLens: []int64{100}, SeqLensKnown: true,
		MaxChunkCapacity: 131072,
	}}
}

func TestServeHybridHealthReflectionMetrics(t *testing.T) {
	s := startServer(t, bins, nil, "--prefill-backend", "fa3", "--decode-backend", "flashinfer", "--speculative-attention-mode", "decode")
	ctx := testContext(t)
	client := dispatchv1.NewDispatcherClient(s.conn)
	for _, tc := range []struct {
		mode    core.ForwardMode
		handler string
		method  string
	}{
		{core.ModeExtend, "fa3", "MHA_ONE_SHOT"},
		{core.ModeDecode, "flashinfer", "MLA"},
		{core.ModeIdle, "flashinfer", "MLA"},
		{core.ModeTargetVerify, "flashinfer", "MLA"},
		{core.ModeDraftExtendV2, "flashinfer", "MLA"},
		{core.ModeMixed, "fa3", "MHA_ONE_SHOT"},
	} {
		resp, err := client.Dispatch(ctx, &dispatchv1.DispatchRequest{Request: pbRequest("", tc.mode)})
		if err != nil {
			t.Fatal(err)
		}
		a := resp.GetAnswer()
		if a.GetHandler() != tc.handler || strings.TrimPrefix(a.GetMethod().String(), "METHOD_") != tc.method {
			t.Errorf("%s without a backend: got %v, want %s from %s", tc.mode, a, tc.method, tc.handler)
		}
	}
	bad := pbRequest("fa3", core.ModeDecode)
	bad.Batch.SeqLens = []int64{-5}
	resp, err := client.DispatchBatch(ctx, &dispatchv1.DispatchBatchRequest{Requests: []*dispatchv1.Request{pbRequest("aiter", core.ModeDecode), bad, pbRequest("FA3", core.ModeExtend)}})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.GetAnswers()
	if len(got) != 3 || got[0].GetPlugin() != "aiter" || !strings.Contains(got[1].GetError(), "seq_lens[0]: negative length -5") || got[2].GetHandler() != "triton" {
		t.Errorf("batch answers: %v", got)
	}

	// A negative chunked_prefix_cache_threshold is an invalid request
	// naming the field, as in dispatch.
	negative := pbRequest("fa3", core.ModeExtend)
	threshold := int64(-1)
	negative.Layer = &dispatchv1.Layer{ChunkedPrefixCacheThreshold: &threshold}
	one, err := client.Dispatch(ctx, &dispatchv1.DispatchRequest{Request: negative})
	if err != nil {
		t.Fatal(err)
	}
	if a := one.GetAnswer(); a.GetErrorCode() != dispatchv1.ErrorCode_ERROR_CODE_INVALID_REQUEST ||
		a.GetErrorField() != "layer.chunked_prefix_cache_threshold" || !strings.Contains(a.GetError(), "-1 is negative") {
		t.Errorf("a negative threshold: %v, want an invalid request naming the field and value", a)
	}

	hc, err := healthpb.NewHealthClient(s.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "attnplug.dispatch.v1.Dispatcher"})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: %v, %v", hc, err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(s.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	rr, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var services []string
	for _, svc := range rr.GetListServicesResponse().GetService() {
		services = append(services, svc.GetName())
	}
	if !strings.Contains(strings.Join(services, " "), "attnplug.dispatch.v1.Admin") {
		t.Errorf("reflection lists %v", services)
	}

	// dispatch --connect speaks to the server, and may leave the backend
	// to it.
	in := `{"backend":"fa3","forward_mode":"EXTEND","extend_prefix_lens":[0],"seq_lens":[10],"max_chunk_capacity":100}` + "\n" + `{"forward_mode":"DECODE"}` + "\n"
	res := host(t, bins, in, "dispatch", "--connect", "unix://"+s.socket)
	as := parseAnswers(t, res.stdout)
	if res.code != 0 || len(as) != 2 || as[0].Method != "MHA_ONE_SHOT" || as[1].Handler != "flashinfer" {
		t.Errorf("dispatch --connect: exit %d, %s %s", res.code, res.stdout, res.stderr)
	}

	// Two invalid requests: the negative seq_lens and the negative
	// threshold.
	body := httpGet(t, s.metrics)
	for _, want := range []string{`attnplug_dispatches_total{backend="fa3",method="MHA_ONE_SHOT",plugin="fa3"}`, `attnplug_rpc_duration_seconds_bucket{rpc="DispatchBatch"`, `attnplug_plugin_up{plugin="fa3",status="running"} 1`, `attnplug_refused_total{kind="invalid"} 2`, `attnplug_dispatches_total{backend="other"`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(testContext(t), http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// replaceBinary puts src at dst the way an operator does: a new file
// renamed over the old, which a running process keeps.
func replaceBinary(t *testing.T, src, dst string, extra []byte) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, append(data, extra...), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// TestHotSwapUnderLoadFailsNoRequest swaps the fa3 plugin twice while
// clients keep sending: once to a good binary (switched to), once to a
// binary whose answers differ under the same version (refused, the old one
// keeps serving). No request may fail or fall back.
func TestHotSwapUnderLoadFailsNoRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("long: swaps a plugin twice under load from concurrent clients (make test runs it)")
	}
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fault, err := testbin.BuildFault(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, tree, []string{"ATTNPLUG_FAULT=name=fa3,names=fa3+fa4,version=0.1.0,rules=mha"}, "--no-answer-cache")
	ctx := testContext(t)
	client := dispatchv1.NewDispatcherClient(s.conn)
	admin := dispatchv1.NewAdminClient(s.conn)

	pid := func() (int32, string) {
		lp, err := admin.ListPlugins(ctx, &dispatchv1.ListPluginsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range lp.GetPlugins() {
			if p.GetName() == "fa3" {
				return p.GetPid(), p.GetSha256()
			}
		}
		t.Fatal("fa3 not listed")
		return 0, ""
	}

	load := startSwapLoad(t, ctx, client)
	waitFor := func(n int64) {
		for load.answered.Load() < n && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(2000)
	oldPID, oldSum := pid()

	// A good new binary: the same plugin, rebuilt (here: another hash).
	replaceBinary(t, bins.Plugin("fa3"), tree.Plugin("fa3"), []byte("rebuilt"))
	rr, err := admin.Reload(ctx, &dispatchv1.ReloadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ch := rr.GetChanges(); len(ch) != 1 || ch[0].GetAction() != "swapped" || ch[0].GetPlugin() != "fa3" {
		t.Fatalf("reload to a good binary: %v", ch)
	}
	waitFor(load.answered.Load() + 2000)
	newPID, newSum := pid()
	if newPID == oldPID || newSum == oldSum {
		t.Errorf("after the swap fa3 is pid %d sha %s, before pid %d sha %s", newPID, newSum, oldPID, oldSum)
	}
	if procAlive(int(oldPID)) {
		t.Errorf("the old fa3 process %d still runs after the swap", oldPID)
	}

	// A bad new binary: same version, other answers. Refused on SIGHUP.
	replaceBinary(t, fault, tree.Plugin("fa3"), nil)
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.stderr.await(ctx, "new plugin binary rejected", 0)
	waitFor(load.answered.Load() + 2000)
	if p, sum := pid(); p != newPID || sum != newSum {
		t.Errorf("after a refused swap fa3 is pid %d sha %s, want the running pid %d sha %s", p, sum, newPID, newSum)
	}
	close(load.stop)
	load.wg.Wait()
	if n := load.failed.Load(); n > 0 {
		t.Errorf("%d of %d requests failed or fell back during the swaps; first: %v", n, load.answered.Load(), load.firstFailure.Load())
	}
	if !strings.Contains(s.stderr.String(), "self-test") {
		t.Errorf("the rejection reason is not logged:\n%s", s.stderr)
	}
	body := httpGet(t, s.metrics)
	for _, want := range []string{`attnplug_plugin_swaps_total{action="swapped",plugin="fa3"} 1`, `attnplug_plugin_swap_rejections_total{plugin="fa3",reason="self_test"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	t.Logf("%d requests answered across two reloads", load.answered.Load())
}

// swapLoad is the load of TestHotSwapUnderLoadFailsNoRequest: clients that
// send batches until stop closes, counting the answers and the failures.
type swapLoad struct {
	answered, failed atomic.Int64
	firstFailure     atomic.Value
	stop             chan struct{}
	wg               sync.WaitGroup
}

// startSwapLoad starts four clients sending batches of 40 requests for fa3,
// fa4 and flashinfer.
func startSwapLoad(t *testing.T, ctx context.Context, client dispatchv1.DispatcherClient) *swapLoad {
	load := &swapLoad{stop: make(chan struct{})}
	for c := 0; c < 4; c++ {
		load.wg.Add(1)
		go func() {
			defer load.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 9))
			for {
				select {
				case <-load.stop:
					return
				default:
				}
				in := &dispatchv1.DispatchBatchRequest{}
				for i := 0; i < 40; i++ {
					r := protoFromJSON(t, string(reference.Generate(rng)))
					r.Backend = []string{"fa3", "fa4", "fa3", "flashinfer"}[i%4]
					in.Requests = append(in.Requests, r)
				}
				resp, err := client.DispatchBatch(ctx, in)
				if err != nil {
					load.failed.Add(1)
					load.firstFailure.CompareAndSwap(nil, err.Error())
					continue
				}
				for _, a := range resp.GetAnswers() {
					if a.GetError() != "" || a.GetFallback() != "" {
						load.failed.Add(1)
						load.firstFailure.CompareAndSwap(nil, a.GetError()+a.GetFallback())
					}
					load.answered.Add(1)
				}
			}
		}()
	}
	return load
}

func procAlive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return !(i >= 0 && i+2 < len(s) && s[i+2] == 'Z')
}

func TestServeDescribeWatchAndAnswerGenerations(t *testing.T) {
	s := startServer(t, bins, nil)
	ctx := testContext(t)
	client := dispatchv1.NewDispatcherClient(s.conn)
	admin := dispatchv1.NewAdminClient(s.conn)

	d, err := client.Describe(ctx, &dispatchv1.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.GetGeneration() != 1 {
		t.Errorf("generation %d after start, want 1", d.GetGeneration())
	}
	routes := map[string]*dispatchv1.Route{}
	for _, r := range d.GetRoutes() {
		routes[r.GetName()] = r
	}
	fa3 := routes["fa3"]
	if fa3.GetPlugin() != "fa3" || fa3.GetHandler() != "fa3" || !fa3.GetCacheable() || fa3.GetSha256() == "" || fa3.GetFallback() != "" {
		t.Errorf("fa3 route: %v", fa3)
	}
	if facts := fa3.GetReads().GetFacts(); !slices.Contains(facts, "mode") || !slices.Contains(facts, "prefix_sum_at_threshold") {
		t.Errorf("fa3 reads %v", facts)
	}
	if def := d.GetDefaultRoute(); def.GetHandler() != "triton" || def.GetPlugin() != "core" || !def.GetCacheable() {
		t.Errorf("default route: %v", def)
	}
	for name, r := range routes {
		if _, ok := testbin.Served()[name]; !ok && r.GetPlugin() != "core" {
			t.Errorf("%s is served by %s, which no test expects", name, r.GetPlugin())
		}
	}

	ask := func() *dispatchv1.Answer {
		resp, err := client.Dispatch(ctx, &dispatchv1.DispatchRequest{Request: pbRequest("fa3", core.ModeDecode)})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetAnswer()
	}
	if a := ask(); a.GetGeneration() != 1 {
		t.Errorf("answer generation %d, want 1", a.GetGeneration())
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := client.Watch(wctx, &dispatchv1.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := w.Recv()
	if err != nil || first.GetGeneration() != 1 {
		t.Fatalf("first watch message: generation %d, %v", first.GetGeneration(), err)
	}
	if _, err := admin.Reload(ctx, &dispatchv1.ReloadRequest{}); err != nil {
		t.Fatal(err)
	}
	next, err := w.Recv()
	if err != nil || next.GetGeneration() != 2 {
		t.Fatalf("watch after a reload: generation %d, %v", next.GetGeneration(), err)
	}
	if a := ask(); a.GetGeneration() != 2 {
		t.Errorf("answer generation %d after the reload, want 2", a.GetGeneration())
	}
	// The server's stop ends the stream rather than waiting for it.
	s.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(4 * time.Second):
		t.Error("serve did not stop within 4s with a Watch stream open")
	}
}

package engine

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/engine/client"
	"github.com/attnplug/attnplug/engine/internal/convert"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	gproto "google.golang.org/protobuf/proto"
)

func TestBudgetAdmitsWhatFitsAndRefusesWhatWaitsTooLong(t *testing.T) {
	b := newBudget(1600, 100*time.Millisecond) // 100 wire bytes
	a, c := new(int), new(int)
	if err := b.admit(a, 60); err != nil { // weight 960
		t.Fatal(err)
	}
	// 60 more do not fit: it waits, and is refused after the wait.
	err := b.admit(c, 60)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("over the budget: %v, want RESOURCE_EXHAUSTED", err)
	}
	// Released while it waits: admitted.
	done := make(chan error, 1)
	b.wait = 10 * time.Second
	go func() { done <- b.admit(c, 60) }()
	time.Sleep(20 * time.Millisecond)
	b.release(a)
	if err := <-done; err != nil {
		t.Fatalf("after the release: %v", err)
	}
	// A request heavier than the whole budget has it alone.
	b.release(c)
	if err := b.admit(a, 1000); err != nil {
		t.Fatalf("a request over the whole budget, alone: %v", err)
	}
	if b.used != b.limit {
		t.Errorf("used %d, want the whole %d", b.used, b.limit)
	}
	b.release(a)
	if b.used != 0 || len(b.held) != 0 {
		t.Errorf("after every release: used %d, held %v", b.used, b.held)
	}
}

func TestBudgetRefusesAtOnceWhenTooMuchWaits(t *testing.T) {
	b := newBudget(1600, 10*time.Second)
	held := new(int)
	if err := b.admit(held, 100); err != nil {
		t.Fatal(err)
	}
	// The waiting room holds 100 wire bytes: one waiter fills it.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); b.admit(new(int), 100) }()
	for {
		b.mu.Lock()
		w := b.waiting
		b.mu.Unlock()
		if w == 100 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if err := b.admit(new(int), 10); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("with the waiting room full: %v, want RESOURCE_EXHAUSTED at once", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Error("the refusal waited")
	}
	b.release(held)
	wg.Wait()
}

// TestServerBoundsTheRequestsItHolds sends large batches at once to a
// server whose budget holds one of them: each is answered or refused with
// RESOURCE_EXHAUSTED, never more are held than the budget, and the server
// answers afterwards.
func TestServerBoundsTheRequestsItHolds(t *testing.T) {
	c, _ := serve(t, false, Config{MaxInflightBytes: 64 << 20, MaxInflightWait: 200 * time.Millisecond})
	big := make([]core.Request, 40)
	for i := range big {
		big[i] = core.NewRequest("fa3", core.ModeExtend)
		big[i].Batch.ExtendPrefixLens = make([]int64, core.MaxBatchSize)
		big[i].Batch.SeqLens = make([]int64, core.MaxBatchSize)
		for j := range big[i].Batch.SeqLens {
			big[i].Batch.SeqLens[j] = 1 << 20 // 3 bytes on the wire
		}
		big[i].Batch.MaxChunkCapacity = 131072
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[codes.Code]int{}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.DispatchBatch(testContext(t), big, make([]core.BatchAnswer, len(big)))
			code := codes.OK
			switch {
			case errors.Is(err, core.ErrOverloaded):
				code = codes.ResourceExhausted
			case err != nil:
				code = codes.Unknown
				t.Errorf("a batch: %v", err)
			}
			mu.Lock()
			outcomes[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	for code := range outcomes {
		if code != codes.OK && code != codes.ResourceExhausted {
			t.Errorf("outcomes %v: want only answers and RESOURCE_EXHAUSTED", outcomes)
		}
	}
	if outcomes[codes.OK] == 0 {
		t.Errorf("outcomes %v: no batch was answered", outcomes)
	}
	if err := c.DispatchBatch(testContext(t), big[:1], make([]core.BatchAnswer, 1)); err != nil {
		t.Errorf("after the burst: %v", err)
	}
}

// heldBackend is gpuBackend with one module image of size bytes, whose
// Dispatch waits until gate is closed.
type heldBackend struct {
	gpuBackend
	size int
	gate chan struct{}
}

func (b *heldBackend) KernelModules(ctx context.Context, dev core.DeviceInfo) ([]core.KernelModule, error) {
	mods, err := b.gpuBackend.KernelModules(ctx, dev)
	if err == nil {
		mods[0].Image = bytes.Repeat([]byte{'x'}, b.size)
		mods[0].SHA256 = core.ImageSHA256(mods[0].Image)
	}
	return mods, err
}

func (b *heldBackend) Dispatch(ctx context.Context, req *core.Request) (core.Method, error) {
	select {
	case <-b.gate:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return b.gpuBackend.Dispatch(ctx, req)
}

// TestServerCountsModulesAnswersInTheBudget: a KernelModules answer takes
// its size of the budget that requests take theirs of: while a batch being
// answered holds most of it, an answer that does not fit waits for room
// and is refused with RESOURCE_EXHAUSTED; once the batch is answered, it
// is made.
func TestServerCountsModulesAnswersInTheBudget(t *testing.T) {
	const size = 4 << 20
	ctx := testContext(t)
	be := &heldBackend{size: size, gate: make(chan struct{})}
	reg, err := registry.New(ctx, registry.Config{PluginDirs: []string{t.TempDir()}, Platform: core.PlatformCUDA,
		Backends: []core.Backend{be}, CallTimeout: time.Minute, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	s, sock := startServer(t, reg, Config{MaxInflightBytes: size + size/2, MaxInflightWait: 300 * time.Millisecond})
	c, err := client.Dial("unix://"+sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// A batch of about 160 KB on the wire, 2.5 MB of the budget, held
	// while the backend answers it.
	req := core.NewRequest("gpu_mla", core.ModeExtend)
	req.Batch.ExtendPrefixLens = make([]int64, 40000)
	req.Batch.SeqLens = make([]int64, 40000)
	for i := range req.Batch.SeqLens {
		req.Batch.SeqLens[i] = 1 << 20
	}
	req.Batch.MaxChunkCapacity = 131072
	batch := make(chan error, 1)
	go func() { batch <- c.DispatchBatch(ctx, []core.Request{req}, make([]core.BatchAnswer, 1)) }()
	for used := int64(0); used < 2<<20; {
		time.Sleep(5 * time.Millisecond)
		s.budget.mu.Lock()
		used = s.budget.used
		s.budget.mu.Unlock()
	}
	if _, err := c.KernelModules(ctx, "gpu_mla", h200()); !errors.Is(err, core.ErrOverloaded) {
		t.Errorf("an answer of %d bytes while a batch holds most of the budget: %v, want RESOURCE_EXHAUSTED", size, err)
	}
	close(be.gate)
	if err := <-batch; err != nil {
		t.Fatalf("the batch: %v", err)
	}
	if mods, err := c.KernelModules(ctx, "gpu_mla", h200()); err != nil || len(mods[0].Image) != size {
		t.Errorf("the answer once the batch was answered: %v", err)
	}
	// Each call's end (after its answer was sent) returns what it held.
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.budget.mu.Lock()
		used, held := s.budget.used, len(s.budget.held)
		s.budget.mu.Unlock()
		if used == 0 && held == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("after every call: %d bytes used, %d held", used, held)
		}
	}
}

// TestLargestValidRequestsFitTheirSize: the largest valid request of each
// kind the server refuses by size is below that size on the wire.
func TestLargestValidRequestsFitTheirSize(t *testing.T) {
	lens := make([]int64, core.MaxBatchSize)
	for i := range lens {
		lens[i] = core.MaxLength
	}
	dispatch := &dispatchv1.DispatchRequest{Request: &dispatchv1.Request{
		Backend: strings.Repeat("b", core.MaxBackendNameLen),
		Batch: &dispatchv1.Batch{ForwardMode: dispatchv1.ForwardMode(core.ModeExtend), ExtendPrefixLens: lens, ExtendPrefixLensKnown: true,
			SeqLens: lens, SeqLensKnown: true, MaxChunkCapacity: math.MaxInt64, MlaPrefillCp: true},
		Layer: &dispatchv1.Layer{ChunkedPrefixCacheThreshold: gproto.Int64(math.MaxInt64), DisableChunkedPrefixCache: true, FlashinferMlaDisableRagged: true,
			RocmFusedDecodeMla: true, UseDsa: true, FusedQkvAProjWithMqa: true, IntelAmx: true},
		Runtime: &dispatchv1.Runtime{Platform: dispatchv1.Platform(core.PlatformCUDA), DsaUseMha: gproto.Bool(true), DsaUseMhaSet: true, ComputeCapability: 1000,
			KvCacheDtype: "fp8_e4m3", PiecewiseCudaGraph: true, BreakableCudaGraph: true, DeterministicInference: true, TwoBatchOverlap: true},
	}}
	if _, err := convert.RequestFromProto(dispatch.GetRequest()); err != nil {
		t.Fatalf("the largest request is not valid: %v", err)
	}
	plens := make([]int64, convert.MaxPlanBatch)
	for i := range plens {
		plens[i] = math.MaxInt64
	}
	plan := &dispatchv1.PlanKernelRequest{Backend: strings.Repeat("b", core.MaxBackendNameLen), Method: dispatchv1.Method(core.MLA),
		Dtype: strings.Repeat("d", convert.MaxDTypeLen), KvDtype: strings.Repeat("k", convert.MaxDTypeLen),
		Dims:   &dispatchv1.PlanDims{Heads: math.MaxInt32, HeadDimQk: math.MaxInt32, HeadDimV: math.MaxInt32, SoftmaxScale: math.MaxFloat64, TopK: math.MaxInt32},
		Shape:  &dispatchv1.PlanShape{SeqLens: plens, QLens: plens, PageSize: math.MaxInt32, NumPages: math.MaxInt64, ChunkCapacity: math.MaxInt64, MaxSeqLen: math.MaxInt64},
		Device: &dispatchv1.DeviceInfo{Platform: dispatchv1.Platform(core.PlatformCUDA), Name: strings.Repeat("n", convert.MaxDeviceNameLen), ComputeCapability: math.MaxInt32, Sms: math.MaxInt32, MaxThreadsPerBlock: math.MaxInt32, MaxSharedPerBlock: math.MaxInt64, MaxGrid: []int64{1 << 32, 1 << 32, 1 << 32}},
		Graph:  true}
	modules := &dispatchv1.KernelModulesRequest{Backend: plan.Backend, Device: plan.Device}
	step := &dispatchv1.PlanStepRequest{Backend: plan.Backend, Mode: dispatchv1.ForwardMode(core.ModeExtend), Method: dispatchv1.Method(core.MLA),
		Model: &dispatchv1.StepModel{Heads: math.MaxInt32, KvLoraRank: math.MaxInt32, QkRopeHeadDim: math.MaxInt32, QkNopeHeadDim: math.MaxInt32,
			VHeadDim: math.MaxInt32, SoftmaxScale: math.MaxFloat64, IndexTopk: math.MaxInt32},
		Pool: &dispatchv1.StepPool{PageSize: math.MaxInt32, Slots: math.MaxInt64, MaxTokens: math.MaxInt64, RowWidth: math.MaxInt64,
			ContextLen: math.MaxInt64, KvDtype: strings.Repeat("k", convert.MaxDTypeLen)},
		Batch: &dispatchv1.StepBatch{Size: math.MaxInt32, QueryTokens: math.MaxInt32, Graph: true, SeqLens: plens, QLens: plens,
			ChunkCapacity: math.MaxInt64, PrefixChunk: true},
		Device: plan.Device, QuerySplit: true}
	if _, err := convert.StepRequestFromProto(step); err != nil {
		t.Fatalf("the largest step does not convert: %v", err)
	}
	for _, m := range []gproto.Message{dispatch, plan, modules, step} {
		max, what := maxRequestBytes(m)
		if n := gproto.Size(m); n > max {
			t.Errorf("the largest valid %s has %d bytes, more than the %d refused", what, n, max)
		}
	}
}

// TestServerRefusesRequestsNoValidOneReaches: a Dispatch larger on the
// wire than any valid one is refused (INVALID_ARGUMENT) before it is
// decoded or takes any of the budget; the same request in a DispatchBatch,
// which may be that large, is decoded and answered with its field's error.
func TestServerRefusesRequestsNoValidOneReaches(t *testing.T) {
	c, conn := serve(t, false, Config{})
	ctx := testContext(t)
	req := core.NewRequest("fa3", core.ModeDecode)
	req.Batch.SeqLens = make([]int64, maxDispatchRequestBytes)
	for i := range req.Batch.SeqLens {
		req.Batch.SeqLens[i] = 1
	}
	_, err := c.Dispatch(ctx, &req)
	if !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "request: ") || !strings.Contains(err.Error(), "more than any valid Dispatch request has (1048576)") {
		t.Errorf("a Dispatch of %d entries: %v, want an invalid request naming its size", len(req.Batch.SeqLens), err)
	}
	out := make([]core.BatchAnswer, 1)
	if err := c.DispatchBatch(ctx, []core.Request{req}, out); err != nil || !errors.Is(out[0].Err, core.ErrInvalidRequest) || !strings.Contains(out[0].Err.Error(), "seq_lens") {
		t.Errorf("the same in a DispatchBatch: %v, %v; want the answer's error on seq_lens", err, out[0].Err)
	}
	_, err = dispatchv1.NewKernelsClient(conn).KernelModules(ctx, &dispatchv1.KernelModulesRequest{Backend: "fa3",
		Device: &dispatchv1.DeviceInfo{MaxGrid: make([]int64, maxModulesRequestBytes)}}, grpc.MaxCallSendMsgSize(64<<20))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "KernelModules request") {
		t.Errorf("a KernelModules request of %d bytes: %v, want INVALID_ARGUMENT naming it", maxModulesRequestBytes, err)
	}
}

// TestBudgetGivesMemoryBackWhenIdle: once nothing holds the budget after
// enough came in, the memory goes back at once, or, when it went back too
// recently, as soon as it may; never while a request holds some.
func TestBudgetGivesMemoryBackWhenIdle(t *testing.T) {
	b := newBudget(1<<30, time.Second)
	held := new(int)
	if err := b.admit(held, 100); err != nil {
		t.Fatal(err)
	}
	b.came(returnAfter)
	b.release(new(int)) // another request ends; this one still holds
	b.mu.Lock()
	if b.since == 0 || b.retry != nil {
		t.Errorf("memory given back while a request holds some of the budget")
	}
	b.returned = time.Now().Add(-returnEvery + 50*time.Millisecond) // too recent
	b.mu.Unlock()
	b.release(held)
	b.mu.Lock()
	if b.since == 0 || b.retry == nil {
		t.Errorf("idle within %s of the last time: since %d, retry %v; want a settle to come", returnEvery, b.since, b.retry)
	}
	b.mu.Unlock()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b.mu.Lock()
		since, retry := b.since, b.retry
		b.mu.Unlock()
		if since == 0 && retry == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the memory never went back: since %d", since)
		}
	}
}

// TestAnswerHoldEndsWithItsCall: a KernelModules answer waiting for room
// stops waiting when its call is cancelled, not at the budget's wait.
func TestAnswerHoldEndsWithItsCall(t *testing.T) {
	b := newBudget(1600, 10*time.Second)
	held := new(int)
	if err := b.admit(held, 100); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), answerHoldKey{}, &answerHold{}))
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	err := b.holdAnswer(ctx, 1000)
	if status.Code(err) != codes.Canceled || time.Since(start) > 5*time.Second {
		t.Errorf("an answer whose call was cancelled: %v after %s, want CANCELED at once", err, time.Since(start))
	}
	b.mu.Lock()
	waiting := b.waiting
	b.mu.Unlock()
	if waiting != 0 {
		t.Errorf("%d bytes still counted as waiting", waiting)
	}
	b.release(held)
}

// TestBudgetReleasedWhenAnInterceptorAheadAnswers: an interceptor a
// caller puts ahead of the server's options answers a request itself; what
// the codec admitted of it is released at the call's end all the same.
func TestBudgetReleasedWhenAnInterceptorAheadAnswers(t *testing.T) {
	ctx := testContext(t)
	reg, err := registry.New(ctx, registry.Config{PluginDirs: []string{t.TempDir()}, Platform: core.PlatformCUDA, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	deny := grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		return nil, status.Error(codes.PermissionDenied, "not this caller")
	})
	s, sock := startServer(t, reg, Config{}, deny)
	c, err := client.Dial("unix://"+sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 20 {
		req := core.NewRequest("fa3", core.ModeDecode)
		if _, err := c.Dispatch(ctx, &req); err == nil || !strings.Contains(err.Error(), "not this caller") {
			t.Fatalf("the interceptor ahead: %v", err)
		}
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.budget.mu.Lock()
		used, held, refused := s.budget.used, len(s.budget.held), len(s.budget.refused)
		s.budget.mu.Unlock()
		if used == 0 && held == 0 && refused == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("after 20 answered calls: %d bytes used, %d held, %d refusals kept", used, held, refused)
		}
	}
}

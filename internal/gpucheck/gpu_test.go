package gpucheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devicecheck"
	"github.com/attnplug/attnplug/devicehost"
	"github.com/attnplug/attnplug/launch/cudaexec"
	"github.com/attnplug/attnplug/registry"
)

// rig is the GPU tests' Env, over the registry of the CUDA plugins'
// backends in process (Source).
type rig struct {
	*devicecheck.Env
	reg *registry.Registry
	be  *Backends
}

// dense is the backend of the dense MLA and prefill checks.
const dense = "fa3"

// openEnv opens the GPU or skips the test, saying why.
func openEnv(t *testing.T) *rig {
	t.Helper()
	return openEnvOver(t, func(r *registry.Registry) devicehost.Source { return r })
}

// openEnvOver is openEnv with the Env's Source made of the registry by
// source (a stand-in over it).
func openEnvOver(t *testing.T, source func(*registry.Registry) devicehost.Source) *rig {
	t.Helper()
	be, err := NewBackends()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := Source(t.Context(), be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	e, err := devicecheck.Open(source(reg))
	needGPU(t, err)
	t.Cleanup(func() { e.Close() })
	return &rig{e, reg, be}
}

// needGPU skips the test when err says there is no CUDA device to run on
// (fails it under ATTNPLUG_REQUIRE_GPU=1) and fails it for any other error.
func needGPU(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, cuda.ErrUnavailable) || errors.Is(err, core.ErrNoPlan) {
		if os.Getenv("ATTNPLUG_REQUIRE_GPU") == "1" {
			t.Fatalf("ATTNPLUG_REQUIRE_GPU=1 and no CUDA device to run on: %v", err)
		}
		t.Skipf("no CUDA device to run on: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// runCase checks one workload through the verification layer with the
// plans of backend: allocated, planned, poisoned, launched and verified.
func runCase(t *testing.T, e *rig, backend string, w devicecheck.Workload, rows int) devicecheck.Check {
	t.Helper()
	return runPlanned(t, e, backend, w, rows, nil)
}

// runPlanned is runCase, failing t also where plan (if not nil) finds
// fault with the plan the workload ran.
func runPlanned(t *testing.T, e *rig, backend string, w devicecheck.Workload, rows int, plan func(*core.Plan) error) devicecheck.Check {
	t.Helper()
	r, err := e.Run(t.Context(), backend, w, 1, rows)
	if r == nil {
		t.Fatalf("%s: %v", w.Describe(), err)
	}
	defer r.Close()
	if err != nil {
		t.Errorf("%s (%s): %v", w.Describe(), r.Prepared.Plan().Note, err)
	}
	if plan != nil {
		if err := plan(r.Prepared.Plan()); err != nil {
			t.Errorf("%s (%s): %v", w.Describe(), r.Prepared.Plan().Note, err)
		}
	}
	return r.Check
}

// packedPlan faults a decode plan whose slot starts (metadata "slots")
// give no slot more than one item: a ragged batch the planner packs has a
// block run its slot's items one after the other. A plan scheduled on the
// device has no such metadata (TestScheduleOnDevice compares the device's
// schedule with the host's).
func packedPlan(p *core.Plan) error {
	for _, m := range p.Metadata {
		if m.Name != "slots" {
			continue
		}
		for k := 1; k < len(m.Int32s); k++ {
			if m.Int32s[k]-m.Int32s[k-1] > 1 {
				return nil
			}
		}
		return fmt.Errorf("%d slots of one item or none: not packed", len(m.Int32s)-1)
	}
	return nil
}

// scheduledPlan faults a decode plan that is not scheduled on the device
// (mla_schedule, then the decode, then the combine) or whose decode is not
// body: a dense plan that holds for a batch size with a bound of the
// lengths, where the decode waits late.
func scheduledPlan(body string) func(*core.Plan) error {
	return func(p *core.Plan) error {
		var got []string
		for _, l := range p.Launches {
			got = append(got, l.Entry)
		}
		if len(got) != 3 || got[0] != "mla_schedule" || got[1] != body {
			return fmt.Errorf("launches %v, want mla_schedule, %s and the combine", got, body)
		}
		return nil
	}
}

// logRagged is n lengths from lo to hi, log-uniform, in a scrambled order
// (each once where n is prime to 37).
func logRagged(n int, lo, hi float64) []int64 {
	l := make([]int64, n)
	for i := range l {
		l[i] = int64(lo * math.Pow(hi/lo, float64((i*37)%n)/float64(max(n-1, 1))))
	}
	return l
}

// TestMLADecodeRandom checks the decode kernels against the fp64 reference
// on random ragged batches: heads 16/32/64/128, page sizes 1 and 64, batch
// 1..256, 1..4 query tokens, lengths up to 16k (and fixed cases up to 128k,
// and extends of up to 8192 query tokens), shuffled pages, outputs poisoned
// first.
func TestMLADecodeRandom(t *testing.T) {
	e := openEnv(t)
	// The fixed batches run on fa3's plans, but those named after another
	// catalog's MLA kernel (FlashInfer's paged MLA, FlashMLA).
	backendOf := map[string]string{"flashinfer page 1": "flashinfer", "flashmla page 64": "flashmla"}
	fixed := []devicecheck.MLA{
		{Name: "one key", Heads: 16, PageSize: 1, SeqLens: []int64{1}, QLens: []int64{1}, Seed: 1},
		{Name: "verify 4 of 4", Heads: 128, PageSize: 64, SeqLens: []int64{4, 70}, QLens: []int64{4, 4}, Seed: 2},
		{Name: "odd tails", Heads: 32, PageSize: 64, SeqLens: []int64{33, 65, 127, 4097}, QLens: []int64{3, 3, 3, 3}, Seed: 3},
		{Name: "16k", Heads: 128, PageSize: 64, SeqLens: []int64{16384}, QLens: []int64{1}, Seed: 4},
		{Name: "batch 256", Heads: 16, PageSize: 1, SeqLens: repeat(256, 300), QLens: repeat(256, 2), Seed: 5},
		{Name: "flashinfer page 1", Heads: 64, PageSize: 1, SeqLens: []int64{5000, 17}, QLens: []int64{1, 1}, Seed: 6},
		{Name: "flashmla page 64", Heads: 128, PageSize: 64, SeqLens: []int64{3000, 9000}, QLens: []int64{2, 2}, Seed: 7},
		{Name: "128k, 16 heads", Heads: 16, PageSize: 64, SeqLens: []int64{131072, 5}, QLens: []int64{2, 2}, Seed: 8},
		{Name: "128k, 128 heads", Heads: 128, PageSize: 1, SeqLens: []int64{131072}, QLens: []int64{1}, Seed: 9},
		// 1280 rows, each long request cut into more chunks than a warp has
		// lanes: mla_combine_rows takes the weights 32 at a time.
		{Name: "combine rows", Heads: 16, PageSize: 64, SeqLens: append([]int64{65536, 100, 65536}, repeat(17, 7)...), QLens: repeat(20, 4), Seed: 10},
		{Name: "combine rows, graph", Heads: 128, PageSize: 64, SeqLens: []int64{40000, 3, 9000, 5, 700, 5, 5, 5, 64}, QLens: repeat(9, 1), Seed: 11, Graph: true, MaxSeqLen: 50000},
		// Absorbed-MLA extends of more query tokens than a work request
		// holds (launch.MaxQLen): cut into work requests by
		// mla_schedule_split, causal within the extend.
		{Name: "extend 1000 over 300", Heads: 16, PageSize: 64, SeqLens: []int64{1300, 300, 4097}, QLens: []int64{1000, 2, 129}, Seed: 12},
		{Name: "extend 300, graph", Heads: 128, PageSize: 1, SeqLens: []int64{2300, 65, 9000}, QLens: []int64{300, 65, 64}, Seed: 13, Graph: true, MaxSeqLen: 10000},
		{Name: "extend 8192 over 3000", Heads: 16, PageSize: 64, SeqLens: []int64{11192}, QLens: []int64{8192}, Seed: 14},
		// Queries in two parts, q_nope and q_rope (QuerySplit), as
		// sglang's DeepSeek layers leave them.
		{Name: "split decode", Heads: 128, PageSize: 64, SeqLens: []int64{5000, 33, 4097}, QLens: []int64{1, 1, 1}, Seed: 15, Split: true},
		{Name: "split verify, graph", Heads: 16, PageSize: 1, SeqLens: []int64{700, 9000}, QLens: []int64{4, 4}, Seed: 16, Split: true, Graph: true, MaxSeqLen: 10000},
		{Name: "split extend 300", Heads: 64, PageSize: 64, SeqLens: []int64{2300, 65}, QLens: []int64{300, 65}, Seed: 17, Split: true},
		// Ragged batches, packed: a block runs its slot's items one after
		// the other (the 16-row and the seesaw bodies).
		{Name: "packed, 16 heads", Heads: 16, PageSize: 64, SeqLens: logRagged(48, 64, 8192), QLens: repeat(48, 1), Seed: 18},
		{Name: "packed, 128 heads", Heads: 128, PageSize: 1, SeqLens: logRagged(48, 64, 8192), QLens: repeat(48, 1), Seed: 19},
		{Name: "packed verify, graph", Heads: 128, PageSize: 64, SeqLens: logRagged(48, 64, 8192), QLens: repeat(48, 2), Seed: 20, Graph: true, MaxSeqLen: 9000},
		{Name: "packed, 16 heads, graph", Heads: 16, PageSize: 64, SeqLens: logRagged(48, 64, 8192), QLens: repeat(48, 1), Seed: 21, Graph: true, MaxSeqLen: 8192},
	}
	for _, c := range fixed {
		backend := dense
		if b, ok := backendOf[c.Name]; ok {
			backend = b
		}
		var plan func(*core.Plan) error
		if strings.HasPrefix(c.Name, "packed") {
			plan = packedPlan
		}
		ch := runPlanned(t, e, backend, c, 64, plan)
		t.Logf("%-18s %s: %v", c.Name, c.Describe(), ch)
	}
	n := 40
	if testing.Short() {
		n = 8
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	seed := rng.Uint64()
	t.Logf("random cases from seed %d", seed)
	rng = rand.New(rand.NewPCG(seed, 2))
	for i := range n {
		c := RandomCase(rng, "random", []int{16, 32, 64, 128}, []int{1, 64}, []int{1, 2, 5, 16, 64, 133, 256}, 4, 16384, 1<<21)
		if i%3 == 2 {
			// Scheduled on the device: a graph plan for the batch size,
			// with room in the page table for longer requests.
			c.Graph, c.MaxSeqLen = true, slices.Max(c.SeqLens)+int64(rng.IntN(3000))
		}
		ch := runCase(t, e, dense, c, 24)
		t.Logf("random %2d %s: %v", i, c.Describe(), ch)
	}
}

// TestScheduleOnDevice runs mla_schedule on random batches and compares
// what it writes into the workspace (items, per-request metadata, item
// count, slot starts) with what the host's planner computes for the same
// batch: the device cuts every batch exactly as the CPU does, one item a
// block or packed.
func TestScheduleOnDevice(t *testing.T) {
	e := openEnv(t)
	rng := rand.New(rand.NewPCG(31, 7))
	packed := 0
	defer func() {
		if packed == 0 && !t.Failed() {
			t.Error("no batch was packed")
		}
		t.Logf("%d of 60 batches packed", packed)
	}()
	for i := range 60 {
		batches := []int{1, 2, 7, 16, 64, 133, 1024, 1500, 4096}
		c := RandomCase(rng, "sched", []int{16, 128}, []int{1, 64}, batches, 4, 1<<17, 1<<26)
		if i%4 == 0 { // ragged query lengths too
			for j := range c.QLens {
				c.QLens[j] = 1 + int64(rng.IntN(int(min(c.SeqLens[j], 4))))
			}
		}
		if i%4 == 1 { // equal lengths, which the one-wave cut takes
			for j := range c.SeqLens {
				c.SeqLens[j] = c.SeqLens[0]
			}
		}
		if i%4 == 3 { // log-uniform lengths, which the packed cut takes
			n := len(c.SeqLens)
			c.SeqLens = logRagged(n, 64, float64(min(max(1<<24/n, 128), 1<<15)))
		}
		c.Graph, c.MaxSeqLen = true, slices.Max(c.SeqLens)
		b, err := e.AllocMLA(c, 1)
		if err != nil {
			t.Fatal(err)
		}
		onDev := b.Req
		onDev.Backend = dense
		cpu := onDev
		cpu.Shape.MaxSeqLen = 0 // the CPU's graph plan: same grid, metadata of the lengths
		cp, err := e.reg.PlanKernel(t.Context(), &cpu)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]int32{}
		for _, m := range cp.Metadata {
			want[m.Name] = m.Int32s
		}
		// counts[1]: the planner's 0, the device schedule's 1 (MLA_ITEMS may
		// then ask L2 for keys before its wait).
		want["counts"] = []int32{want["counts"][0], 1}
		if packedPlan(cp) == nil {
			packed++
		}
		got, err := runSchedule(e, b, &onDev)
		b.Free()
		if err != nil {
			t.Fatalf("%s: %v", c.Describe(), err)
		}
		for _, name := range []string{"schedule", "requests", "counts", "slots"} {
			if !slices.Equal(got[name], want[name]) {
				t.Fatalf("%s: %s on the device differs from the host's (%d values, %d on the host); first difference at %d",
					c.Describe(), name, len(got[name]), len(want[name]), firstDiff(got[name], want[name]))
			}
		}
	}
}

func firstDiff(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// runSchedule runs the PerBatch launch of req's plan (mla_schedule), from
// the Host's Source, on b and returns what it wrote, by the names of the
// host planner's metadata.
func runSchedule(e *rig, b *devicecheck.MLABatch, req *core.PlanRequest) (map[string][]int32, error) {
	c := b.Case
	pr, err := e.Host.Plan(context.Background(), req)
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	p := pr.Plan()
	sched := p.Launches[0]
	sizes := map[string]int{"schedule": 0, "requests": 8 * len(c.SeqLens), "counts": 2, "slots": 0}
	for _, a := range sched.Args {
		if a.Param == "capacity" {
			sizes["schedule"], sizes["slots"] = 4*int(a.Int), int(a.Int)+1
		}
	}
	step := devicehost.NewStep(pr, e.Stream(), nil)
	out := map[string][]int32{}
	err = e.Do(func(x *cuda.Ctx) error {
		if err := x.Fill32(pr.Workspace().Ptr, 0xdeadbeef, pr.Workspace().Bytes/4); err != nil {
			return err
		}
		if err := x.Synchronize(); err != nil {
			return err
		}
		if err := step.Batch(x, b.Tensors(0)); err != nil {
			return err
		}
		if err := x.SyncStream(e.Stream()); err != nil {
			return err
		}
		for _, a := range sched.Args {
			n, ok := sizes[a.Param]
			if !ok || a.Kind != core.ArgWorkspace {
				continue
			}
			v := make([]int32, n)
			if err := x.CopyOut(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*n), pr.Workspace().Ptr+uint64(a.Offset)); err != nil {
				return err
			}
			out[a.Param] = v
		}
		return nil
	})
	return out, err
}

// TestServingLoop runs decode steps as a serving loop does, on plans that
// hold for a batch size: for each batch size, heads and page size, one plan
// request (counted at the backend, through a registry), one CUDA graph
// captured for the step (seq_lens advanced by one on the device, the
// schedule, the layers) and replayed for every step with no RPC, no host
// copy and no allocation; the outputs are checked against the fp64
// reference at sampled steps, and the host's time per step (the replay
// call) is reported.
func TestServingLoop(t *testing.T) {
	e := openEnv(t)
	steps := 1000
	if testing.Short() {
		steps = 100
	}
	const layers = 2
	for _, heads := range []int{16, 128} {
		for _, page := range []int{1, 64} {
			for _, batch := range []int{1, 16, 64} {
				name := fmt.Sprintf("heads %d page %d batch %d", heads, page, batch)
				rng := rand.New(rand.NewPCG(uint64(heads*1000+page*10+batch), 5))
				c := devicecheck.MLA{Heads: heads, PageSize: page, Seed: uint64(batch), Graph: true, MaxSeqLen: 8192}
				for range batch {
					c.SeqLens = append(c.SeqLens, 1+rng.Int64N(4000))
					c.QLens = append(c.QLens, 1)
				}
				fig, err := ServingLoop(e.Env, e.reg, e.be.FA3, dense, c, steps, layers, func(step int, b *devicecheck.MLABatch) error {
					ch, err := b.Verify(layers-1, 16)
					if err != nil {
						return err
					}
					if !ch.OK() {
						return fmt.Errorf("step %d: %v", step, ch)
					}
					return nil
				})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if fig.Plans != 1 {
					t.Errorf("%s: %d plan requests for %d steps, want 1", name, fig.Plans, steps)
				}
				t.Logf("%s: %d steps, %d plan request(s); host time per step: %.2f us asking the registry for the plan, %.2f us launching the step's graph",
					name, steps, fig.Plans, fig.PlanUS, fig.ReplayUS)
			}
		}
	}
}

func repeat(n int, v int64) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// TestDecodeStepGraph runs a 61-layer decode step as the host would: one
// plan for the batch, 61 launches on 61 KV caches, captured once as a CUDA
// graph and replayed; then the next step's lengths (one token longer) only
// update the plan's metadata, and the same graph replays them. Every
// replay is checked against the fp64 reference, and the host-side cost of
// a layer's launch is reported.
func TestDecodeStepGraph(t *testing.T) {
	e := openEnv(t)
	const layers = 61
	for _, heads := range []int{16, 128} {
		rng := rand.New(rand.NewPCG(uint64(heads), 3))
		c := devicecheck.MLA{Heads: heads, PageSize: 64, Seed: uint64(heads), Graph: true}
		for range 32 {
			l := 1 + rng.Int64N(4000)
			if l%64 == 0 {
				l-- // room for the next step's token in the last page
			}
			c.SeqLens = append(c.SeqLens, l)
			c.QLens = append(c.QLens, 1)
		}
		b, err := e.AllocMLA(c, 4)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free()
		req := b.Req
		req.Backend = dense
		p, err := e.Host.Plan(t.Context(), &req)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		g, hostNS, graphNS, err := captureDecodeStep(e, b, p, layers)
		if err != nil {
			t.Fatalf("heads %d: %v", heads, err)
		}
		t.Logf("heads %d: host cost per layer: %.2f us launching directly (%d launches per layer), %.2f us replaying the step's graph; plan requests for the step: 1",
			heads, hostNS/1000, len(p.Plan().Launches), graphNS/1000)
		// The last layer wrote the outputs last: KV copy 60 % 4.
		ch, err := b.Verify(layers-1, 32)
		if err != nil || !ch.OK() {
			t.Fatalf("heads %d: graph replay: %v %v", heads, ch, err)
		}
		// Next step: every request one token longer. Same batch size, so
		// the same graph, with the new plan's metadata.
		for i := range b.Case.SeqLens {
			b.Case.SeqLens[i]++
		}
		b.Req = b.Case.Request(e.Device(), b.NumPages)
		// Pages: the step may cross a page boundary; Alloc gave each request
		// its pages for the old lengths plus 3 spare pages in the cache.
		if !pagesFit(b) {
			t.Logf("heads %d: a request crossed a page boundary; re-allocating for step 2", heads)
			continue
		}
		next := b.Req
		next.Backend = dense
		np, err := e.reg.PlanKernel(t.Context(), &next)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.UpdateChecked(e.Stream(), &next, np); err != nil { // the registry checked np
			t.Fatalf("heads %d: update: %v", heads, err)
		}
		err = e.Do(func(x *cuda.Ctx) error {
			if err := b.Poison(x); err != nil {
				return err
			}
			return x.LaunchGraph(g, e.Stream())
		})
		if err != nil {
			t.Fatal(err)
		}
		ch, err = b.Verify(layers-1, 32)
		if err != nil || !ch.OK() {
			t.Fatalf("heads %d: graph replay after update: %v %v", heads, ch, err)
		}
		e.Do(func(x *cuda.Ctx) error { return x.DestroyGraph(g) })
	}
}

// captureDecodeStep times the step's launches issued directly (after a
// warm-up step), captures the layers' launches in one graph, replays it once
// to warm it and once timed, and returns the graph and both per-layer costs.
func captureDecodeStep(e *rig, b *devicecheck.MLABatch, p *cudaexec.Prepared, layers int) (g cuda.Graph, hostNS, graphNS float64, err error) {
	tensors := make([][]cudaexec.Buffer, layers)
	for l := range tensors {
		if tensors[l], err = b.Tensors(l).Bind(p.Tensors()); err != nil {
			return 0, 0, 0, err
		}
	}
	err = e.Do(func(x *cuda.Ctx) error {
		// Host cost of the launches, outside capture, after a warm-up
		// step (the first launches load the functions).
		for round := range 3 {
			if err := x.SyncStream(e.Stream()); err != nil {
				return err
			}
			start := time.Now()
			for l := range layers {
				if err := p.Launch(x, e.Stream(), tensors[l]); err != nil {
					return err
				}
			}
			if round > 0 {
				hostNS = float64(time.Since(start).Nanoseconds()) / float64(layers)
			}
		}
		if err := x.SyncStream(e.Stream()); err != nil {
			return err
		}
		if err := b.Poison(x); err != nil {
			return err
		}
		g, err = x.Capture(e.Stream(), func() error {
			for l := range layers {
				if err := p.Launch(x, e.Stream(), tensors[l]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := x.LaunchGraph(g, e.Stream()); err != nil { // warm
			return err
		}
		if err := x.SyncStream(e.Stream()); err != nil {
			return err
		}
		if err := b.Poison(x); err != nil {
			return err
		}
		start := time.Now()
		err = x.LaunchGraph(g, e.Stream())
		graphNS = float64(time.Since(start).Nanoseconds()) / float64(layers)
		return err
	})
	return g, hostNS, graphNS, err
}

// pagesFit reports whether every request's keys still fit its pages.
func pagesFit(b *devicecheck.MLABatch) bool {
	for i, n := range b.Case.SeqLens {
		have := int64(b.Indptr[i+1]-b.Indptr[i]) * int64(b.Case.PageSize)
		if n > have {
			return false
		}
	}
	return true
}

// TestKernelFault runs a kernel that writes to an illegal address in a
// child process: the driver reports the fault, the Device turns it into
// ErrFault for every later call, and the process lives on.
func TestKernelFault(t *testing.T) {
	if os.Getenv("ATTNPLUG_FAULT_CHILD") == "1" {
		faultChild(t)
		return
	}
	openEnv(t) // skips without a GPU
	cmd := exec.Command(os.Args[0], "-test.run=^TestKernelFault$", "-test.v")
	cmd.Env = append(os.Environ(), "ATTNPLUG_FAULT_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "fault reported:") || !strings.Contains(string(out), "after the fault:") {
		t.Fatalf("child output:\n%s", out)
	}
	t.Logf("child:\n%s", out)
}

func faultChild(t *testing.T) {
	e := openEnv(t)
	src := `extern "C" __global__ void bad(int* p) { p[threadIdx.x * 1024 * 1024] = 1; }`
	info := e.Host.CUDA().Info()
	ptx, err := cuda.CompilePTX(src, "bad.cu", "--gpu-architecture=compute_"+itoa(info.Major*10+info.Minor))
	if err != nil {
		t.Fatal(err)
	}
	mod := core.KernelModule{Name: "bad", Platform: core.PlatformCUDA, Format: core.FormatPTX, Image: []byte(ptx),
		Entries: []core.Entry{{Name: "bad", Params: []core.Param{{Name: "p", Kind: core.ParamPtr}}}}}
	mod.SHA256 = core.ImageSHA256(mod.Image)
	if err := e.Host.Executor().Load([]core.KernelModule{mod}); err != nil {
		t.Fatal(err)
	}
	err = e.Do(func(x *cuda.Ctx) error {
		m, err := x.LoadModule(mod.Image)
		if err != nil {
			return err
		}
		f, err := x.Function(m, "bad")
		if err != nil {
			return err
		}
		arg := uint64(16)
		ptr := unsafePointer(&arg)
		if err := x.Launch(f, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, e.Stream(), &ptr); err != nil {
			return err
		}
		return x.SyncStream(e.Stream())
	})
	if !errors.Is(err, cuda.ErrFault) {
		t.Fatalf("want ErrFault, got %v", err)
	}
	t.Logf("fault reported: %v", err)
	err = e.Do(func(x *cuda.Ctx) error { return nil })
	if !errors.Is(err, cuda.ErrFault) {
		t.Fatalf("after the fault: want ErrFault, got %v", err)
	}
	t.Logf("after the fault: %v", err)
}

func itoa(n int) string { return strconv.Itoa(n) }

// unsafePointer returns a pointer to v for kernelParams, pinned for the
// rest of the process (the child exits right after).
func unsafePointer(v *uint64) unsafe.Pointer {
	faultPin.Pin(v)
	return unsafe.Pointer(v)
}

var faultPin runtime.Pinner

// TestBenchGPU prints the benchmark table (of the shapes whose names
// contain $ATTNPLUG_BENCH_ONLY) judged against docs/bench/targets.json; it
// runs only when ATTNPLUG_BENCH_GPU names the python3 to compare with (or
// "none").
func TestBenchGPU(t *testing.T) {
	py := os.Getenv("ATTNPLUG_BENCH_GPU")
	if py == "" {
		t.Skip("set ATTNPLUG_BENCH_GPU=python3 (or none) to run the GPU benchmark")
	}
	if py == "none" {
		py = ""
	}
	e := openEnv(t)
	targets, err := devicecheck.LoadTargets("../../docs/bench/targets.json")
	if err != nil {
		t.Fatal(err)
	}
	decode, prefill, quant := devicecheck.Shapes(os.Getenv("ATTNPLUG_BENCH_ONLY"))
	rep, err := devicecheck.RunBench(t.Context(), e.Env, devicecheck.BenchConfig{Decode: decode, Prefill: prefill, Quant: quant,
		Dense: dense, Sparse: "dsa", Python: py, Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	rep.WriteTable(&buf)
	t.Log("\n" + buf.String())
	if dir := os.Getenv("OUT"); dir != "" {
		js, _ := json.MarshalIndent(rep, "", "  ")
		os.WriteFile(dir+"/bench.json", js, 0o644)
	}
}

// TestPrefillMethods runs MHA, MHA_ONE_SHOT and MHA_CHUNKED_KV on random
// ragged batches with prefixes (the chunked method with a capacity small
// enough to cut several chunks), checks each against the fp64 reference
// with outputs poisoned first, and checks that the three methods agree on
// the same batch: the method changes speed, never results.
func TestPrefillMethods(t *testing.T) {
	e := openEnv(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	seed := rng.Uint64()
	t.Logf("random cases from seed %d", seed)
	rng = rand.New(rand.NewPCG(seed, 6))
	n := 10
	if testing.Short() {
		n = 4
	}
	for i := range n {
		c := devicecheck.Prefill{Heads: []int{16, 128}[rng.IntN(2)], Seed: rng.Uint64(), ChunkCapacity: 256 + rng.IntN(4096)}
		b := 1 + rng.IntN(6)
		for range b {
			q := 1 + rng.Int64N(700)
			p := rng.Int64N(1500)
			if rng.IntN(3) == 0 {
				p = 0
			}
			c.SeqLens = append(c.SeqLens, p+q)
			c.QLens = append(c.QLens, q)
		}
		var outs [][]uint16
		for _, m := range []core.Method{core.MHAOneShot, core.MHAChunkedKV, core.MHA} {
			c.Method = m
			backend := dense
			if m == core.MHA {
				backend = MHAName
			}
			r, err := e.Run(t.Context(), backend, c, 1, 24)
			if r == nil {
				t.Fatalf("%s: %v", c.Describe(), err)
			}
			if err != nil {
				t.Errorf("%s (%s): %v", c.Describe(), r.Prepared.Plan().Note, err)
			} else {
				t.Logf("%2d %s: %v", i, c.Describe(), r.Check)
			}
			out, _, err := e.Outputs(r.Batch)
			r.Close()
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, out)
		}
		for k := 1; k < len(outs); k++ {
			if d := Agreement(outs[k], outs[0]); d > devicecheck.MaxRelErr {
				t.Errorf("case %d: method %d differs from MHA_ONE_SHOT by %.2e", i, k, d)
			}
		}
	}
}

// TestPrefixChunks runs MHA_CHUNKED_KV's prefix-chunk passes (sglang's
// attn_attend_prefix_cache calls) on fa3's prefix-chunk plans against the
// fp64 reference, outputs poisoned first: every new token over every key
// of its request's chunk, a request without keys in the chunk a zero row
// with an LSE of -inf.
func TestPrefixChunks(t *testing.T) {
	e := openEnv(t)
	for _, c := range []devicecheck.Prefill{
		{Name: "chunk with an empty request", Heads: 16, SeqLens: []int64{1024, 0, 300}, QLens: []int64{500, 7, 2000}, Seed: 1},
		{Name: "one new token", Heads: 128, SeqLens: []int64{4096}, QLens: []int64{1}, Seed: 2},
		{Name: "short chunks, long extends", Heads: 128, SeqLens: []int64{17, 130, 1}, QLens: []int64{3000, 129, 64}, Seed: 3},
	} {
		c.Method, c.PrefixChunk = core.MHAChunkedKV, true
		ch := runCase(t, e, dense, c, 48)
		t.Logf("%-28s %s: %v", c.Name, c.Describe(), ch)
	}
}

package cudaexec

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/internal/ptxstub"
	"github.com/attnplug/attnplug/launch"
)

// fakeDevice stands in for a GPU in the tests that need none: it keeps
// the books of what an Executor allocates, copies, loads and frees, and
// fails the call a test names. Addresses are distinct and never reused,
// so a copy or a free of memory not allocated (or freed already) is
// caught.
type fakeDevice struct {
	info cuda.Info

	mu       sync.Mutex
	next     uint64
	live     map[uint64][]byte // allocations not freed, with what was copied in
	modules  map[cuda.Module]string
	funcs    map[cuda.Function]string
	shared   map[string]int // the dynamic shared memory granted, by entry
	streams  []cuda.Stream  // the stream of each asynchronous copy
	calls    map[string]int // calls made, by name
	failAt   map[string]int // a call fails when it is the nth of its name
	missing  map[string]bool
	loadErr  error    // what LoadModule returns, when set (the driver refusing an image)
	problems []string // what the Executor did wrong: a bad free, a copy outside an allocation
}

func newFakeDevice() *fakeDevice {
	return &fakeDevice{
		info: cuda.Info{Name: "Fake H200", Major: 9, Minor: 0, SMs: 132, MaxSharedPerBlock: 48 << 10,
			MaxSharedPerBlockOptin: 227 << 10, MaxGrid: [3]int{1<<31 - 1, 65535, 65535}, MaxThreadsPerBlock: 1024},
		next: 0x7f00_0000_0000, live: map[uint64][]byte{}, modules: map[cuda.Module]string{},
		funcs: map[cuda.Function]string{}, shared: map[string]int{}, calls: map[string]int{},
		failAt: map[string]int{}, missing: map[string]bool{},
	}
}

func (d *fakeDevice) Info() cuda.Info { return d.info }

func (d *fakeDevice) Do(f func(deviceCtx) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return f(fakeCtx{d})
}

// check fails t with what the Executor did wrong, and with every
// allocation still live and every module still loaded when none may be.
func (d *fakeDevice) check(t *testing.T, wantFree bool) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.problems {
		t.Error(p)
	}
	if wantFree && len(d.live) > 0 {
		var left []string
		for p, b := range d.live {
			left = append(left, fmt.Sprintf("%d bytes at %#x", len(b), p))
		}
		sort.Strings(left)
		t.Errorf("device memory left allocated: %s", strings.Join(left, ", "))
	}
}

// liveBytes is the device memory allocated and not freed.
func (d *fakeDevice) liveBytes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for _, b := range d.live {
		n += int64(len(b))
	}
	return n
}

// bytesAt is a copy of the n bytes at device address p.
func (d *fakeDevice) bytesAt(p uint64, n int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	for base, b := range d.live {
		if p >= base && p+uint64(n) <= base+uint64(len(b)) {
			return append([]byte(nil), b[p-base:p-base+uint64(n)]...)
		}
	}
	return nil
}

// fakeCtx is the fakeDevice's deviceCtx; its methods run under the
// device's lock, inside Do.
type fakeCtx struct{ d *fakeDevice }

// call counts a call and says whether it is the one to fail.
func (c fakeCtx) call(name string) error {
	c.d.calls[name]++
	if n := c.d.failAt[name]; n > 0 && c.d.calls[name] == n {
		return fmt.Errorf("fake %s: out of memory", name)
	}
	return nil
}

func (c fakeCtx) Alloc(n int64) (uint64, error) {
	if err := c.call("alloc"); err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, fmt.Errorf("fake alloc of %d bytes", n)
	}
	p := c.d.next
	c.d.next += uint64(n+255) / 256 * 256
	c.d.live[p] = make([]byte, n)
	return p, nil
}

func (c fakeCtx) Free(p uint64) error {
	if p == 0 {
		return nil
	}
	c.d.calls["free"]++
	if _, ok := c.d.live[p]; !ok {
		c.d.problems = append(c.d.problems, fmt.Sprintf("free of %#x, which is not allocated", p))
		return fmt.Errorf("fake free of %#x", p)
	}
	delete(c.d.live, p)
	return nil
}

func (c fakeCtx) copyIn(dst uint64, src []byte) error {
	for base, b := range c.d.live {
		if dst >= base && dst+uint64(len(src)) <= base+uint64(len(b)) {
			copy(b[dst-base:], src)
			return nil
		}
	}
	c.d.problems = append(c.d.problems, fmt.Sprintf("copy of %d bytes to %#x, outside every allocation", len(src), dst))
	return fmt.Errorf("fake copy to %#x", dst)
}

func (c fakeCtx) CopyIn(dst uint64, src []byte) error {
	if err := c.call("copy"); err != nil {
		return err
	}
	return c.copyIn(dst, src)
}

func (c fakeCtx) CopyInAsync(dst uint64, src []byte, s cuda.Stream) error {
	if err := c.call("copy_async"); err != nil {
		return err
	}
	c.d.streams = append(c.d.streams, s)
	return c.copyIn(dst, src)
}

func (c fakeCtx) LoadModule(image []byte) (cuda.Module, error) {
	if err := c.call("load"); err != nil {
		return 0, err
	}
	if c.d.loadErr != nil {
		return 0, c.d.loadErr
	}
	m := cuda.Module(c.d.next)
	c.d.next += 256
	c.d.modules[m] = string(image)
	return m, nil
}

func (c fakeCtx) UnloadModule(m cuda.Module) error {
	c.d.calls["unload"]++
	if _, ok := c.d.modules[m]; !ok {
		c.d.problems = append(c.d.problems, fmt.Sprintf("unload of module %#x, which is not loaded", m))
		return fmt.Errorf("fake unload of %#x", m)
	}
	delete(c.d.modules, m)
	return nil
}

func (c fakeCtx) Function(m cuda.Module, name string) (cuda.Function, error) {
	if _, ok := c.d.modules[m]; !ok {
		c.d.problems = append(c.d.problems, fmt.Sprintf("lookup of %s in module %#x, which is not loaded", name, m))
	}
	if c.d.missing[name] {
		return 0, fmt.Errorf("fake cuModuleGetFunction(%s): named symbol not found", name)
	}
	f := cuda.Function(c.d.next)
	c.d.next += 256
	c.d.funcs[f] = name
	return f, nil
}

func (c fakeCtx) SetMaxDynamicShared(f cuda.Function, n int) error {
	if err := c.call("set_shared"); err != nil {
		return err
	}
	c.d.shared[c.d.funcs[f]] = n
	return nil
}

// The test module: an entry taking every kind of scalar parameter, one
// taking none, and one with a TMA descriptor; PTX of ptxstub's, whose
// entries only return.
var testEntries = []core.Entry{
	{Name: "decode", Params: []core.Param{{Name: "q", Kind: core.ParamPtr}, {Name: "out", Kind: core.ParamPtr},
		{Name: "sched", Kind: core.ParamPtr}, {Name: "ws", Kind: core.ParamPtr}, {Name: "n", Kind: core.ParamI32},
		{Name: "total", Kind: core.ParamI64}, {Name: "scale", Kind: core.ParamF32}}},
	{Name: "none"},
	{Name: "tma", Params: []core.Param{{Name: "n", Kind: core.ParamI32}, {Name: "q_map", Kind: core.ParamTensorMap}}},
	{Name: "rest", Params: []core.Param{{Name: "kv_cache", Kind: core.ParamPtr}, {Name: "kv_indices", Kind: core.ParamPtr},
		{Name: "lse", Kind: core.ParamPtr}}},
}

func testModule(name string) core.KernelModule {
	img := ptxstub.Image("compute_90", "", testEntries)
	return core.KernelModule{Name: name, Platform: core.PlatformCUDA, Arch: "compute_90", Format: core.FormatPTX,
		Image: img, SHA256: core.ImageSHA256(img), Entries: testEntries}
}

// testRequest is a decode batch of two requests on dev.
func testRequest(dev core.DeviceInfo) *core.PlanRequest {
	return &core.PlanRequest{Backend: "fa3", Method: core.MLA, DType: "bf16",
		Dims:   core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.0417},
		Shape:  core.PlanShape{SeqLens: []int64{100, 200}, QLens: []int64{1, 1}, PageSize: 64, NumPages: 8},
		Device: dev}
}

// testPlan is a plan for req that launch.Check accepts: the "decode" entry
// over q and out, a schedule in metadata, the workspace, 64 KB of shared
// memory (more than a block has without opting in); then "rest" over the
// other tensors of the layout that hold data (a plan binds them all).
func testPlan(t *testing.T, req *core.PlanRequest, sched []int32) *core.Plan {
	t.Helper()
	ts, err := launch.Tensors(req)
	if err != nil {
		t.Fatal(err)
	}
	return &core.Plan{Kernel: "flash_attn_with_kvcache", Tensors: ts,
		Metadata:       []core.MetaBuffer{{Name: "sched", Int32s: sched}},
		WorkspaceBytes: 1 << 20,
		Launches: []core.Launch{{Module: "m", Entry: "decode", Grid: [3]uint32{2, 1, 1}, Block: [3]uint32{256, 1, 1},
			SharedBytes: 64 << 10, Args: []core.Arg{
				{Param: "q", Kind: core.ArgTensor, Name: "q"}, {Param: "out", Kind: core.ArgTensor, Name: "out"},
				{Param: "sched", Kind: core.ArgMeta, Name: "sched", Offset: 4}, {Param: "ws", Kind: core.ArgWorkspace, Offset: 512},
				{Param: "n", Kind: core.ArgInt, Int: -3}, {Param: "total", Kind: core.ArgInt, Int: 1 << 40},
				{Param: "scale", Kind: core.ArgFloat, Float: 0.5}}},
			{Module: "m", Entry: "rest", Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, Args: []core.Arg{
				{Param: "kv_cache", Kind: core.ArgTensor, Name: "kv_cache"}, {Param: "kv_indices", Kind: core.ArgTensor, Name: "kv_indices"},
				{Param: "lse", Kind: core.ArgTensor, Name: "lse"}}}}}
}

// loadedExecutor is an Executor on a fake device with the test module
// loaded as "m".
func loadedExecutor(t *testing.T) (*Executor, *fakeDevice) {
	t.Helper()
	d := newFakeDevice()
	e := newExecutor(d)
	if err := e.Load([]core.KernelModule{testModule("m")}); err != nil {
		t.Fatal(err)
	}
	return e, d
}

package cudaexec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/launch"
)

// TestDeviceInfo: the device as plans describe it, with the shared memory
// a block may use after opting in, or without when the driver reports no
// opt-in figure.
func TestDeviceInfo(t *testing.T) {
	i := cuda.Info{Name: "NVIDIA H200", Major: 9, Minor: 0, SMs: 132, MaxSharedPerBlock: 48 << 10,
		MaxSharedPerBlockOptin: 227 << 10, MaxGrid: [3]int{1<<31 - 1, 65535, 65535}, MaxThreadsPerBlock: 1024}
	want := core.DeviceInfo{Platform: core.PlatformCUDA, Name: "NVIDIA H200", ComputeCapability: 90, SMs: 132,
		MaxThreadsPerBlock: 1024, MaxSharedPerBlock: 227 << 10, MaxGrid: [3]int{1<<31 - 1, 65535, 65535}}
	if got := DeviceInfo(i); got != want {
		t.Errorf("DeviceInfo:\n got %+v\nwant %+v", got, want)
	}
	i.Major, i.Minor, i.MaxSharedPerBlockOptin = 8, 6, 0
	if got := DeviceInfo(i); got.ComputeCapability != 86 || got.MaxSharedPerBlock != 48<<10 {
		t.Errorf("without an opt-in figure: got compute %d, shared %d; want 86, %d", got.ComputeCapability, got.MaxSharedPerBlock, 48<<10)
	}
	d := newFakeDevice()
	if got := newExecutor(d).Device(); got != DeviceInfo(d.info) {
		t.Errorf("Executor.Device = %+v, want %+v", got, DeviceInfo(d.info))
	}
}

// TestLoad: a module is checked, loaded once and unloaded by Close; a
// bad one is refused with nothing left loaded.
func TestLoad(t *testing.T) {
	t.Run("once", func(t *testing.T) {
		d := newFakeDevice()
		e := newExecutor(d)
		m := testModule("m")
		for range 2 {
			if err := e.Load([]core.KernelModule{m}); err != nil {
				t.Fatal(err)
			}
		}
		if d.calls["load"] != 1 || len(e.Modules()) != 1 || e.Modules()[0].SHA256 != m.SHA256 {
			t.Errorf("loaded %d times, modules %d; want once, one", d.calls["load"], len(e.Modules()))
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if len(d.modules) != 0 || len(e.Modules()) != 0 {
			t.Errorf("after Close: %d modules loaded on the device, %d listed", len(d.modules), len(e.Modules()))
		}
		d.check(t, true)
	})
	bad := map[string]func(m *core.KernelModule, d *fakeDevice) string{
		"hash": func(m *core.KernelModule, _ *fakeDevice) string {
			m.SHA256 = strings.Repeat("0", 64)
			return "image hash"
		},
		"format": func(m *core.KernelModule, _ *fakeDevice) string {
			m.Format = "hsaco"
			return "this host loads CUDA ptx or cubin"
		},
		"platform": func(m *core.KernelModule, _ *fakeDevice) string {
			m.Platform = core.PlatformHIP
			return "this host loads CUDA ptx or cubin"
		},
		"missing_entry": func(_ *core.KernelModule, d *fakeDevice) string {
			d.missing["tma"] = true
			return "named symbol not found"
		},
		"load_fails": func(_ *core.KernelModule, d *fakeDevice) string {
			d.failAt["load"] = 1
			return "out of memory"
		},
	}
	for name, spoil := range bad {
		t.Run(name, func(t *testing.T) {
			d := newFakeDevice()
			e := newExecutor(d)
			m := testModule("m")
			want := spoil(&m, d)
			if err := e.Load([]core.KernelModule{m}); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want an error saying %q", err, want)
			}
			if len(d.modules) != 0 || len(e.Modules()) != 0 {
				t.Errorf("%d modules left loaded on the device, %d listed", len(d.modules), len(e.Modules()))
			}
			d.check(t, true)
		})
	}
}

// otherImage is module m with an image of another hash (one byte more).
func otherImage(m core.KernelModule) core.KernelModule {
	m.Image = append(slices.Clip(m.Image), '\n')
	m.SHA256 = core.ImageSHA256(m.Image)
	return m
}

// TestReplacedImage: a plugin swapped under a backend, as a Host sees it:
// the new image of a module is loaded beside the old one and the backend's
// hold of the old one given back (Drop). A plan prepared before keeps
// launching the old image, loaded until that plan closes; new plans run
// the new one. A plan checked against an image that is not loaded is
// refused by PrepareChecked (ErrOtherImages) and by UpdateChecked, and
// Holds says which images are loaded.
func TestReplacedImage(t *testing.T) {
	d := newFakeDevice()
	e := newExecutor(d)
	v1 := testModule("m")
	v2, v3 := otherImage(v1), otherImage(otherImage(v1))
	if err := e.Load([]core.KernelModule{v1}); err != nil {
		t.Fatal(err)
	}
	req := testRequest(e.Device())
	stamped := func(m core.KernelModule) *core.Plan {
		p := testPlan(t, req, []int32{1, 2})
		p.ModuleSHA256 = map[string]string{"m": m.SHA256}
		return p
	}
	old, err := e.PrepareChecked(req, stamped(v1))
	if err != nil {
		t.Fatal(err)
	}
	oldFn := old.steps[0].fn
	if err := e.Load([]core.KernelModule{v2}); err != nil {
		t.Fatalf("another image under a loaded name: %v", err)
	}
	e.Drop([]core.KernelModule{v1})
	if mods := e.Modules(); len(mods) != 1 || mods[0].SHA256 != v2.SHA256 {
		t.Errorf("Modules lists %v, want the new image alone", mods)
	}
	if len(d.modules) != 2 || !e.Holds(map[string]string{"m": v1.SHA256}) {
		t.Errorf("%d modules on the device, want 2: the old image stays while a plan launches it", len(d.modules))
	}
	if !e.Holds(map[string]string{"m": v2.SHA256}) || e.Holds(map[string]string{"m": v3.SHA256}) || e.Holds(map[string]string{"n": v2.SHA256}) {
		t.Errorf("Holds does not tell the loaded images from one that is not and a name not loaded")
	}
	if _, err := e.PrepareChecked(req, stamped(v3)); !errors.Is(err, ErrOtherImages) || !strings.Contains(err.Error(), "the plugin serving it changed") {
		t.Errorf("a plan checked against an image not loaded: %v", err)
	}
	cur, err := e.PrepareChecked(req, stamped(v2))
	if err != nil {
		t.Fatal(err)
	}
	if cur.steps[0].fn == oldFn || old.steps[0].fn != oldFn {
		t.Errorf("the new plan runs the old image's entry, or the old plan lost it")
	}
	if err := old.UpdateChecked(0, req, stamped(v2)); err == nil || !strings.Contains(err.Error(), "the prepared plan runs "+v1.SHA256) {
		t.Errorf("an update checked against the new image, of a plan running the old: %v", err)
	}
	if err := old.UpdateChecked(0, req, stamped(v1)); err != nil {
		t.Errorf("an update of the same image: %v", err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if len(d.modules) != 1 || e.Holds(map[string]string{"m": v1.SHA256}) {
		t.Errorf("%d modules on the device after the last plan on the old image closed, want 1", len(d.modules))
	}
	if err := cur.Close(); err != nil {
		t.Fatal(err)
	}
	if len(d.modules) != 1 {
		t.Errorf("the image a Load holds was unloaded with its last plan")
	}
	e.Drop([]core.KernelModule{v2})
	if len(d.modules) != 0 || len(e.Modules()) != 0 {
		t.Errorf("%d modules on the device, %d listed, after the last hold was given back", len(d.modules), len(e.Modules()))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	d.check(t, true)
}

// TestImagesOfOneNameSideBySide: two backends served by plugins of other
// builds hold their own images of one module name; each plan runs the
// image it names, an image is loaded once however many hold it, and the
// last image loaded or held is the one Prepare checks against, the other
// taking its place when it is given back. A Load that fails gives back
// what it held.
func TestImagesOfOneNameSideBySide(t *testing.T) {
	d := newFakeDevice()
	e := newExecutor(d)
	v1 := testModule("m")
	v2 := otherImage(v1)
	for _, m := range []core.KernelModule{v1, v2, v1} {
		if err := e.Load([]core.KernelModule{m}); err != nil {
			t.Fatal(err)
		}
	}
	if d.calls["load"] != 2 || len(d.modules) != 2 {
		t.Errorf("%d loads, %d modules on the device; want each image loaded once", d.calls["load"], len(d.modules))
	}
	if mods := e.Modules(); len(mods) != 1 || mods[0].SHA256 != v1.SHA256 {
		t.Errorf("Modules lists %v, want the image held last", mods)
	}
	req := testRequest(e.Device())
	fns := map[string]cuda.Function{}
	for _, m := range []core.KernelModule{v1, v2} {
		p := testPlan(t, req, []int32{1})
		p.ModuleSHA256 = map[string]string{"m": m.SHA256}
		pr, err := e.PrepareChecked(req, p)
		if err != nil {
			t.Fatal(err)
		}
		fns[m.SHA256] = pr.steps[0].fn
		if err := pr.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if fns[v1.SHA256] == fns[v2.SHA256] {
		t.Errorf("the plans of both images run one entry")
	}
	e.Drop([]core.KernelModule{v1, v1})
	if mods := e.Modules(); len(d.modules) != 1 || len(mods) != 1 || mods[0].SHA256 != v2.SHA256 {
		t.Errorf("after v1's holds were given back: %d modules on the device, Modules %v; want v2 alone", len(d.modules), mods)
	}
	bad := testModule("n")
	bad.SHA256 = strings.Repeat("0", 64)
	if err := e.Load([]core.KernelModule{v1, bad}); err == nil {
		t.Fatal("a Load of a module with a wrong hash succeeded")
	}
	if len(d.modules) != 1 || e.Holds(map[string]string{"m": v1.SHA256}) {
		t.Errorf("a failed Load kept what it loaded: %d modules on the device", len(d.modules))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if len(d.modules) != 0 {
		t.Errorf("%d modules left after Close", len(d.modules))
	}
	d.check(t, true)
}

// TestLoadRefusesAnOldDriver: a module whose image needs a newer driver
// than the device's (PTX ISA 9.0 on a CUDA 12.4 driver) is refused before
// it is loaded, the error naming the module, its PTX ISA, the CUDA release
// and driver it needs and the driver found; the same image loads on a
// CUDA 13.0 driver. When the driver refuses an image anyway
// (cuda.ErrUnsupportedPTX: an unknown driver version, say), the error
// says the same.
func TestLoadRefusesAnOldDriver(t *testing.T) {
	m := testModule("m")
	m.Image = []byte(strings.Replace(string(m.Image), ".version 8.0", ".version 9.0", 1))
	m.SHA256 = core.ImageSHA256(m.Image)
	needs := "PTX ISA 9.0 for sm_90, which needs CUDA 13.0, driver 580.65.06 or newer"

	d := newFakeDevice()
	d.info.DriverVersion = 12040
	err := newExecutor(d).Load([]core.KernelModule{m})
	for _, want := range []string{"kernel module m (ptx for compute_90)", needs, "this driver is CUDA 12.4 (cuDriverGetVersion 12040)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("PTX ISA 9.0 on CUDA 12.4: %v, want it to say %q", err, want)
		}
	}
	if d.calls["load"] != 0 || len(d.modules) != 0 {
		t.Errorf("the module was loaded %d times, want none", d.calls["load"])
	}

	d = newFakeDevice()
	d.info.DriverVersion = 13000
	if err := newExecutor(d).Load([]core.KernelModule{m}); err != nil || d.calls["load"] != 1 {
		t.Errorf("PTX ISA 9.0 on CUDA 13.0: %v, loaded %d times", err, d.calls["load"])
	}

	d = newFakeDevice() // no driver version: the driver decides, and refuses
	refusal := &cuda.Error{Call: "cuModuleLoadData", Code: 222, Name: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"}
	d.loadErr = fmt.Errorf("%w (this driver is CUDA 12.4, cuDriverGetVersion 12040): %w", cuda.ErrUnsupportedPTX, refusal)
	err = newExecutor(d).Load([]core.KernelModule{m})
	if !errors.Is(err, cuda.ErrUnsupportedPTX) || !strings.Contains(err.Error(), "loading module m (ptx for compute_90), "+needs) ||
		!strings.Contains(err.Error(), "this driver is CUDA 12.4") || !strings.Contains(err.Error(), "CUDA_ERROR_UNSUPPORTED_PTX_VERSION") {
		t.Errorf("the driver refuses PTX ISA 9.0: %v", err)
	}
	d.check(t, true)
}

// TestPrepare: a checked plan's metadata is uploaded, its workspace
// allocated, its entry granted its shared memory once, and its arguments
// written where the kernel reads them; Close frees it all, once.
func TestPrepare(t *testing.T) {
	e, d := loadedExecutor(t)
	req := testRequest(e.Device())
	plan := testPlan(t, req, []int32{7, 8, 9})
	var prs []*Prepared
	for _, prep := range []func(*core.PlanRequest, *core.Plan) (*Prepared, error){e.Prepare, e.PrepareChecked} {
		pr, err := prep(req, plan)
		if err != nil {
			t.Fatal(err)
		}
		prs = append(prs, pr)
		meta := pr.meta["sched"]
		if got := d.bytesAt(meta.Ptr, 12); string(got) != string(int32Bytes([]int32{7, 8, 9})) || meta.Bytes != 12 {
			t.Errorf("metadata on the device: % x (%d bytes)", got, meta.Bytes)
		}
		if ws := pr.Workspace(); ws.Bytes != 1<<20 || ws.Ptr == 0 {
			t.Errorf("workspace %+v", ws)
		}
		if pr.Plan() != plan || len(pr.Tensors()) != len(plan.Tensors) {
			t.Errorf("Plan or Tensors are not the plan's")
		}
		st := pr.steps[0]
		offs, _ := layout(testEntries[0].Params)
		if got := binary.LittleEndian.Uint64(st.args[offs[2]:]); got != meta.Ptr+4 {
			t.Errorf("sched argument %#x, want the metadata's address + 4 = %#x", got, meta.Ptr+4)
		}
		if got := binary.LittleEndian.Uint64(st.args[offs[3]:]); got != pr.ws.Ptr+512 {
			t.Errorf("ws argument %#x, want the workspace's address + 512 = %#x", got, pr.ws.Ptr+512)
		}
		if got := int32(binary.LittleEndian.Uint32(st.args[offs[4]:])); got != -3 {
			t.Errorf("n argument %d, want -3", got)
		}
		if got := binary.LittleEndian.Uint64(st.args[offs[5]:]); got != 1<<40 {
			t.Errorf("total argument %d, want %d", got, int64(1<<40))
		}
		if got := math.Float32frombits(binary.LittleEndian.Uint32(st.args[offs[6]:])); got != 0.5 {
			t.Errorf("scale argument %v, want 0.5", got)
		}
		if len(st.tensors) != 2 || st.tensors[0] != (tensorArg{off: offs[0], tensor: 0}) {
			t.Errorf("tensor slots %+v, want q's at %d and out's", st.tensors, offs[0])
		}
		for i, p := range st.ptrs {
			if p != unsafe.Pointer(&st.args[offs[i]]) {
				t.Errorf("kernel parameter %d does not point at its slot", i)
			}
		}
	}
	if d.calls["set_shared"] != 1 || d.shared["decode"] != 64<<10 {
		t.Errorf("shared memory granted %d times (%v), want once, 64 KB", d.calls["set_shared"], d.shared)
	}
	for _, pr := range prs {
		for range 2 {
			if err := pr.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.check(t, true)
}

// TestPrepareFailuresFreeEverything: whatever fails once the plan's
// buffers are allocated (an upload, a launch whose arguments cannot be
// bound) leaves no device memory allocated. Binding used to return
// without freeing the metadata and workspace it had uploaded.
func TestPrepareFailuresFreeEverything(t *testing.T) {
	tests := []struct {
		name    string
		checked bool // PrepareChecked: the plan is not checked again here
		spoil   func(p *core.Plan, d *fakeDevice)
		want    string
	}{
		{"entry_without_parameters", false, func(p *core.Plan, _ *fakeDevice) {
			p.Launches = append(p.Launches, core.Launch{Module: "m", Entry: "none", Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}})
		}, "entry none has no parameters"},
		{"unknown_argument_kind", true, func(p *core.Plan, _ *fakeDevice) {
			p.Launches[0].Args[4].Kind = "register"
		}, `unknown argument kind "register"`},
		{"descriptor_over_a_bad_dtype", true, func(p *core.Plan, _ *fakeDevice) {
			p.Launches = append(p.Launches, core.Launch{Module: "m", Entry: "tma", Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1},
				Args: []core.Arg{{Param: "n", Kind: core.ArgInt, Int: 1}, {Param: "q_map", Kind: core.ArgTensorMap, Name: "q"}}})
		}, "a TMA descriptor over q"},
		{"duplicate_metadata", true, func(p *core.Plan, _ *fakeDevice) {
			p.Metadata = append(p.Metadata, core.MetaBuffer{Name: "sched", Int32s: []int32{1}})
		}, `metadata buffer "sched" declared twice`},
		{"second_allocation_fails", false, func(_ *core.Plan, d *fakeDevice) { d.failAt["alloc"] = 2 }, "out of memory"},
		{"metadata_copy_fails", false, func(_ *core.Plan, d *fakeDevice) { d.failAt["copy"] = 1 }, "out of memory"},
		{"shared_memory_refused", false, func(_ *core.Plan, d *fakeDevice) { d.failAt["set_shared"] = 1 }, "out of memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, d := loadedExecutor(t)
			req := testRequest(e.Device())
			plan := testPlan(t, req, []int32{1, 2, 3, 4})
			tt.spoil(plan, d)
			prep := e.Prepare
			if tt.checked {
				prep = e.PrepareChecked
			}
			pr, err := prep(req, plan)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, %v; want an error saying %q", pr, err, tt.want)
			}
			if d.calls["alloc"] == 0 {
				t.Fatal("nothing was allocated: the failure is not one after an allocation")
			}
			d.check(t, true)
			if n := d.liveBytes(); n != 0 {
				t.Errorf("%d bytes of device memory left allocated", n)
			}
		})
	}
}

// TestPrepareRefusals: a plan Prepare's check refuses, or one that names
// a module or entry not loaded, allocates nothing.
func TestPrepareRefusals(t *testing.T) {
	e, d := loadedExecutor(t)
	req := testRequest(e.Device())
	plan := testPlan(t, req, []int32{1, 2, 3, 4})
	plan.Launches[0].Grid[0] = 0
	var pe *launch.PlanError
	if _, err := e.Prepare(req, plan); !errors.As(err, &pe) || !strings.Contains(err.Error(), "zero dimension") {
		t.Errorf("Prepare of a plan with a zero grid: %v, want a *launch.PlanError", err)
	}
	for _, tt := range []struct{ module, entry, want string }{
		{"other", "decode", "module other is not loaded"},
		{"m", "absent", "module m has no entry absent loaded"},
	} {
		p := testPlan(t, req, []int32{1, 2, 3, 4})
		p.Launches[0].Module, p.Launches[0].Entry = tt.module, tt.entry
		if _, err := e.PrepareChecked(req, p); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("PrepareChecked naming %s.%s: %v, want %q", tt.module, tt.entry, err, tt.want)
		}
	}
	// A plan its source checked against another image of module m (the
	// plugin was swapped after this host loaded m).
	swapped := testPlan(t, req, []int32{1, 2, 3, 4})
	swapped.ModuleSHA256 = map[string]string{"m": strings.Repeat("0", 64)}
	if _, err := e.PrepareChecked(req, swapped); err == nil || !strings.Contains(err.Error(), "the plugin serving it changed since its modules were loaded") {
		t.Errorf("PrepareChecked of a plan checked against another image: %v", err)
	}
	for _, prep := range []func(*core.PlanRequest, *core.Plan) (*Prepared, error){e.Prepare, e.PrepareChecked} {
		if _, err := prep(req, nil); err == nil {
			t.Error("a nil plan was prepared")
		}
		if _, err := prep(nil, plan); err == nil {
			t.Error("a plan without its request was prepared")
		}
	}
	if d.calls["alloc"] != 0 {
		t.Errorf("%d allocations for plans that were refused", d.calls["alloc"])
	}
	d.check(t, true)
}

// TestPrepareCheckedRefusesArgumentsTheLoadedEntryCannotHold: a plan
// checked against other modules of the same names (a plugin swapped
// after this host loaded its modules) binds a TMA descriptor to a
// pointer parameter, an address to a 4-byte one, a struct field past its
// struct: each is an error naming the parameter, nothing written past a
// slot, nothing left allocated.
func TestPrepareCheckedRefusesArgumentsTheLoadedEntryCannotHold(t *testing.T) {
	e, d := loadedExecutor(t)
	req := testRequest(e.Device())
	m := &core.TensorMap{Box: []uint32{64, 64}}
	for want, spoil := range map[string]func(p *core.Plan){
		`parameter "q": a tensormap argument does not fit the loaded entry's 8-byte parameter`: func(p *core.Plan) {
			p.Launches[0].Args[0] = core.Arg{Param: "q", Kind: core.ArgTensorMap, Name: "q", Map: m}
		},
		`parameter "n": a workspace argument does not fit the loaded entry's 4-byte parameter`: func(p *core.Plan) {
			p.Launches[0].Args[4] = core.Arg{Param: "n", Kind: core.ArgWorkspace}
		},
	} {
		p := testPlan(t, req, []int32{1, 2, 3, 4})
		spoil(p)
		if pr, err := e.PrepareChecked(req, p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error naming %q", err, want)
			if pr != nil {
				pr.Close()
			}
		}
	}
	d.check(t, true)
}

// TestUpdate: Update checks the new plan as Prepare does; UpdateChecked
// takes a plan its source checked as it is. Both refuse a plan that does
// not fit what was prepared, and copy the new metadata on the stream given.
func TestUpdate(t *testing.T) {
	e, d := loadedExecutor(t)
	req := testRequest(e.Device())
	pr, err := e.Prepare(req, testPlan(t, req, []int32{1, 2, 3, 4}))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	meta := pr.meta["sched"]
	const stream = cuda.Stream(0x5eed)

	next := testRequest(e.Device())
	next.Shape.SeqLens = []int64{101, 201}
	np := testPlan(t, next, []int32{5, 6, 7, 8})
	if err := pr.Update(stream, next, np); err != nil {
		t.Fatal(err)
	}
	if got := d.bytesAt(meta.Ptr, 16); string(got) != string(int32Bytes([]int32{5, 6, 7, 8})) {
		t.Errorf("metadata after Update: % x", got)
	}
	if pr.Plan() != np || len(d.streams) != 1 || d.streams[0] != stream {
		t.Errorf("after Update: plan replaced %t, copies on streams %v, want one on %#x", pr.Plan() == np, d.streams, stream)
	}

	// A plan launch.Check refuses (it claims to read no query lengths,
	// though its tensors have a row per query token) but that fits what
	// was prepared: Update refuses it, UpdateChecked, trusting its
	// source's check, takes it.
	unchecked := testPlan(t, next, []int32{9, 10, 11, 12})
	unchecked.Reads = core.PlanReadsDeclared
	var pe *launch.PlanError
	if err := pr.Update(stream, next, unchecked); !errors.As(err, &pe) {
		t.Fatalf("Update of a plan that reads no query lengths: %v, want a *launch.PlanError", err)
	}
	if got := d.bytesAt(meta.Ptr, 16); string(got) != string(int32Bytes([]int32{5, 6, 7, 8})) {
		t.Errorf("a refused Update copied its metadata: % x", got)
	}
	if err := pr.UpdateChecked(stream, next, unchecked); err != nil {
		t.Fatalf("UpdateChecked: %v", err)
	}
	if got := d.bytesAt(meta.Ptr, 16); string(got) != string(int32Bytes([]int32{9, 10, 11, 12})) || pr.Plan() != unchecked {
		t.Errorf("metadata after UpdateChecked: % x", got)
	}

	misfits := map[string]func(p *core.Plan){
		"more_metadata":  func(p *core.Plan) { p.Metadata[0].Int32s = append(p.Metadata[0].Int32s, 0) },
		"other_metadata": func(p *core.Plan) { p.Metadata[0].Name = "other" },
		"more_workspace": func(p *core.Plan) { p.WorkspaceBytes *= 2 },
		"other_grid":     func(p *core.Plan) { p.Launches[0].Grid[0]++ },
		"other_argument": func(p *core.Plan) { p.Launches[0].Args[4].Int++ },
		"more_launches":  func(p *core.Plan) { p.Launches = append(p.Launches, p.Launches[0]) },
		"other_tensors": func(p *core.Plan) {
			p.Tensors[0].Shape = append([]int64{p.Tensors[0].Shape[0] + 1}, p.Tensors[0].Shape[1:]...)
		},
	}
	copies := d.calls["copy_async"]
	for name, spoil := range misfits {
		p := testPlan(t, next, []int32{1, 1, 1, 1})
		spoil(p)
		if err := pr.UpdateChecked(stream, next, p); err == nil {
			t.Errorf("%s: UpdateChecked took a plan that does not fit the prepared one", name)
		}
	}
	if err := pr.UpdateChecked(stream, next, nil); err == nil {
		t.Error("UpdateChecked took a nil plan")
	}
	if err := pr.Update(stream, nil, np); err == nil {
		t.Error("Update took a plan without its request")
	}
	if d.calls["copy_async"] != copies {
		t.Errorf("refused updates copied %d times", d.calls["copy_async"]-copies)
	}
	d.check(t, false)
}

// TestLaunchRefusesTensors: the tensors bound to a launch are counted and
// measured before anything is queued.
func TestLaunchRefusesTensors(t *testing.T) {
	e, d := loadedExecutor(t)
	req := testRequest(e.Device())
	pr, err := e.Prepare(req, testPlan(t, req, []int32{1, 2, 3, 4}))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	bufs := make([]Buffer, len(pr.Tensors()))
	for i, s := range pr.Tensors() {
		bufs[i] = Buffer{Ptr: 0x1000 * uint64(i+1), Bytes: s.Bytes()}
	}
	if err := pr.Launch(nil, 0, bufs[1:]); err == nil || !strings.Contains(err.Error(), "tensors bound, the plan has") {
		t.Errorf("one tensor short: %v", err)
	}
	bufs[0].Bytes--
	if err := pr.LaunchLayer(nil, 0, bufs); err == nil || !strings.Contains(err.Error(), "tensor q: ") {
		t.Errorf("q a byte short: %v", err)
	}
	bufs[0].Bytes++
	bufs[1].Ptr = 0
	if err := pr.LaunchBatch(nil, 0, bufs); err == nil || !strings.Contains(err.Error(), "tensor kv_cache: ") {
		t.Errorf("kv_cache at address 0: %v", err)
	}
	d.check(t, false)
}

// TestPreparedClosedAfterTheExecutor: a Prepared closed after its Executor
// (which unloaded every image) frees its buffers and unloads nothing a
// second time.
func TestPreparedClosedAfterTheExecutor(t *testing.T) {
	e, d := loadedExecutor(t)
	req := testRequest(e.Device())
	pr, err := e.Prepare(req, testPlan(t, req, []int32{1}))
	if err != nil {
		t.Fatal(err)
	}
	e.Drop([]core.KernelModule{testModule("m")})
	if len(d.modules) != 1 {
		t.Fatalf("%d modules on the device, want the one the open plan runs", len(d.modules))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pr.Close(); err != nil {
		t.Fatal(err)
	}
	if len(d.modules) != 0 || d.calls["unload"] != 1 {
		t.Errorf("%d modules left, %d unloads; want none left, one unload", len(d.modules), d.calls["unload"])
	}
	d.check(t, true)
}

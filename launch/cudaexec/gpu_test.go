package cudaexec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/internal/ptxstub"
	"github.com/attnplug/attnplug/launch"
)

// The tests on a GPU: they load ptxstub's PTX (entries that only return)
// into a real device, prepare, launch, update and close plans of it, and
// count the device memory with the driver. Without a CUDA GPU they skip,
// saying why; ATTNPLUG_REQUIRE_GPU=1 (make test-gpu) makes that a failure.

// openGPU opens CUDA device 0 for one test, or skips it.
func openGPU(t *testing.T) *cuda.Device {
	t.Helper()
	dev, err := cuda.Open()
	if errors.Is(err, cuda.ErrUnavailable) {
		if os.Getenv("ATTNPLUG_REQUIRE_GPU") == "1" {
			t.Fatalf("ATTNPLUG_REQUIRE_GPU=1 and no CUDA device to run on: %v", err)
		}
		t.Skipf("no CUDA GPU here (cuda.Open: %v); these tests run on a machine with libcuda.so.1 and a device (make test-gpu)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
	})
	return dev
}

// gpuModule is the test module for dev's architecture, with the entries
// that take no TMA descriptor ("decode", the parameterless "none", and
// "rest").
func gpuModule(dev *cuda.Device) core.KernelModule {
	i := dev.Info()
	arch := fmt.Sprintf("compute_%d%d", i.Major, i.Minor)
	entries := slices.DeleteFunc(slices.Clone(testEntries), func(e core.Entry) bool { return e.Name == "tma" })
	img := ptxstub.Image(arch, "", entries)
	return core.KernelModule{Name: "m", Platform: core.PlatformCUDA, Arch: arch, Format: core.FormatPTX,
		Image: img, SHA256: core.ImageSHA256(img), Entries: entries}
}

// countingDevice is a real device whose allocations and frees are kept
// track of, as the driver sees them.
type countingDevice struct {
	device
	mu   sync.Mutex
	live map[uint64]int64
}

func (d *countingDevice) Do(f func(deviceCtx) error) error {
	return d.device.Do(func(c deviceCtx) error { return f(countingCtx{c, d}) })
}

func (d *countingDevice) liveBytes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for _, b := range d.live {
		n += b
	}
	return n
}

type countingCtx struct {
	deviceCtx
	d *countingDevice
}

func (c countingCtx) Alloc(n int64) (uint64, error) {
	p, err := c.deviceCtx.Alloc(n)
	if err == nil {
		c.d.mu.Lock()
		c.d.live[p] = n
		c.d.mu.Unlock()
	}
	return p, err
}

func (c countingCtx) Free(p uint64) error {
	c.d.mu.Lock()
	delete(c.d.live, p)
	c.d.mu.Unlock()
	return c.deviceCtx.Free(p)
}

// freeMemory is the device memory free, as the driver counts it.
func freeMemory(t *testing.T, dev *cuda.Device) int64 {
	t.Helper()
	var free int64
	if err := dev.Do(func(c *cuda.Ctx) (err error) { free, _, err = c.MemInfo(); return err }); err != nil {
		t.Fatal(err)
	}
	return free
}

// TestGPUFailedPrepareFreesMemory: a plan whose launch cannot be bound (an
// entry without parameters) fails to prepare after its metadata and its
// 256 MiB workspace were allocated; eight such failures leave the device's
// free memory where it was. Binding used to return without freeing them:
// 2 GiB gone.
func TestGPUFailedPrepareFreesMemory(t *testing.T) {
	dev := openGPU(t)
	cd := &countingDevice{device: cudaDevice{dev}, live: map[uint64]int64{}}
	e := newExecutor(cd)
	defer e.Close()
	if err := e.Load([]core.KernelModule{gpuModule(dev)}); err != nil {
		t.Fatal(err)
	}
	req := testRequest(e.Device())
	plan := testPlan(t, req, []int32{1, 2, 3, 4})
	plan.WorkspaceBytes = 256 << 20
	plan.Launches[0].SharedBytes = 0
	plan.Launches = append(plan.Launches, core.Launch{Module: "m", Entry: "none", Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}})
	const tries = 8
	before := freeMemory(t, dev)
	for range tries {
		if pr, err := e.Prepare(req, plan); err == nil {
			pr.Close()
			t.Fatal("a launch of an entry without parameters was prepared")
		}
	}
	after := freeMemory(t, dev)
	t.Logf("free device memory: %d MiB before %d failed prepares of a 256 MiB workspace, %d MiB after", before>>20, tries, after>>20)
	if n := cd.liveBytes(); n != 0 {
		t.Errorf("%d bytes allocated and not freed", n)
	}
	// The driver's count moves by whole pages and by what other work on
	// the device does: a slack of 64 MiB, against 2 GiB were they kept.
	if before-after > 64<<20 {
		t.Errorf("free device memory fell by %d MiB", (before-after)>>20)
	}
}

// TestGPUPrepareLaunchUpdate: a plan of the stub module is prepared on the
// device and launched; Update copies a checked plan's metadata on the
// stream and refuses one launch.Check refuses; UpdateChecked, which does
// not check the plan again, still refuses one of other tensors (a tensor
// missing) and takes the checked one; Close gives every byte back.
func TestGPUPrepareLaunchUpdate(t *testing.T) {
	dev := openGPU(t)
	cd := &countingDevice{device: cudaDevice{dev}, live: map[uint64]int64{}}
	e := newExecutor(cd)
	defer e.Close()
	if err := e.Load([]core.KernelModule{gpuModule(dev)}); err != nil {
		t.Fatal(err)
	}
	req := testRequest(e.Device())
	pr, err := e.Prepare(req, testPlan(t, req, []int32{1, 2, 3, 4}))
	if err != nil {
		t.Fatal(err)
	}
	stream, bufs := gpuBuffers(t, dev, pr)
	launchOnce := func() {
		t.Helper()
		err := dev.Do(func(c *cuda.Ctx) error {
			if err := pr.Launch(c, stream, bufs); err != nil {
				return err
			}
			return c.SyncStream(stream)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	launchOnce()
	meta := func() []int32 { return gpuMeta(t, dev, pr, stream) }
	if got := meta(); !slices.Equal(got, []int32{1, 2, 3, 4}) {
		t.Fatalf("metadata on the device %v, want [1 2 3 4]", got)
	}

	next := testRequest(e.Device())
	next.Shape.SeqLens = []int64{101, 201}
	if err := pr.Update(stream, next, testPlan(t, next, []int32{5, 6, 7, 8})); err != nil {
		t.Fatal(err)
	}
	if got := meta(); !slices.Equal(got, []int32{5, 6, 7, 8}) {
		t.Errorf("metadata after Update %v, want [5 6 7 8]", got)
	}
	unchecked := testPlan(t, next, []int32{9, 10, 11, 12})
	unchecked.Tensors = unchecked.Tensors[1:]
	var pe *launch.PlanError
	if err := pr.Update(stream, next, unchecked); !errors.As(err, &pe) {
		t.Fatalf("Update of a plan with a tensor missing: %v, want a *launch.PlanError", err)
	}
	if got := meta(); !slices.Equal(got, []int32{5, 6, 7, 8}) {
		t.Errorf("a refused Update changed the metadata: %v", got)
	}
	if err := pr.UpdateChecked(stream, next, unchecked); err == nil || !strings.Contains(err.Error(), "tensors differ") {
		t.Fatalf("UpdateChecked of a plan with a tensor missing: %v, want a refusal", err)
	}
	if got := meta(); !slices.Equal(got, []int32{5, 6, 7, 8}) {
		t.Errorf("a refused UpdateChecked changed the metadata: %v", got)
	}
	if err := pr.UpdateChecked(stream, next, testPlan(t, next, []int32{9, 10, 11, 12})); err != nil {
		t.Fatal(err)
	}
	if got := meta(); !slices.Equal(got, []int32{9, 10, 11, 12}) {
		t.Errorf("metadata after UpdateChecked %v, want [9 10 11 12]", got)
	}
	launchOnce()
	if err := pr.Close(); err != nil {
		t.Fatal(err)
	}
	if n := cd.liveBytes(); n != 0 {
		t.Errorf("%d bytes of the plan left allocated after Close", n)
	}
}

// gpuBuffers makes a stream and a device buffer for each tensor of pr,
// given back when the test ends.
func gpuBuffers(t *testing.T, dev *cuda.Device, pr *Prepared) (cuda.Stream, []Buffer) {
	t.Helper()
	var stream cuda.Stream
	bufs := make([]Buffer, len(pr.Tensors()))
	t.Cleanup(func() {
		dev.Do(func(c *cuda.Ctx) error {
			for _, b := range bufs {
				c.Free(b.Ptr)
			}
			if stream != 0 {
				c.DestroyStream(stream)
			}
			return nil
		})
	})
	err := dev.Do(func(c *cuda.Ctx) error {
		s, err := c.NewStream()
		if err != nil {
			return err
		}
		stream = s
		for i, s := range pr.Tensors() {
			p, err := c.Alloc(s.Bytes())
			if err != nil {
				return err
			}
			bufs[i] = Buffer{Ptr: p, Bytes: s.Bytes()}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return stream, bufs
}

// gpuMeta reads back pr's four-value "sched" metadata buffer once stream's
// work is done.
func gpuMeta(t *testing.T, dev *cuda.Device, pr *Prepared, stream cuda.Stream) []int32 {
	t.Helper()
	b := make([]byte, 16)
	err := dev.Do(func(c *cuda.Ctx) error {
		if err := c.SyncStream(stream); err != nil {
			return err
		}
		return c.CopyOut(b, pr.meta["sched"].Ptr)
	})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int32, 4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// TestGPUDriverFloor: on the device's own driver, a module of a PTX ISA
// the driver reads (ptxstub's 8.0) loads, and one of an ISA newer than
// any driver reads is refused by the driver, the error naming the module,
// its PTX ISA and the driver found.
func TestGPUDriverFloor(t *testing.T) {
	dev := openGPU(t)
	e := newExecutor(cudaDevice{dev})
	defer e.Close()
	m := gpuModule(dev)
	if err := e.Load([]core.KernelModule{m}); err != nil {
		t.Fatalf("PTX ISA 8.0 on CUDA %s: %v", launch.DriverRelease(dev.Info().DriverVersion), err)
	}
	newer := m
	newer.Name = "newer"
	newer.Image = []byte(strings.Replace(string(m.Image), ".version 8.0", ".version 99.0", 1))
	newer.SHA256 = core.ImageSHA256(newer.Image)
	err := e.Load([]core.KernelModule{newer})
	if !errors.Is(err, cuda.ErrUnsupportedPTX) || !strings.Contains(err.Error(), "loading module newer (ptx for ") ||
		!strings.Contains(err.Error(), "PTX ISA 99.0") || !strings.Contains(err.Error(), "this driver is CUDA "+launch.DriverRelease(dev.Info().DriverVersion)) {
		t.Errorf("PTX ISA 99.0: %v, want the driver's refusal naming the module, its ISA and the driver", err)
	}
}

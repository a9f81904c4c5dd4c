package cuda_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/attnplug/attnplug/cuda"
)

var (
	devOnce sync.Once
	dev     *cuda.Device
	devErr  error
)

// device returns the shared test Device, skipping the test when there is no GPU.
func device(tb testing.TB) *cuda.Device {
	tb.Helper()
	devOnce.Do(func() { dev, devErr = cuda.Open() })
	if errors.Is(devErr, cuda.ErrUnavailable) {
		tb.Skipf("no CUDA GPU here (cuda.Open: %v); the GPU tests run on a machine with libcuda.so.1 and a device", devErr)
	}
	if devErr != nil {
		tb.Fatalf("cuda.Open: %v", devErr)
	}
	return dev
}

func TestMain(m *testing.M) {
	code := m.Run()
	if dev != nil {
		if err := dev.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "Close:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func TestOpen(t *testing.T) {
	d := device(t)
	info := d.Info()
	t.Logf("device %d: %s, compute %d.%d, %d SMs, %d B shared/block, driver %d (%s)",
		info.Ordinal, info.Name, info.Major, info.Minor, info.SMs, info.MaxSharedPerBlock, info.DriverVersion, info.Library)
	if info.Major < 3 || info.SMs < 1 {
		t.Errorf("implausible device info %+v", info)
	}
	t.Logf("NVRTC candidates: %v", cuda.NVRTCCandidates())
}

func TestOpenCloseReopen(t *testing.T) {
	device(t)
	d, err := cuda.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := d.Do(func(*cuda.Ctx) error { return nil }); !errors.Is(err, cuda.ErrClosed) {
		t.Fatalf("Do after Close: %v, want ErrClosed", err)
	}
}

// squareSource is a small kernel to compile and launch.
const squareSource = `extern "C" __global__ void square(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * x[i];
}`

// TestCompilePTX compiles a kernel with NVRTC when one is present (no GPU
// needed), and reports a compile error with its log.
func TestCompilePTX(t *testing.T) {
	path, major, minor, err := cuda.NVRTCVersion()
	if errors.Is(err, cuda.ErrNoNVRTC) {
		t.Skipf("no NVRTC here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	ptx, err := cuda.CompilePTX(squareSource, "square.cu", "--gpu-architecture=compute_80")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ptx, ".entry square(") {
		t.Fatalf("PTX has no entry square")
	}
	t.Logf("NVRTC %d.%d (%s): %d bytes of PTX", major, minor, path, len(ptx))
	_, err = cuda.CompilePTX("this is not CUDA", "bad.cu")
	var ce *cuda.Error
	if !errors.As(err, &ce) || ce.Call != "nvrtcCompileProgram" || ce.Log == "" {
		t.Fatalf("bad source: %v, want an nvrtcCompileProgram *Error with a log", err)
	}
}

// TestLoadModuleNewerPTX: a PTX image of an ISA newer than any driver
// reads is refused by the driver, and the error wraps
// cuda.ErrUnsupportedPTX and names the driver's CUDA release.
func TestLoadModuleNewerPTX(t *testing.T) {
	const ptx = ".version 99.0\n.target sm_80\n.address_size 64\n\n.visible .entry k()\n{\n\tret;\n}\n"
	err := device(t).Do(func(c *cuda.Ctx) error {
		m, err := c.LoadModule([]byte(ptx))
		if err == nil {
			c.UnloadModule(m)
		}
		return err
	})
	if !errors.Is(err, cuda.ErrUnsupportedPTX) || !strings.Contains(err.Error(), "this driver is CUDA ") {
		t.Fatalf("PTX ISA 99.0: %v, want an error wrapping cuda.ErrUnsupportedPTX that names the driver", err)
	}
}

// TestMemInfo: the driver's count of free memory falls by an allocation
// and rises again when it is freed.
func TestMemInfo(t *testing.T) {
	const n = 256 << 20
	err := device(t).Do(func(c *cuda.Ctx) error {
		before, total, err := c.MemInfo()
		if err != nil {
			return err
		}
		if before <= 0 || total < before {
			return fmt.Errorf("MemInfo: %d free of %d", before, total)
		}
		p, err := c.Alloc(n)
		if err != nil {
			return err
		}
		during, _, err := c.MemInfo()
		if err != nil {
			c.Free(p)
			return err
		}
		if err := c.Free(p); err != nil {
			return err
		}
		after, _, err := c.MemInfo()
		if err != nil {
			return err
		}
		t.Logf("free: %d MiB of %d MiB; %d MiB with 256 MiB allocated; %d MiB freed again", before>>20, total>>20, during>>20, after>>20)
		if before-during < n || after-during < n {
			return fmt.Errorf("free memory %d, %d with %d bytes allocated, %d after: the allocation is not counted", before, during, n, after)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

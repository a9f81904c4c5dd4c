package kernels

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
)

// TestPTXIsCurrent builds acme_decode.cu again as go generate does and
// compares the result with the embedded PTX, where the nvcc on PATH is the
// release that built it (the PTX names it); it skips, saying why,
// elsewhere.
func TestPTXIsCurrent(t *testing.T) {
	nvcc, err := exec.LookPath("nvcc")
	if err != nil {
		t.Skip("no nvcc on PATH: the PTX cannot be rebuilt here")
	}
	out, err := exec.Command(nvcc, "--version").Output()
	if err != nil {
		t.Fatalf("nvcc --version: %v", err)
	}
	built := regexp.MustCompile(`(?m)^// (Cuda compilation tools, release [^\n]*)$`).FindSubmatch(decodePTX)
	if built == nil {
		t.Fatal("the embedded PTX does not say which nvcc built it")
	}
	if !bytes.Contains(out, built[1]) {
		t.Skipf("the PTX was built by %q; the nvcc here is another release:\n%s", built[1], out)
	}
	ptx := filepath.Join(t.TempDir(), "acme_decode.ptx")
	cmd := exec.Command(nvcc, "-ptx", "-arch="+Arch, "-o", ptx, "acme_decode.cu")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nvcc: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(ptx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, decodePTX) {
		t.Fatal("acme_decode.compute_80.ptx is stale: run go generate ./kernels and commit it")
	}
}

// TestParamsFollowTheSource compares the parameters Modules declares with
// acme_decode's signature in acme_decode.cu, by name and in order: the
// image's signature shows only their sizes (launch.CheckEntries), so two
// pointers swapped would pass it.
func TestParamsFollowTheSource(t *testing.T) {
	src, err := os.ReadFile("acme_decode.cu")
	if err != nil {
		t.Fatal(err)
	}
	sig := regexp.MustCompile(`(?s)extern "C" __global__ void __launch_bounds__\(THREADS\) acme_decode\((.*?)\)\s*\{`).FindSubmatch(src)
	if sig == nil {
		t.Fatal("acme_decode's signature is not in acme_decode.cu")
	}
	var names []string
	for _, p := range strings.Split(string(sig[1]), ",") {
		f := strings.Fields(strings.TrimSpace(p))
		names = append(names, strings.TrimLeft(f[len(f)-1], "*"))
	}
	var declared []string
	for _, p := range params() {
		declared = append(declared, p.Name)
	}
	if !slices.Equal(names, declared) {
		t.Errorf("acme_decode.cu's parameters are %v; Modules declares %v", names, declared)
	}
}

// TestModules checks the module the host gets: its hash, its entries
// against the PTX image (launch.CheckEntries, which the host runs), the
// devices it runs on, and the driver it needs.
func TestModules(t *testing.T) {
	k := core.Kernel{Name: "acme_mla_decode"}
	for _, cc := range []int{80, 86, 90, 100, 120} {
		mods, err := Modules(core.DeviceInfo{Platform: core.PlatformCUDA, ComputeCapability: cc}, k)
		if err != nil {
			t.Fatalf("compute capability %d: %v", cc, err)
		}
		if len(mods) != 1 {
			t.Fatalf("compute capability %d: %d modules, want 1", cc, len(mods))
		}
		m := mods[0]
		if m.SHA256 != core.ImageSHA256(m.Image) || !slices.Equal(m.Kernels, []string{k.Name}) {
			t.Errorf("module %+v", m)
		}
		if err := launch.CheckEntries(m); err != nil {
			t.Error(err)
		}
		if err := launch.ArchRuns(m, cc); err != nil {
			t.Errorf("compute capability %d: %v", cc, err)
		}
	}
	mods, _ := Modules(core.DeviceInfo{Platform: core.PlatformCUDA, ComputeCapability: 90}, k)
	f, err := launch.DriverFloor(mods[0])
	if err != nil {
		t.Fatal(err)
	}
	if f.PTXISA != "7.8" || f.CUDA != "11.8" {
		t.Errorf("driver floor %s: want PTX ISA 7.8 of CUDA 11.8 (nvcc 11.8)", f.Describe())
	}
}

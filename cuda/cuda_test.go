package cuda_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/kernels"
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
	cfg, b := smallConfig(), kernels.BatchShape{SeqLens: []int{2}, PrefixLens: []int{0}}
	raw, _ := kernels.RandomTensors(rand.New(rand.NewPCG(1, 1)), cfg, b)
	if err := d.RunMLA(cfg, b, raw, make([]float32, 2*cfg.Heads*cfg.VHeadDim)); !errors.Is(err, cuda.ErrClosed) {
		t.Fatalf("RunMLA after Close: %v, want ErrClosed", err)
	}
}

// TestEmbeddedPTXCurrent checks that mla_ptx.go was generated from the current MLASource.
func TestEmbeddedPTXCurrent(t *testing.T) {
	if got := fmt.Sprintf("%x", sha256.Sum256([]byte(cuda.MLASource))); got != cuda.MLAPTXSourceHash {
		t.Fatalf("mla_ptx.go is stale (source hash %s, PTX built from %s): run go generate ./cuda with an NVRTC (see cuda/internal/genptx)", got, cuda.MLAPTXSourceHash)
	}
	if !strings.Contains(cuda.MLAPTX, ".entry "+cuda.MLAKernel+"(") {
		t.Fatalf("embedded PTX has no entry %s", cuda.MLAKernel)
	}
}

// TestCompilePTX compiles the kernel with NVRTC when one is present (no GPU needed).
func TestCompilePTX(t *testing.T) {
	path, major, minor, err := cuda.NVRTCVersion()
	if errors.Is(err, cuda.ErrNoNVRTC) {
		t.Skipf("no NVRTC here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	ptx, err := cuda.CompilePTX(cuda.MLASource, "mla.cu", "--gpu-architecture="+cuda.EmbeddedPTXArch)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ptx, ".entry "+cuda.MLAKernel+"(") {
		t.Fatalf("PTX has no entry %s", cuda.MLAKernel)
	}
	t.Logf("NVRTC %d.%d (%s): %d bytes of PTX", major, minor, path, len(ptx))
	_, err = cuda.CompilePTX("this is not CUDA", "bad.cu")
	var ce *cuda.Error
	if !errors.As(err, &ce) || ce.Call != "nvrtcCompileProgram" || ce.Log == "" {
		t.Fatalf("bad source: %v, want an nvrtcCompileProgram *Error with a log", err)
	}
}

func TestValidate(t *testing.T) {
	cfg := smallConfig()
	b := kernels.BatchShape{SeqLens: []int{3}, PrefixLens: []int{1}}
	raw, err := kernels.RandomTensors(rand.New(rand.NewPCG(1, 1)), cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, 2*cfg.Heads*cfg.VHeadDim)
	if err := cuda.Validate(cfg, b, raw, out); err != nil {
		t.Fatal(err)
	}
	if err := cuda.Validate(cfg, b, raw, out[1:]); err == nil || !strings.Contains(err.Error(), "out has") {
		t.Fatalf("short out: %v", err)
	}
	bad := raw
	bad.CKV = bad.CKV[:1]
	if err := cuda.Validate(cfg, b, bad, out); err == nil || !strings.Contains(err.Error(), "Tensors.CKV") {
		t.Fatalf("short CKV: %v", err)
	}
	if err := cuda.Validate(cfg, kernels.BatchShape{SeqLens: []int{1}, PrefixLens: []int{1}}, raw, out); err == nil {
		t.Fatal("batch without new tokens accepted")
	}
}

func smallConfig() kernels.Config {
	return kernels.Config{Heads: 2, KVLoraRank: 16, QKNopeHeadDim: 8, QKRopeHeadDim: 4, VHeadDim: 8,
		SoftmaxScale: 0.3, RopeBase: 10000, ChunkCapacity: 1024}
}

// randomConfig draws small dimensions like the kernels tests do.
func randomConfig(rng *rand.Rand) kernels.Config {
	nope, rope := 4+rng.IntN(13), 2*(1+rng.IntN(4))
	return kernels.Config{
		Heads: 1 + rng.IntN(4), KVLoraRank: 8 + rng.IntN(33), QKNopeHeadDim: nope, QKRopeHeadDim: rope,
		VHeadDim: 4 + rng.IntN(13), SoftmaxScale: kernels.DeepSeekSoftmaxScale(nope, rope, 40, 1),
		RopeBase: 10000, ChunkCapacity: 1024,
	}
}

var batches = []struct {
	name     string
	seq, pre []int
}{
	{"prefill", []int{5}, []int{0}},
	{"extend_tiles", []int{70}, []int{40}},
	{"mixed", []int{3, 150, 9}, []int{0, 100, 8}},
	{"decode", []int{200, 17, 64, 65}, []int{199, 16, 63, 64}},
	{"decode_long", []int{1000}, []int{999}},
	{"target_verify", []int{50, 80}, []int{46, 76}},
}

// check runs one case on the GPU and returns its error against the fp64 oracle and
// against the CPU kernel.
func check(t *testing.T, d *cuda.Device, cfg kernels.Config, b kernels.BatchShape, seed uint64) (oracle, cpu float64, st cuda.Stats) {
	t.Helper()
	raw, err := kernels.RandomTensors(rand.New(rand.NewPCG(seed, 7)), cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	in, err := kernels.ApplyRoPE(cfg, b, raw)
	if err != nil {
		t.Fatal(err)
	}
	n := b.Tokens() * cfg.Heads * cfg.VHeadDim
	got, ref := make([]float32, n), make([]float32, n)
	if st, err = d.RunMLAStats(cfg, b, in, got); err != nil {
		t.Fatal(err)
	}
	if err := kernels.Run(kernels.MLA, cfg, b, in, ref); err != nil {
		t.Fatal(err)
	}
	want, err := kernels.Reference(cfg, b, raw)
	if err != nil {
		t.Fatal(err)
	}
	ref64 := make([]float64, n)
	for i, x := range ref {
		ref64[i] = float64(x)
	}
	return kernels.RelError(got, want), kernels.RelError(got, ref64), st
}

func TestMLARandom(t *testing.T) {
	d := device(t)
	rng := rand.New(rand.NewPCG(42, 1))
	cfgs := []kernels.Config{randomConfig(rng), randomConfig(rng), randomConfig(rng),
		// Wider than the block (lora, v > 256 threads) and than a warp (rope > 32).
		{Heads: 2, KVLoraRank: 300, QKNopeHeadDim: 40, QKRopeHeadDim: 66, VHeadDim: 260, SoftmaxScale: 0.1, RopeBase: 10000, ChunkCapacity: 1024},
	}
	worst := 0.0
	for ci, cfg := range cfgs {
		for bi, bt := range batches {
			name := fmt.Sprintf("cfg%d_%s", ci, bt.name)
			b := kernels.BatchShape{SeqLens: bt.seq, PrefixLens: bt.pre}
			oracle, cpu, st := check(t, d, cfg, b, uint64(ci*100+bi))
			if ci == 0 && bi == 0 {
				t.Logf("module: %s (compile+load %v)", st.Module, st.Compile)
			}
			worst = max(worst, oracle)
			if !(oracle < 1e-5) {
				t.Errorf("%s (H=%d lora=%d nope=%d rope=%d v=%d): RelError vs Reference %.3g, vs CPU kernel %.3g",
					name, cfg.Heads, cfg.KVLoraRank, cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim, oracle, cpu)
			}
		}
	}
	t.Logf("%d cases, worst RelError vs kernels.Reference %.3g", len(cfgs)*len(batches), worst)
}

// TestMLADeepSeekDims checks DeepSeek-V3 head dimensions (8 of the 128 heads, to keep
// the fp64 oracle quick) against the oracle.
func TestMLADeepSeekDims(t *testing.T) {
	d := device(t)
	cfg := kernels.DeepSeekV3()
	cfg.Heads = 8
	b := kernels.BatchShape{SeqLens: []int{150, 130}, PrefixLens: []int{149, 120}}
	oracle, cpu, _ := check(t, d, cfg, b, 3)
	t.Logf("RelError vs kernels.Reference %.3g, vs kernels.Run %.3g", oracle, cpu)
	if !(oracle < 1e-5) {
		t.Errorf("RelError vs Reference %.3g", oracle)
	}
}

func TestMLAEmbeddedPTX(t *testing.T) {
	device(t)
	d, err := cuda.OpenEmbeddedPTX()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cfg := smallConfig()
	b := kernels.BatchShape{SeqLens: []int{3, 150, 9}, PrefixLens: []int{0, 100, 8}}
	oracle, _, st := check(t, d, cfg, b, 9)
	t.Logf("module: %s; RelError vs Reference %.3g", st.Module, oracle)
	if !strings.HasPrefix(st.Module, "embedded PTX") {
		t.Errorf("module %q, want the embedded PTX", st.Module)
	}
	if !(oracle < 1e-5) {
		t.Errorf("RelError vs Reference %.3g", oracle)
	}
}

// decodeShape is DeepSeek-V3 decode: four requests at context about 1024, one new token each.
var decodeShape = kernels.BatchShape{SeqLens: []int{1024, 1000, 1100, 900}, PrefixLens: []int{1023, 999, 1099, 899}}

func decodeInputs(tb testing.TB) (kernels.Config, kernels.Tensors) {
	cfg := kernels.DeepSeekV3()
	raw, err := kernels.RandomTensors(rand.New(rand.NewPCG(5, 5)), cfg, decodeShape)
	if err != nil {
		tb.Fatal(err)
	}
	in, err := kernels.ApplyRoPE(cfg, decodeShape, raw)
	if err != nil {
		tb.Fatal(err)
	}
	return cfg, in
}

func TestMLADeepSeekV3Decode(t *testing.T) {
	d := device(t)
	cfg, in := decodeInputs(t)
	b := decodeShape
	n := b.Tokens() * cfg.Heads * cfg.VHeadDim
	got, ref := make([]float32, n), make([]float32, n)

	start := time.Now()
	first, err := d.RunMLAStats(cfg, b, in, got)
	if err != nil {
		t.Fatal(err)
	}
	firstWall := time.Since(start)
	gpu, kern := time.Duration(1<<62), time.Duration(1<<62)
	var best cuda.Stats
	for range 5 {
		start := time.Now()
		st, err := d.RunMLAStats(cfg, b, in, got)
		if err != nil {
			t.Fatal(err)
		}
		if w := time.Since(start); w < gpu {
			gpu, best = w, st
		}
		kern = min(kern, st.Kernel)
	}
	cpu := time.Duration(1 << 62)
	for range 2 {
		start := time.Now()
		if err := kernels.Run(kernels.MLA, cfg, b, in, ref); err != nil {
			t.Fatal(err)
		}
		cpu = min(cpu, time.Since(start))
	}
	ref64 := make([]float64, n)
	for i, x := range ref {
		ref64[i] = float64(x)
	}
	rel := kernels.RelError(got, ref64)
	t.Logf("DeepSeek-V3 decode, 4 requests (context 900-1100), 128 heads: RelError GPU vs kernels.Run %.3g", rel)
	t.Logf("first call %v (module %s, compile+load %v)", firstWall, first.Module, first.Compile)
	t.Logf("GPU RunMLA %v (upload %v, kernel %v, download %v); best kernel %v", gpu, best.Upload, best.Kernel, best.Download, kern)
	t.Logf("CPU kernels.Run(MLA) %v (GOMAXPROCS cores); CPU/GPU end-to-end %.1fx, CPU/GPU kernel-only %.1fx",
		cpu, float64(cpu)/float64(gpu), float64(cpu)/float64(kern))
	if !(rel < 1e-5) {
		t.Errorf("RelError %.3g", rel)
	}
}

// BenchmarkMLADecode runs the DeepSeek-V3 decode shape on the GPU (end to end, inputs
// copied every call; kernel-ms/op is the kernel alone) and on the CPU kernel.
func BenchmarkMLADecode(b *testing.B) {
	cfg, in := decodeInputs(b)
	out := make([]float32, decodeShape.Tokens()*cfg.Heads*cfg.VHeadDim)
	flops := kernels.FLOPs(kernels.MLA, cfg, decodeShape)
	b.Run("GPU", func(b *testing.B) {
		d := device(b)
		if err := d.RunMLA(cfg, decodeShape, in, out); err != nil { // compile outside the timer
			b.Fatal(err)
		}
		var kern time.Duration
		b.ResetTimer()
		for b.Loop() {
			st, err := d.RunMLAStats(cfg, decodeShape, in, out)
			if err != nil {
				b.Fatal(err)
			}
			kern += st.Kernel
		}
		b.ReportMetric(float64(kern.Microseconds())/1e3/float64(b.N), "kernel-ms/op")
		b.ReportMetric(flops/(float64(kern.Nanoseconds())/float64(b.N)), "kernel-GFLOP/s")
	})
	b.Run("CPU", func(b *testing.B) {
		for b.Loop() {
			if err := kernels.Run(kernels.MLA, cfg, decodeShape, in, out); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(flops/(float64(b.Elapsed().Nanoseconds())/float64(b.N)), "GFLOP/s")
	})
}

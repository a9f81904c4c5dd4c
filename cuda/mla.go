package cuda

import (
	"fmt"
	"math"
	"runtime"
	"time"
	"unsafe"

	"github.com/attnplug/attnplug/kernels"
)

// MLAKernel is the name of the kernel function in MLASource.
const MLAKernel = "mla_absorbed"

// mlaThreads is the block size; mlaTile is the number of keys scored per round.
const (
	mlaThreads = 256
	mlaTile    = 64
)

// MLASource is the CUDA C source of the absorbed MLA kernel (kernels.MLA). One thread
// block computes one (token, head): q_lat = q_nope·w_kc[h] (thread per latent column),
// then the keys of the token's causal range are taken in tiles of MLA_TILE (a warp per
// key, lanes over the kv_lora_rank+qk_rope dot product, warp-shuffle reduction, scores
// in shared memory), folded into an online softmax (running max and sum, rescaled
// latent accumulator in shared memory, thread per latent column), and the normalised
// latent goes through w_vc[h] (thread per output column). Storage is fp32, every
// product and sum fp64.
const MLASource = `
#define MLA_TILE 64

extern "C" __global__ void mla_absorbed(
    const float* __restrict__ q_nope,   // [T, H, nope]
    const float* __restrict__ q_pe,     // [T, H, rope], rotated
    const float* __restrict__ c_kv,     // [KV, lora]
    const float* __restrict__ k_pe,     // [KV, rope], rotated
    const float* __restrict__ w_kc,     // [H, nope, lora]
    const float* __restrict__ w_vc,     // [H, lora, vd]
    const int* __restrict__ tok_kv,     // [T] first KV row of the token's request
    const int* __restrict__ tok_pos,    // [T] index of the token in its request
    float* __restrict__ out,            // [T, H, vd]
    int T, int H, int lora, int nope, int rope, int vd, double scale)
{
    extern __shared__ double smem[];
    double* q = smem;                  // [lora + rope]: q_lat then q_pe
    double* acc = q + lora + rope;     // [lora]: unnormalised latent output
    double* s = acc + lora;            // [MLA_TILE]: scores, then probabilities

    const int tok = blockIdx.x / H, h = blockIdx.x % H;
    const int tid = threadIdx.x, nt = blockDim.x;
    const int lane = tid & 31, warp = tid >> 5, nwarps = nt >> 5;
    const long long qo = (long long)tok * H + h;

    // Absorb w_kc: q_lat[l] = sum_d q_nope[d] * w_kc[h, d, l].
    const float* qn = q_nope + qo * nope;
    const float* wk = w_kc + (long long)h * nope * lora;
    for (int l = tid; l < lora; l += nt) {
        double a = 0.0;
        for (int d = 0; d < nope; d++) a += (double)qn[d] * (double)wk[(long long)d * lora + l];
        q[l] = a;
        acc[l] = 0.0;
    }
    for (int d = tid; d < rope; d += nt) q[lora + d] = (double)q_pe[qo * rope + d];
    __syncthreads();

    const long long kv0 = tok_kv[tok];
    const int nkeys = tok_pos[tok] + 1;   // causal: keys 0..pos of the request
    double m = -1.0e300, z = 0.0;         // running max and sum (same in every thread)
    for (int k0 = 0; k0 < nkeys; k0 += MLA_TILE) {
        const int n = min(MLA_TILE, nkeys - k0);
        // Scores: a warp per key, lanes over [c_kv ‖ k_pe].
        for (int i = warp; i < n; i += nwarps) {
            const long long g = kv0 + k0 + i;
            const float* c = c_kv + g * lora;
            const float* kp = k_pe + g * rope;
            double a = 0.0;
            for (int l = lane; l < lora; l += 32) a += q[l] * (double)c[l];
            for (int d = lane; d < rope; d += 32) a += q[lora + d] * (double)kp[d];
            for (int off = 16; off > 0; off >>= 1) a += __shfl_down_sync(0xffffffffu, a, off);
            if (lane == 0) s[i] = a * scale;
        }
        __syncthreads();
        double mt = m;
        for (int i = 0; i < n; i++) mt = fmax(mt, s[i]);
        const double alpha = exp(m - mt);
        __syncthreads();
        for (int i = tid; i < n; i += nt) s[i] = exp(s[i] - mt);
        __syncthreads();
        double zt = 0.0;
        for (int i = 0; i < n; i++) zt += s[i];
        z = z * alpha + zt;
        m = mt;
        // Latent accumulation: acc[l] = acc[l]*alpha + sum_i p_i * c_kv[key_i, l].
        for (int l = tid; l < lora; l += nt) {
            double a = acc[l] * alpha;
            const float* c = c_kv + (kv0 + k0) * lora + l;
            for (int i = 0; i < n; i++) a += s[i] * (double)c[(long long)i * lora];
            acc[l] = a;
        }
        __syncthreads();
    }

    // Up-project: out[e] = sum_l acc[l]/z * w_vc[h, l, e].
    const double inv = 1.0 / z;
    const float* wv = w_vc + (long long)h * lora * vd;
    for (int e = tid; e < vd; e += nt) {
        double a = 0.0;
        for (int l = 0; l < lora; l++) a += acc[l] * (double)wv[(long long)l * vd + e];
        out[qo * vd + e] = (float)(a * inv);
    }
}
`

//go:generate go run ./internal/genptx

// module is a loaded CUDA module and its kernel function.
type module struct {
	mod, fn uintptr
	origin  string
	err     error // a failed load is not retried
}

// EmbeddedPTXArch is the virtual architecture of the embedded fallback PTX.
const EmbeddedPTXArch = "compute_80"

// loadMLA returns the MLA kernel, compiling or loading the module on first use
// (worker only). The second result is the time spent when it did.
func (d *Device) loadMLA() (*module, time.Duration, error) {
	if d.mla.fn != 0 || d.mla.err != nil {
		return &d.mla, 0, d.mla.err
	}
	start := time.Now()
	var errs []error
	if !d.forceEmbedded {
		arch := fmt.Sprintf("compute_%d%d", d.info.Major, d.info.Minor)
		nv, err := getNVRTC(d.info.DriverVersion)
		if err == nil {
			var ptx string
			ptx, err = nv.compile(MLASource, "mla.cu", []string{"--gpu-architecture=" + arch})
			if err == nil {
				if err = d.loadModule(ptx, &d.mla); err == nil {
					d.mla.origin = fmt.Sprintf("NVRTC %d.%d %s (%s)", nv.major, nv.minor, arch, nv.path)
					return &d.mla, time.Since(start), nil
				}
			}
		}
		errs = append(errs, err)
	}
	if err := d.loadModule(mlaPTX, &d.mla); err != nil {
		errs = append(errs, fmt.Errorf("embedded PTX: %w", err))
		d.mla.err = joinErrs(errs...)
		return &d.mla, time.Since(start), d.mla.err
	}
	d.mla.origin = "embedded PTX (" + mlaPTXCompiler + ", " + EmbeddedPTXArch + ")"
	if len(errs) > 0 {
		d.mla.origin += "; NVRTC path failed: " + joinErrs(errs...).Error()
	}
	return &d.mla, time.Since(start), nil
}

// loadModule loads PTX text into m (worker only).
func (d *Device) loadModule(ptx string, m *module) error {
	img := append([]byte(ptx), 0)
	var mod uintptr
	if err := d.drv.check("cuModuleLoadData", d.drv.cuModuleLoadData(&mod, &img[0])); err != nil {
		return err
	}
	var fn uintptr
	if err := d.drv.check("cuModuleGetFunction("+MLAKernel+")", d.drv.cuModuleGetFunction(&fn, mod, MLAKernel)); err != nil {
		d.drv.cuModuleUnload(mod)
		return err
	}
	m.mod, m.fn = mod, fn
	return nil
}

// Stats reports what one RunMLAStats call did and how long its phases took (host
// wall clock on the Device's goroutine).
type Stats struct {
	// Module says where the kernel came from: NVRTC (version, architecture, library)
	// or the embedded PTX, with the reason NVRTC was not used.
	Module string
	// Compile is the time spent compiling and loading the module (zero once cached).
	Compile time.Duration
	// Upload is the time of the host-to-device copies of the inputs.
	Upload time.Duration
	// Kernel is the time from launch to the end of cuCtxSynchronize.
	Kernel time.Duration
	// Download is the time of the device-to-host copy of the output.
	Download time.Duration
}

// RunMLA computes absorbed MLA attention on the GPU, exactly as kernels.Run(kernels.MLA,
// cfg, b, t, out) does on the CPU: t.QPe and t.KPe rotated (t.Positions and
// t.TopKIndices are not read), causal over each request's prefix and new tokens, out
// [T, Heads, VHeadDim]. The inputs are copied to the device on every call.
func (d *Device) RunMLA(cfg kernels.Config, b kernels.BatchShape, t kernels.Tensors, out []float32) error {
	_, err := d.RunMLAStats(cfg, b, t, out)
	return err
}

// RunMLAStats is RunMLA that also reports the module used and the phase times.
func (d *Device) RunMLAStats(cfg kernels.Config, b kernels.BatchShape, t kernels.Tensors, out []float32) (Stats, error) {
	if err := validate(cfg, b, &t, out); err != nil {
		return Stats{}, err
	}
	T, H := b.Tokens(), cfg.Heads
	if int64(T)*int64(H) > math.MaxInt32 {
		return Stats{}, fmt.Errorf("cuda: %d tokens × %d heads exceeds the grid limit", T, H)
	}
	lora, nope, rope, vd := cfg.KVLoraRank, cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim
	shared := (2*lora + rope + mlaTile) * 8
	if shared > d.info.MaxSharedPerBlock {
		return Stats{}, fmt.Errorf("cuda: MLA kernel needs %d bytes of shared memory per block (kv_lora_rank=%d, qk_rope=%d), the device allows %d", shared, lora, rope, d.info.MaxSharedPerBlock)
	}
	tokKV := make([]int32, 0, T)
	tokPos := make([]int32, 0, T)
	kv := 0
	for r := range b.Requests() {
		for i := b.PrefixLens[r]; i < b.SeqLens[r]; i++ {
			tokKV = append(tokKV, int32(kv))
			tokPos = append(tokPos, int32(i))
		}
		kv += b.SeqLens[r]
	}

	type seg struct {
		host unsafe.Pointer
		n    uintptr // bytes
		off  uintptr
	}
	f32 := func(x []float32) seg { return seg{unsafe.Pointer(unsafe.SliceData(x)), uintptr(4 * len(x)), 0} }
	i32 := func(x []int32) seg { return seg{unsafe.Pointer(unsafe.SliceData(x)), uintptr(4 * len(x)), 0} }
	segs := []seg{f32(t.QNope), f32(t.QPe), f32(t.CKV), f32(t.KPe), f32(t.WKC), f32(t.WVC), i32(tokKV), i32(tokPos), f32(out)}
	var total uintptr
	for i := range segs {
		segs[i].off = total
		total += (segs[i].n + 255) &^ 255
	}

	var st Stats
	err := d.do(func() error {
		m, compile, err := d.loadMLA()
		st.Module, st.Compile = m.origin, compile
		if err != nil {
			return err
		}
		if err := d.ensureArena(total); err != nil {
			return err
		}
		drv := d.drv
		t0 := time.Now()
		for _, s := range segs[:len(segs)-1] {
			if s.n == 0 {
				continue
			}
			if err := drv.check("cuMemcpyHtoD_v2", drv.cuMemcpyHtoD(d.arena+uint64(s.off), s.host, s.n)); err != nil {
				return err
			}
		}
		t1 := time.Now()
		args := make([]uint64, 0, 16)
		for _, s := range segs {
			args = append(args, d.arena+uint64(s.off))
		}
		for _, v := range []int{T, H, lora, nope, rope, vd} {
			args = append(args, uint64(uint32(int32(v))))
		}
		args = append(args, math.Float64bits(cfg.SoftmaxScale))
		params := make([]unsafe.Pointer, len(args))
		for i := range args {
			params[i] = unsafe.Pointer(&args[i])
		}
		var pin runtime.Pinner
		pin.Pin(&args[0])
		pin.Pin(&params[0])
		rc := drv.launch(m.fn, [3]uint32{uint32(T * H), 1, 1}, [3]uint32{mlaThreads, 1, 1}, uint32(shared), 0, &params[0])
		pin.Unpin()
		if err := drv.check("cuLaunchKernel", rc); err != nil {
			return err
		}
		if err := drv.check("cuCtxSynchronize", drv.cuCtxSynchronize()); err != nil {
			return err
		}
		t2 := time.Now()
		o := segs[len(segs)-1]
		if err := drv.check("cuMemcpyDtoH_v2", drv.cuMemcpyDtoH(o.host, d.arena+uint64(o.off), o.n)); err != nil {
			return err
		}
		st.Upload, st.Kernel, st.Download = t1.Sub(t0), t2.Sub(t1), time.Since(t2)
		return nil
	})
	runtime.KeepAlive(t)
	runtime.KeepAlive(out)
	runtime.KeepAlive(tokKV)
	runtime.KeepAlive(tokPos)
	return st, err
}

// validate checks cfg, b and the lengths RunMLA reads, naming the first mismatch.
func validate(cfg kernels.Config, b kernels.BatchShape, t *kernels.Tensors, out []float32) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := b.Validate(); err != nil {
		return err
	}
	T, KV, H := b.Tokens(), b.KVTokens(), cfg.Heads
	nope, rope, lora, v := cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.KVLoraRank, cfg.VHeadDim
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"Tensors.QNope", len(t.QNope), T * H * nope},
		{"Tensors.QPe", len(t.QPe), T * H * rope},
		{"Tensors.CKV", len(t.CKV), KV * lora},
		{"Tensors.KPe", len(t.KPe), KV * rope},
		{"Tensors.WKC", len(t.WKC), H * nope * lora},
		{"Tensors.WVC", len(t.WVC), H * lora * v},
		{"out", len(out), T * H * v},
	} {
		if c.got != c.want {
			return fmt.Errorf("cuda: %s has %d elements, want %d (tokens=%d, kv_tokens=%d, heads=%d)", c.name, c.got, c.want, T, KV, H)
		}
	}
	return nil
}

package gpucheck

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devicecheck"
	"github.com/attnplug/attnplug/devicehost"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/launch/cudaexec"
)

// TestMMASyncWideOnHopper keeps the mma.sync 64-row bodies (mla_decode.cu's
// wide variant, what GPUs other than compute capability 9.0 with the shared
// memory for it run) checked on a Hopper GPU, where plans pick the wgmma
// module instead: each case is planned as for a device of compute
// capability 8.9 with this GPU's shared memory, launched here (the module
// has both), and checked against the fp64 reference with its outputs
// poisoned first, in the four forms.
func TestMMASyncWideOnHopper(t *testing.T) {
	e := openEnv(t)
	cases := []devicecheck.Quant{
		{Name: "bf16 128 heads", Heads: 128, PageSize: 64, SeqLens: []int64{5000, 70, 3000}, QLens: []int64{1, 1, 1}, Seed: 31},
		{Name: "bf16 64 heads page 1", Heads: 64, PageSize: 1, SeqLens: []int64{4097, 3}, QLens: []int64{2, 2}, Seed: 32, Graph: true},
		{Name: "fp8 128 heads", Heads: 128, PageSize: 64, SeqLens: []int64{9000, 5}, QLens: []int64{1, 1}, FP8: true, Seed: 33},
		{Name: "sparse 128 heads", Heads: 128, PageSize: 64, SeqLens: []int64{9000, 2100}, QLens: []int64{2, 2}, TopK: 2048, Seed: 34, Pad: 0.1},
		{Name: "sparse fp8 128 heads", Heads: 128, PageSize: 64, SeqLens: []int64{12000}, QLens: []int64{3}, TopK: 2048, FP8: true, Seed: 35, Pad: 0.3},
	}
	checkPlanned(t, e, cases, 89, func(module, entry string) bool {
		return module == devkernels.ModuleMLADecode && strings.HasSuffix(entry, "_m64")
	})
}

// TestNarrowWGMMAOnHopper checks the 16-row wgmma bodies (mla_decode_sm90.cu's
// wg16 entries) where plans pick them on compute capability 9.0: a single
// request in every form, dense ragged batches of 5 to 24 requests (bf16
// and FP8), and sparse batches of several tokens, each against the fp64
// reference with its outputs poisoned first.
func TestNarrowWGMMAOnHopper(t *testing.T) {
	e := openEnv(t)
	cases := []devicecheck.Quant{
		{Name: "bf16 16 heads, one request", Heads: 16, PageSize: 64, SeqLens: []int64{9000}, QLens: []int64{1}, Seed: 41},
		{Name: "bf16 8 heads page 1, one request", Heads: 8, PageSize: 1, SeqLens: []int64{4097}, QLens: []int64{2}, Seed: 42, Graph: true},
		{Name: "fp8 16 heads, one request", Heads: 16, PageSize: 64, SeqLens: []int64{7000}, QLens: []int64{1}, FP8: true, Seed: 43},
		{Name: "sparse 16 heads", Heads: 16, PageSize: 64, SeqLens: []int64{9000, 2100, 300}, QLens: []int64{2, 3, 1}, TopK: 2048, Seed: 44, Pad: 0.2},
		{Name: "bf16 16 heads, 20 requests", Heads: 16, PageSize: 64, SeqLens: ragged(20, 5000, 46), QLens: ones(20), Seed: 46, Graph: true},
		{Name: "fp8 16 heads, 24 requests", Heads: 16, PageSize: 64, SeqLens: ragged(24, 3000, 47), QLens: ones(24), FP8: true, Seed: 47},
		{Name: "bf16 16 heads, 5 requests", Heads: 16, PageSize: 64, SeqLens: ragged(5, 20000, 48), QLens: ones(5), Seed: 48, Graph: true},
		{Name: "fp8 16 heads, 16 requests", Heads: 16, PageSize: 64, SeqLens: ragged(16, 9000, 49), QLens: ones(16), FP8: true, Seed: 49},
		{Name: "sparse fp8 16 heads, 5 tokens", Heads: 16, PageSize: 64, SeqLens: []int64{5000, 2500}, QLens: []int64{3, 2}, TopK: 2048, FP8: true, Seed: 48, Pad: 0.2},
		{Name: "sparse fp8 16 heads, one token", Heads: 16, PageSize: 64, SeqLens: []int64{12000}, QLens: []int64{1}, TopK: 2048, FP8: true, Seed: 45, Pad: 0.3},
	}
	checkPlanned(t, e, cases, 90, func(module, entry string) bool {
		return module == devkernels.ModuleMLADecodeSM90 && strings.HasSuffix(entry, "_wg16")
	})
}

// checkPlanned plans each case through the registry as for a device of
// compute capability cc (with this GPU's shared memory), requires every
// decode launch to be one that want accepts, prepares the plan here (the
// module has both bodies), launches it and checks it against the fp64
// reference with its outputs poisoned first.
func checkPlanned(t *testing.T, e *rig, cases []devicecheck.Quant, cc int, want func(module, entry string) bool) {
	t.Helper()
	for _, c := range cases {
		b, err := e.AllocQuant(c, 1)
		if err != nil {
			t.Fatalf("%s: alloc: %v", c.Describe(), err)
		}
		as := b.Req
		as.Backend = quantBackend(c)
		as.Device.ComputeCapability = cc
		p, err := e.reg.PlanKernel(t.Context(), &as)
		if err != nil {
			b.Free()
			t.Fatalf("%s: plan: %v", c.Name, err)
		}
		for _, l := range p.Launches {
			if l.Entry != devkernels.EntrySchedule && l.Entry != devkernels.EntryCombine && l.Entry != devkernels.EntryCombineRows && !want(l.Module, l.Entry) {
				t.Errorf("%s: planned %s.%s, not the body under test", c.Name, l.Module, l.Entry)
			}
		}
		if err := e.Host.Load(t.Context(), as.Backend); err != nil {
			b.Free()
			t.Fatal(err)
		}
		pr, err := e.Host.Executor().Prepare(&b.Req, p)
		if err != nil {
			b.Free()
			t.Fatalf("%s: prepare: %v", c.Name, err)
		}
		ch, err := launchPrepared(e, b, pr, 32)
		pr.Close()
		b.Free()
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if !ch.OK() {
			t.Errorf("%s (%s): %v", c.Name, p.Note, ch)
		}
		t.Logf("%-22s %s (%s): %v", c.Name, c.Describe(), p.Note, ch)
	}
}

// launchPrepared poisons b's outputs, launches pr once on b's layer 0 and
// compares the outputs with the float64 reference on rows sampled rows.
func launchPrepared(e *rig, b devicecheck.Batch, pr *cudaexec.Prepared, rows int) (devicecheck.Check, error) {
	if err := launchOn(e, b, pr); err != nil {
		return devicecheck.Check{}, err
	}
	return b.Verify(0, rows)
}

// launchOn poisons b's outputs and launches pr once on b's layer 0.
func launchOn(e *rig, b devicecheck.Batch, pr *cudaexec.Prepared) error {
	out, lse := b.Outputs()
	step := devicehost.NewStep(pr, e.Stream(), nil)
	return e.Do(func(x *cuda.Ctx) error {
		if err := x.Fill16(out.Ptr, 0x7fc0, out.Bytes/2); err != nil {
			return err
		}
		if err := x.Fill32(lse.Ptr, 0x7fc00000, lse.Bytes/4); err != nil {
			return err
		}
		if err := x.Synchronize(); err != nil {
			return err
		}
		return step.All(x, b.Tensors(0))
	})
}

// ragged returns n sequence lengths between 1 and most, from seed.
func ragged(n int, most int64, seed uint64) []int64 {
	rng := rand.New(rand.NewPCG(seed, 1))
	v := make([]int64, n)
	for i := range v {
		v[i] = 1 + rng.Int64N(most)
	}
	return v
}

// ones returns n query lengths of 1.
func ones(n int) []int64 { return slices.Repeat([]int64{1}, n) }

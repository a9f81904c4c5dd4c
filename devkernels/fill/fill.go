// Package fill is the device code of the verification layer (package
// devicecheck): the kernels that generate a check's tensors on the device
// from a hash of their index, so that the float64 reference on the host
// recomputes any element without copying the tensor back. It is a
// devkernels.Set of its own, built ahead of time by `make device-code`
// into images/ and embedded here (NVRTC only where no image serves the
// device), so that no plugin embeds it and `attnplug run --device cuda`
// runs without NVRTC.
//
// Two modules: "fill" (fill_bf16, advance_i32), built for compute_80 and
// compute_90 (PTX) and sm_80 and sm_90 (cubins); and "fill_fp8" (fill_e4m3,
// fill_dsa), whose e4m3 conversion (cvt.rn.satfinite.e4m3x2) the PTX ISA
// of the toolkits the images are built with allows from sm_90, built for
// compute_90 and sm_90. A device below 9.0 gets "fill" alone.
package fill

import (
	"embed"
	"fmt"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devkernels"
)

//go:embed hash.cuh
var hashHeader string

//go:embed fill.cu
var fillSource string

//go:embed fill_fp8.cu
var fillFP8Source string

//go:embed images
var images embed.FS

// The modules and their entries.
const (
	Module    = "fill"
	ModuleFP8 = "fill_fp8"

	EntryBF16    = "fill_bf16"
	EntryAdvance = "advance_i32"
	EntryE4M3    = "fill_e4m3"
	EntryDSA     = "fill_dsa"
)

// fp8CC is the first compute capability whose fills convert to e4m3.
const fp8CC = 90

// Set is the fills' device code.
var Set = &devkernels.Set{
	Name:    "fill",
	FS:      images,
	Sources: Sources,
	Archs:   archs,
	Spec:    spec,
	Virtual: func(_ string, cc int) string { return fmt.Sprintf("compute_%d", cc) },
}

// Sources returns each module's source as it is compiled: the hash, then
// the module's kernels.
func Sources() map[string]string {
	return map[string]string{
		Module:    hashHeader + "\n" + fillSource,
		ModuleFP8: hashHeader + "\n" + fillFP8Source,
	}
}

func archs(module string) []string {
	if module == ModuleFP8 {
		return []string{"compute_90", "sm_90"}
	}
	return devkernels.AheadOfTime
}

// spec returns the modules a device of compute capability cc runs, without
// their images: "fill", and "fill_fp8" from compute capability 8.9.
func spec(cc int) []core.KernelModule {
	ptr := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamPtr} }
	i64 := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamI64} }
	mods := []core.KernelModule{{Name: Module, Platform: core.PlatformCUDA, Entries: []core.Entry{
		{Name: EntryBF16, Params: []core.Param{ptr("p"), i64("n"), i64("seed")}},
		{Name: EntryAdvance, Params: []core.Param{ptr("p"), i64("n")}},
	}}}
	if cc >= fp8CC {
		mods = append(mods, core.KernelModule{Name: ModuleFP8, Platform: core.PlatformCUDA, Entries: []core.Entry{
			{Name: EntryE4M3, Params: []core.Param{ptr("p"), i64("n"), i64("seed"), {Name: "inv_scale", Kind: core.ParamF32}}},
			{Name: EntryDSA, Params: []core.Param{ptr("p"), i64("tokens"), i64("seed")}},
		}})
	}
	return mods
}

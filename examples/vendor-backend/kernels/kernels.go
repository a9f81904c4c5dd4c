// Package kernels holds acme_mla's device code: acme_decode, an
// absorbed-MLA decode and target-verify kernel in CUDA C (acme_decode.cu),
// built ahead of time to PTX for compute_80 (acme_decode.compute_80.ptx,
// committed and embedded), the module that hands it to the host (Modules)
// and the launches that run it on one batch (Plan).
//
// Regenerate the PTX after changing the kernel, from the module's root
// (needs nvcc, not a GPU; TestPTXIsCurrent fails while it is stale):
//
//	go generate ./kernels
package kernels

import (
	_ "embed"
	"fmt"
	"slices"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
)

//go:generate nvcc -ptx -arch=compute_80 -o acme_decode.compute_80.ptx acme_decode.cu

// decodePTX is acme_decode.cu built by nvcc -ptx -arch=compute_80: PTX ISA
// 7.8 with nvcc 11.8, which a driver of CUDA 11.8 or newer loads.
//
//go:embed acme_decode.compute_80.ptx
var decodePTX []byte

// The module, its one entry and its launch shape.
const (
	// Module is the kernel module's name.
	Module = "acme_decode"
	// Entry is the kernel's symbol in the module (extern "C").
	Entry = "acme_decode"
	// Arch is the virtual architecture the PTX is built for: compute
	// capability 8.0 (A100) and every newer GPU, which the driver compiles
	// it for at load.
	Arch = "compute_80"
	// MinComputeCapability is the least compute capability the PTX runs on.
	MinComputeCapability = 80
	// Threads is the block size: THREADS in acme_decode.cu.
	Threads = 128
	// HeadDimQK and HeadDimV are the head dims acme_decode runs: absorbed
	// MLA, kv_lora_rank 512 + rope 64 for queries and keys, 512 for the
	// values and the output (HEAD_DIM_QK, HEAD_DIM_V in acme_decode.cu).
	HeadDimQK = 576
	HeadDimV  = 512
)

// params are acme_decode's parameters, in the order of its signature in
// acme_decode.cu: the PTX passes them by position.
func params() []core.Param {
	ptr := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamPtr} }
	return []core.Param{
		ptr("q"), ptr("kv_cache"), ptr("kv_indptr"), ptr("kv_indices"), ptr("seq_lens"), ptr("qo_indptr"),
		ptr("out"), ptr("lse"),
		{Name: "heads", Kind: core.ParamI32}, {Name: "page_size", Kind: core.ParamI32}, {Name: "scale", Kind: core.ParamF32},
	}
}

// Modules returns the device code that runs the catalog kernel k on dev:
// the PTX module of acme_decode, which the host's driver compiles for its
// GPU when it loads it. The error wraps core.ErrNoPlan, naming why, for a
// device that is not a CUDA GPU of compute capability 8.0 or newer.
func Modules(dev core.DeviceInfo, k core.Kernel) ([]core.KernelModule, error) {
	if dev.Platform != core.PlatformCUDA || dev.ComputeCapability < MinComputeCapability {
		return nil, fmt.Errorf("%w: %s needs a CUDA GPU of compute capability 8.0 or newer (its PTX is built for %s); the device is %s of compute capability %d",
			core.ErrNoPlan, Module, Arch, dev.Platform, dev.ComputeCapability)
	}
	img := slices.Clone(decodePTX)
	return []core.KernelModule{{
		Name: Module, Platform: core.PlatformCUDA, Arch: Arch, Format: core.FormatPTX,
		Image: img, SHA256: core.ImageSHA256(img), Kernels: []string{k.Name},
		Entries: []core.Entry{{Name: Entry, Params: params()}},
	}}, nil
}

// Plan returns the launches that run the catalog kernel k on req's batch:
// one launch of acme_decode over a grid of (requests, heads), each block
// looping over its request's query rows, binding the host's tensors
// (launch.Tensors) and the heads, page size and softmax scale. For a graph
// request with a bound on the lengths (Shape.MaxSeqLen) the plan holds for
// the batch size: the kernel reads the lengths from seq_lens and
// qo_indptr at each launch, so it declares that it reads the query lengths
// only (they set the tensors' rows).
//
// The error wraps core.ErrNoPlan, naming why, for what acme_decode does
// not run: a method other than k's, a dtype or KV cache dtype k does not
// list (an FP8 cache), sparse attention, head dims other than 576/512, a
// page size k does not list, a device Modules has no code for. A malformed
// request gets launch.CheckRequest's error (core.ErrInvalidRequest, naming
// the field).
func Plan(req *core.PlanRequest, k core.Kernel) (*core.Plan, error) {
	noPlan := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", core.ErrNoPlan, k.Name, fmt.Sprintf(format, args...))
	}
	if err := launch.CheckRequest(req); err != nil {
		return nil, err
	}
	d, s := req.Dims, req.Shape
	switch {
	case req.Method != k.Method:
		return nil, noPlan("it runs %s, not %s", k.Method, req.Method)
	case req.DType != "bf16":
		return nil, noPlan("queries and output in %q: it takes bf16", req.DType)
	case !slices.Contains(k.DTypes, req.CacheDType()):
		return nil, noPlan("a KV cache of %q: it reads %v", req.CacheDType(), k.DTypes)
	case d.TopK > 0:
		return nil, noPlan("sparse attention (top-k %d): it attends to every key", d.TopK)
	case d.HeadDimQK != HeadDimQK || d.HeadDimV != HeadDimV:
		return nil, noPlan("head dims %d/%d: it runs absorbed MLA of %d/%d", d.HeadDimQK, d.HeadDimV, HeadDimQK, HeadDimV)
	case len(k.PageSizes) > 0 && !slices.Contains(k.PageSizes, s.PageSize):
		return nil, noPlan("page size %d: its catalog lists %v", s.PageSize, k.PageSizes)
	case req.Device.Platform != core.PlatformCUDA || req.Device.ComputeCapability < MinComputeCapability:
		return nil, noPlan("the device is %s of compute capability %d: it needs CUDA 8.0 or newer", req.Device.Platform, req.Device.ComputeCapability)
	}
	tensors, err := launch.Tensors(req)
	if err != nil {
		return nil, err
	}
	t := func(n string) core.Arg { return core.Arg{Param: n, Kind: core.ArgTensor, Name: n} }
	p := &core.Plan{
		Kernel: k.Name, Tensors: tensors,
		Launches: []core.Launch{{
			Module: Module, Entry: Entry,
			Grid: [3]uint32{uint32(len(s.SeqLens)), uint32(d.Heads), 1}, Block: [3]uint32{Threads, 1, 1},
			Args: []core.Arg{
				t("q"), t("kv_cache"), t("kv_indptr"), t("kv_indices"), t("seq_lens"), t("qo_indptr"),
				t("out"), t("lse"),
				{Param: "heads", Kind: core.ArgInt, Int: int64(d.Heads)},
				{Param: "page_size", Kind: core.ArgInt, Int: int64(s.PageSize)},
				{Param: "scale", Kind: core.ArgFloat, Float: d.SoftmaxScale},
			},
		}},
		Note: fmt.Sprintf("one block of %d threads per (request, head)", Threads),
	}
	if launch.PagesPerRequest(req) > 0 {
		// A graph request with a bound on the lengths: nothing above
		// follows the lengths, which the kernel reads from seq_lens and
		// qo_indptr at each launch, so one plan serves every step of this
		// batch size.
		p.Reads = core.PlanReadsDeclared | core.PlanReadsQLens
	}
	return p, nil
}

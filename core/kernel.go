package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
)

// The kernel libraries a catalog entry can stand for (Kernel.Library).
const (
	LibFlashAttention3 = "FlashAttention 3"
	LibFlashAttention4 = "FlashAttention 4"
	LibFlashInfer      = "FlashInfer"
	LibFlashMLA        = "FlashMLA"
	LibCutlassMLA      = "CUTLASS MLA"
	LibTRTLLMMLA       = "TRT-LLM MLA"
	LibTokenSpeedMLA   = "TokenSpeed MLA"
	LibAiter           = "aiter"
	LibTorchNPU        = "torch_npu"
	LibDSA             = "DeepSeek sparse attention"
	LibIntelXPU        = "Intel XPU"
	LibTriton          = "triton"
	LibSGLKernel       = "sgl-kernel"
	// LibHostReference is the library of HostReferenceKernel: the host's
	// own reference kernels, which run a declared method that a catalog
	// does not cover.
	LibHostReference = "reference (host)"
)

// HostReferenceKernel is the catalog entry of a method that a handler
// declares (HandlerInfo.Methods) and its catalog does not cover: the host
// runs it with its own reference kernels (kernel "reference", library
// LibHostReference), in its own process.
func HostReferenceKernel(m Method) Kernel {
	return Kernel{Name: "reference", Library: LibHostReference, Method: m}
}

// Kernel is one entry of a handler's kernel catalog: the kernel a backend
// runs for one forward method, and what it stands for in sglang.
type Kernel struct {
	// Name is the kernel's name, such as "flash_attn_varlen_func".
	Name string
	// Library is the library the kernel stands for (one of the Lib
	// constants, or a vendor's own).
	Library string
	// Method is the forward method the kernel runs.
	Method Method
	// DTypes are the dtypes the real kernel takes ("bf16", "fp8_e4m3",
	// ...): its KV caches', and its queries' and output's (a kernel of
	// FP8 caches and bf16 queries lists both). The host asks for a plan
	// only of dtypes listed here (Covers); empty lists none. The reference
	// kernels always compute in float32 with float64 accumulation.
	DTypes []string
	// HeadDims are the head dimensions the kernel supports (192 and 128
	// for decompressed MHA: q·k and v; 576 and 512 for absorbed MLA). The
	// host asks for a plan only where both of the request's are listed;
	// empty lists none.
	HeadDims []int
	// PageSizes are the KV cache page sizes it supports; empty: any page
	// size (a kernel that reads each request's pages through kv_indptr
	// and kv_indices, whatever their size).
	PageSizes []int
	// CUDAGraph reports that the kernel can be captured in a CUDA graph.
	CUDAGraph bool
	// Hardware lists what the real kernel needs (any entry); empty: any.
	Hardware []Hardware
	// Sparse reports a kernel that attends only to the DSA indexer's top-k
	// positions of each query: it is asked for plans of sparse requests
	// (PlanDims.TopK > 0) alone, and a dense kernel for dense ones alone.
	Sparse bool
	// PrefixChunks reports an MHA_CHUNKED_KV kernel whose planner takes
	// the requests of one prefix chunk's pass (PlanShape.PrefixChunk): a
	// kernel without it is asked for none, since a planner that ignores
	// the field would plan a causal pass.
	PrefixChunks bool
	// QuerySplit reports an MLA kernel whose planner takes the queries in
	// two parts (PlanRequest.QuerySplit): a kernel without it is asked
	// for none, and an engine that offers its queries split
	// (StepRequest.QuerySplit) gets a plan of whole queries instead.
	QuerySplit bool
}

// Covers reports whether k's catalog entry lists what the plan request
// req asks for: k runs req.Method; DTypes lists req.DType and, for a cache
// of another dtype (req.KVDType, such as "fp8_e4m3"), that dtype too;
// HeadDims lists req.Dims.HeadDimQK and HeadDimV; for the paged MLA
// layout, PageSizes lists req.Shape.PageSize (empty: any); and k is
// Sparse exactly when req is (Dims.TopK > 0); k takes PrefixChunks where
// req asks for one (Shape.PrefixChunk), and QuerySplit where req does. An
// empty DTypes or HeadDims
// lists nothing. The host asks a plugin for a plan only where its catalog
// kernel for the method covers the request, and a planner may answer
// with this error itself. The error wraps ErrNoPlan and names the field
// and value no entry lists.
func (k Kernel) Covers(req *PlanRequest) error {
	no := func(format string, args ...any) error {
		return fmt.Errorf("%w: kernel %s %s", ErrNoPlan, k.Name, fmt.Sprintf(format, args...))
	}
	d := req.Dims
	switch {
	case k.Method != req.Method:
		return no("runs %s, not method %s", k.Method, req.Method)
	case !slices.Contains(k.DTypes, req.DType):
		return no("takes dtypes %v, not dtype %s", k.DTypes, req.DType)
	case req.KVDType != "" && !slices.Contains(k.DTypes, req.KVDType):
		return no("takes KV caches of %v, not kv_dtype %s", k.DTypes, req.KVDType)
	case !slices.Contains(k.HeadDims, d.HeadDimQK):
		return no("takes head dims %v, not dims.head_dim_qk %d", k.HeadDims, d.HeadDimQK)
	case !slices.Contains(k.HeadDims, d.HeadDimV):
		return no("takes head dims %v, not dims.head_dim_v %d", k.HeadDims, d.HeadDimV)
	case req.Method == MLA && len(k.PageSizes) > 0 && !slices.Contains(k.PageSizes, req.Shape.PageSize):
		return no("takes page sizes %v, not shape.page_size %d", k.PageSizes, req.Shape.PageSize)
	case d.TopK > 0 && !k.Sparse:
		return no("is dense, and the request is sparse (dims.top_k %d)", d.TopK)
	case d.TopK <= 0 && k.Sparse:
		return no("is sparse (DeepSeek sparse attention), and the request is dense (no dims.top_k)")
	case req.Shape.PrefixChunk && !k.PrefixChunks:
		return no("takes no prefix-chunk requests (shape.prefix_chunk: its catalog entry has no prefix_chunks)")
	case req.QuerySplit && !k.QuerySplit:
		return no("takes no split queries (query_split: its catalog entry has no query_split)")
	}
	return nil
}

// Kernel returns the catalog entry of h for m, and whether there is one.
func (h *HandlerInfo) Kernel(m Method) (Kernel, bool) {
	for _, k := range h.Kernels {
		if k.Method == m {
			return k, true
		}
	}
	return Kernel{}, false
}

// Catalog returns h's kernel catalog completed for every method h
// declares: its own kernels, then, for each declared method they do not
// cover, HostReferenceKernel. A catalog may cover a subset of the methods;
// the host runs the others. A handler without any catalog (a plugin that
// runs no kernels) gets nil.
func (h *HandlerInfo) Catalog() []Kernel {
	if len(h.Kernels) == 0 {
		return nil
	}
	out := slices.Clone(h.Kernels)
	for _, m := range h.Methods {
		if _, ok := h.Kernel(m); !ok {
			out = append(out, HostReferenceKernel(m))
		}
	}
	return out
}

// HasKernels reports whether any handler of d declares a kernel catalog.
func (d *Description) HasKernels() bool {
	return slices.ContainsFunc(d.Handlers, func(h HandlerInfo) bool { return len(h.Kernels) > 0 })
}

// KernelDims are the attention dimensions of a kernel call (DeepSeek MLA).
type KernelDims struct {
	// Heads is the number of attention heads.
	Heads int
	// KVLoraRank is the width of the compressed latent c_kv.
	KVLoraRank int
	// QKNopeHeadDim is the per-head width of the non-rotary part of q, k.
	QKNopeHeadDim int
	// QKRopeHeadDim is the width of the rotary part (even).
	QKRopeHeadDim int
	// VHeadDim is the per-head width of v and of the output.
	VHeadDim int
	// SoftmaxScale multiplies q·k before the softmax.
	SoftmaxScale float64
	// RopeBase is the rotary base theta.
	RopeBase float64
	// ChunkCapacity is the chunk capacity of MHA_CHUNKED_KV.
	ChunkCapacity int
	// TopK is the DSA indexer's top-k; 0 when the layer is dense.
	TopK int
}

// TensorRef locates one tensor of a kernel call in the shared buffer.
type TensorRef struct {
	// Name is the tensor's name: q_nope, q_pe, positions, c_kv, k_pe,
	// w_kc, w_vc, topk_indices or out.
	Name string
	// Offset is the tensor's first byte in the buffer.
	Offset int64
	// Shape is its row-major shape.
	Shape []int64
	// DType is "float32" or "int32".
	DType string
}

// SharedBuffer is the memory that holds a kernel call's tensors.
type SharedBuffer struct {
	// Path is what the callee opens to map the buffer: a file under
	// /dev/shm or a memfd's /proc/<pid>/fd/<n>.
	Path string
	// Size is the buffer's size in bytes.
	Size int64
	// Mem, in the caller's process only, is the buffer mapped; it never
	// crosses a process boundary. A KernelRunner in the same process uses
	// it instead of mapping Path.
	Mem []byte
}

// KernelRequest asks a backend to run the kernel of a method on tensors in
// shared memory. The tensors are never copied into the request: it names
// the buffer and gives the offsets, shapes and dtypes. q_pe and k_pe are
// given before RoPE; the kernel rotates them (inside the kernel for the
// fused-RoPE methods, before it for the others).
type KernelRequest struct {
	// Backend is the handler whose kernel runs (the dispatch answer's
	// Handler).
	Backend string
	// Method is the forward method to run.
	Method Method
	// Dims are the attention dimensions.
	Dims KernelDims
	// SeqLens and PrefixLens are the batch's seq_lens and
	// extend_prefix_lens; every request has at least one new token.
	SeqLens, PrefixLens []int64
	// Buffer holds the tensors.
	Buffer SharedBuffer
	// Tensors locate the inputs and the output ("out") in Buffer.
	Tensors []TensorRef
}

// KernelResult is what running a kernel did.
type KernelResult struct {
	// Kernel is the catalog name of the kernel that ran.
	Kernel string
	// Library is the library it stands for.
	Library string
	// Emulated reports that the kernel's math ran on the reference CPU
	// kernels instead of device code.
	Emulated bool
	// Sparse reports a kernel that attended only to the top-k positions.
	Sparse bool
	// TimeNS is how long the kernel ran, in nanoseconds.
	TimeNS int64
	// Note says more, such as why the kernel was emulated.
	Note string
}

// ErrNoKernel marks a kernel request that the backend cannot run: a
// plugin without kernels (older than the RunKernel RPC), or a method its
// catalog lacks.
var ErrNoKernel = errors.New("no kernel")

// KernelRunner is an optional ability of a Backend: it runs the kernels of
// its catalog (HandlerInfo.Kernels) on tensors in shared memory. Over the
// wire it is always present; a plugin without it answers every call with
// an error wrapping ErrNoKernel.
type KernelRunner interface {
	// RunKernel runs req.Method's kernel of the handler req.Backend, reading
	// the inputs from req.Buffer and writing the output there. It returns an
	// error wrapping ErrNoKernel when the catalog has no such kernel, and
	// ErrInvalidRequest for tensors that do not fit the dimensions.
	RunKernel(ctx context.Context, req *KernelRequest) (*KernelResult, error)
}

// TritonKernels is the kernel catalog of the triton rules: sglang's triton
// attention kernels for MHA and MLA, the fused-RoPE MLA decode kernel on
// ROCm, and sgl-kernel's AMX kernel on Intel CPUs.
func TritonKernels() []Kernel {
	dt := []string{"bf16", "fp16", "fp8_e4m3"}
	return []Kernel{
		{Name: "extend_attention_fwd", Library: LibTriton, Method: MHA, DTypes: dt, HeadDims: []int{192, 128}, PageSizes: []int{1}, CUDAGraph: false},
		{Name: "decode_attention_fwd", Library: LibTriton, Method: MLA, DTypes: dt, HeadDims: []int{576, 512}, PageSizes: []int{1}, CUDAGraph: true},
		{Name: "decode_attention_fwd_grouped_rope", Library: LibTriton, Method: MLAFusedRoPEROCm, DTypes: dt, HeadDims: []int{576, 512}, PageSizes: []int{1}, CUDAGraph: true,
			Hardware: []Hardware{{Platforms: []Platform{PlatformHIP}}}},
		{Name: "decode_attention_cpu", Library: LibSGLKernel, Method: MLAFusedRoPECPU, DTypes: []string{"bf16"}, HeadDims: []int{576, 512}, PageSizes: []int{1},
			Hardware: []Hardware{{Platforms: []Platform{PlatformCPU}, NeedsAMX: true}}},
	}
}

// maxKernelDim bounds every dimension so that products of dimensions cannot
// overflow int.
const maxKernelDim = 1 << 16

// Validate reports the first field of c that is out of range for the
// kernels: a *FieldError (errors.Is ErrInvalidRequest) naming the field
// as the plugin protocol's KernelDims and attnplug run's "tensors" object
// spell it ("heads", "softmax_scale", ...), and its value. A caller that
// holds the dims inside a message gives the error that message's path
// (the protocol's "dims", run's "tensors").
func (c KernelDims) Validate() error {
	dims := []struct {
		name string
		v    int
	}{
		{"heads", c.Heads},
		{"kv_lora_rank", c.KVLoraRank},
		{"qk_nope_head_dim", c.QKNopeHeadDim},
		{"qk_rope_head_dim", c.QKRopeHeadDim},
		{"v_head_dim", c.VHeadDim},
	}
	for _, d := range dims {
		if d.v <= 0 || d.v > maxKernelDim {
			return invalid(d.name, fmt.Sprintf("%d is outside [1, %d]", d.v, maxKernelDim))
		}
	}
	if c.QKRopeHeadDim%2 != 0 {
		return invalid("qk_rope_head_dim", fmt.Sprintf("%d is odd (RoPE rotates pairs)", c.QKRopeHeadDim))
	}
	if !(c.SoftmaxScale > 0) || math.IsInf(c.SoftmaxScale, 0) {
		return invalid("softmax_scale", fmt.Sprintf("%v: want a finite number > 0", c.SoftmaxScale))
	}
	if !(c.RopeBase > 1) || math.IsInf(c.RopeBase, 0) {
		return invalid("rope_base", fmt.Sprintf("%v: want a finite number > 1", c.RopeBase))
	}
	if c.ChunkCapacity <= 0 || c.ChunkCapacity > 1<<30 {
		return invalid("chunk_capacity", fmt.Sprintf("%d is outside [1, %d]", c.ChunkCapacity, 1<<30))
	}
	if c.TopK < 0 || c.TopK > maxKernelDim {
		return invalid("top_k", fmt.Sprintf("%d is outside [0, %d]", c.TopK, maxKernelDim))
	}
	return nil
}

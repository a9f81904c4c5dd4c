package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// Device execution: a plugin owns the device code of its kernels and the
// rules that launch it; the host loads that code into its own GPU context
// and launches it on device memory it owns. The split is FlashInfer's:
//
//  1. At start the host tells the plugin its device (DeviceInfo) and asks
//     for the plugin's KernelModules: device code (PTX or a cubin) with
//     its entry points and their typed parameters. The plugin compiles
//     them for that device (NVRTC) or ships them built. The host pins each
//     image by SHA-256 and loads it once.
//  2. Once per batch the host asks for a Plan (PlanRequest: handler,
//     method, batch shape, model dims, dtype, device). The plan lists the
//     launches (entry, grid, block, shared memory, arguments by name), the
//     metadata to upload once per batch (a split-KV work schedule, say) and
//     the workspace the launches need. The host checks the plan before use
//     and caches it by the request it answered.
//  3. Per layer the host launches the plan on its own tensors and stream:
//     no RPC, no host copy, no allocation, inside CUDA graphs too.
//
// Device code runs inside the host's GPU context, so it is trusted as a
// shared library is: it is pinned by hash with the plugin binary.

// ModuleFormat is the format of a kernel module's image.
type ModuleFormat string

// The module formats. The host loads the ones its platform's driver takes
// (ptx and cubin on CUDA); others are kept for other platforms.
const (
	FormatPTX   ModuleFormat = "ptx"
	FormatCUBIN ModuleFormat = "cubin"
	FormatHSACO ModuleFormat = "hsaco"
)

// ParamKind is the type of one kernel parameter, as the entry point takes
// it.
type ParamKind string

// The parameter kinds: a device pointer, 32- and 64-bit signed integers, a
// 32-bit float; and, for Hopper's kernels, a TMA descriptor (a CUtensorMap
// of 128 bytes the kernel takes by value, `const __grid_constant__
// CUtensorMap`) and a struct passed by value (`__grid_constant__ const
// Params`, as FlashMLA's and FlashAttention 3's kernels take theirs), of
// Param.Size bytes.
const (
	ParamPtr       ParamKind = "ptr"
	ParamI32       ParamKind = "i32"
	ParamI64       ParamKind = "i64"
	ParamF32       ParamKind = "f32"
	ParamTensorMap ParamKind = "tensormap"
	ParamStruct    ParamKind = "struct"
)

// TensorMapBytes is the size of a CUtensorMap.
const TensorMapBytes = 128

// MaxParamBytes bounds the parameters of one entry, all together (CUDA's
// classic limit on kernel parameters).
const MaxParamBytes = 4096

// Size returns the parameter's size in bytes, or 0 for an unknown kind and
// for ParamStruct, whose size is its Param's (Param.Bytes).
func (k ParamKind) Size() int {
	switch k {
	case ParamPtr, ParamI64:
		return 8
	case ParamI32, ParamF32:
		return 4
	case ParamTensorMap:
		return TensorMapBytes
	}
	return 0
}

// Param is one parameter of an entry point.
type Param struct {
	// Name is the parameter's name; a launch binds arguments by it.
	Name string
	// Kind is its type.
	Kind ParamKind
	// Size is a ParamStruct's size in bytes (sizeof the struct, padding
	// included); 0 for the other kinds.
	Size int
}

// Bytes returns the parameter's size in bytes: Size for a struct, the
// kind's size otherwise (0 when unknown).
func (p Param) Bytes() int {
	if p.Kind == ParamStruct {
		return p.Size
	}
	return p.Kind.Size()
}

// Align returns the parameter's alignment in the kernel's parameter
// space: 64 for a TMA descriptor, 8 for a struct (its fields are at most
// 8 bytes), the size otherwise.
func (p Param) Align() int {
	switch p.Kind {
	case ParamTensorMap:
		return 64
	case ParamStruct:
		return 8
	}
	return max(p.Kind.Size(), 1)
}

// Entry is one kernel entry point of a module.
type Entry struct {
	// Name is the symbol the driver looks up (extern "C" in CUDA C).
	Name string
	// Params are its parameters, IN THE EXACT ORDER OF THE KERNEL'S
	// SIGNATURE. A launch binds arguments by name, but the driver takes
	// them by position: a parameter declared out of order makes the
	// kernel read one argument as another. The host checks the count,
	// sizes and order against a PTX image's .entry signature
	// (launch.CheckEntries); two parameters of the same size swapped look
	// alike there.
	Params []Param
}

// KernelModule is device code a plugin hands the host.
type KernelModule struct {
	// Name names the module within its plugin, such as "mla_decode".
	Name string
	// Platform is the platform it runs on (PlatformCUDA).
	Platform Platform
	// Arch is the architecture the image targets, such as "sm_90a"; for
	// PTX the virtual one it was generated for ("compute_90a").
	Arch string
	// Format is the image's format. The entry signatures of a PTX image
	// are checked against Entries; a cubin's are not read.
	Format ModuleFormat
	// Image is the device code. PTX is text and need not end with a NUL
	// byte (the host adds one to load it); its .version (PTX ISA) must be
	// one the host's driver reads, no newer than the driver's CUDA
	// release.
	Image []byte
	// SHA256 is the hex SHA-256 of Image.
	SHA256 string
	// Entries are the module's entry points.
	Entries []Entry
	// Kernels names the catalog kernels (Kernel.Name) the module runs.
	Kernels []string
}

// ImageSHA256 returns the hex SHA-256 of an image, as KernelModule.SHA256
// holds it.
func ImageSHA256(image []byte) string {
	s := sha256.Sum256(image)
	return hex.EncodeToString(s[:])
}

// Entry returns the entry point named name.
func (m *KernelModule) Entry(name string) (Entry, bool) {
	for _, e := range m.Entries {
		if e.Name == name {
			return e, true
		}
	}
	return Entry{}, false
}

// DeviceInfo describes the device a host launches kernels on.
type DeviceInfo struct {
	// Platform is the device's platform.
	Platform Platform
	// Name is the device's name, such as "NVIDIA H200".
	Name string
	// ComputeCapability is major*10+minor (90 for Hopper).
	ComputeCapability int
	// SMs is the number of multiprocessors.
	SMs int
	// MaxThreadsPerBlock is the largest block.
	MaxThreadsPerBlock int
	// MaxSharedPerBlock is the most dynamic shared memory a block may use
	// after opting in, in bytes.
	MaxSharedPerBlock int
	// MaxGrid is the largest grid, per dimension.
	MaxGrid [3]int
}

// The bounds of a device's description (DeviceInfo.Check, with
// MaxComputeCapability): far above any GPU's, within what the protocols
// carry (int32 fields).
const (
	MaxDeviceNameBytes      = 256
	MaxDeviceSMs            = 4096
	MaxDeviceThreads        = 1 << 16
	MaxDeviceSharedPerBlock = 1 << 30
	MaxDeviceGrid           = 1<<31 - 1
)

// Check verifies d's fields against the bounds above, naming the field
// (device.compute_capability, ...) and its value: a host checks every
// device a caller describes before it asks a plugin for its modules or a
// plan, and an engine client before it sends one.
func (d DeviceInfo) Check() error {
	bad := func(field string, v, most int) error {
		return NewFieldError("device."+field, fmt.Sprintf("%d is outside [0, %d]", v, most))
	}
	switch {
	case len(d.Name) > MaxDeviceNameBytes:
		return NewFieldError("device.name", fmt.Sprintf("%d bytes, more than %d", len(d.Name), MaxDeviceNameBytes))
	case d.ComputeCapability < 0 || d.ComputeCapability > MaxComputeCapability:
		return bad("compute_capability", d.ComputeCapability, MaxComputeCapability)
	case d.SMs < 0 || d.SMs > MaxDeviceSMs:
		return bad("sms", d.SMs, MaxDeviceSMs)
	case d.MaxThreadsPerBlock < 0 || d.MaxThreadsPerBlock > MaxDeviceThreads:
		return bad("max_threads_per_block", d.MaxThreadsPerBlock, MaxDeviceThreads)
	case d.MaxSharedPerBlock < 0 || d.MaxSharedPerBlock > MaxDeviceSharedPerBlock:
		return bad("max_shared_per_block", d.MaxSharedPerBlock, MaxDeviceSharedPerBlock)
	}
	for i, g := range d.MaxGrid {
		if g < 0 || g > MaxDeviceGrid {
			return bad(fmt.Sprintf("max_grid[%d]", i), g, MaxDeviceGrid)
		}
	}
	return nil
}

// PlanShape is the batch a plan is for: request i has SeqLens[i] tokens of
// keys (its prefix and its new tokens) and QLens[i] new tokens (queries),
// the last QLens[i] of its keys. For MLA the keys live in sglang's paged
// cache (PageSize, NumPages); the MHA methods take ragged tensors.
type PlanShape struct {
	// SeqLens are the key lengths per request.
	SeqLens []int64
	// QLens are the query tokens per request (1 for decode, up to the
	// draft length for target verify).
	QLens []int64
	// PageSize is the KV cache's page size in tokens.
	PageSize int
	// NumPages is the number of pages of the KV cache.
	NumPages int
	// ChunkCapacity is the chunk capacity of MHA_CHUNKED_KV (sglang's
	// get_max_chunk_capacity()): each prefix chunk holds ChunkCapacity /
	// batch size keys of every request.
	ChunkCapacity int
	// MaxSeqLen, when set, is a bound the host declares on every request's
	// keys over the plan's life (a serving loop's longest context): no
	// SeqLens[i] exceeds it, now or in a later step the plan serves. A plan
	// asked with Graph depends on it instead of on SeqLens (the page table
	// holds ceil(MaxSeqLen/PageSize) pages per request), so that one plan
	// serves every step of a batch size. 0: none declared.
	MaxSeqLen int64
	// PrefixChunk asks, of MHA_CHUNKED_KV, for the pass over one prefix
	// chunk alone (sglang's attn_attend_prefix_cache call): every query
	// token of request i (QLens[i], the batch's new tokens) attends to
	// every one of the chunk's SeqLens[i] keys, with no causal mask, and
	// the plan writes that chunk's output and LSE, which the engine merges
	// (merge_state). SeqLens[i] may be 0, a request whose prefix ended
	// before the chunk: its rows get an LSE of -inf and a zero output. The
	// host asks for it only a kernel whose catalog entry says it takes
	// such requests (Kernel.PrefixChunks).
	PrefixChunk bool
}

// PlanDims are the model dimensions a plan is for.
type PlanDims struct {
	// Heads is the number of query heads (per GPU under tensor
	// parallelism).
	Heads int
	// HeadDimQK is the width of a query and a key row (576 for absorbed
	// MLA: kv_lora_rank 512 + rope 64).
	HeadDimQK int
	// HeadDimV is the width of a value row and of the output (512).
	HeadDimV int
	// SoftmaxScale multiplies q·k before the softmax.
	SoftmaxScale float64
	// TopK, for a sparse kernel (DeepSeek sparse attention), is how many
	// keys each query token attends to: the width of the indexer's top-k
	// (index_topk, 2048 for DeepSeek-V3.2). The plan's topk_indices tensor
	// has a row of TopK cache slots per query token. 0 for a dense kernel.
	TopK int
}

// PlanRequest asks a backend for the launches that run a method's kernel
// on one batch.
type PlanRequest struct {
	// Backend is the handler whose kernel runs.
	Backend string
	// Method is the forward method.
	Method Method
	// DType is the dtype of the queries and the output, and of the KV
	// cache unless KVDType says otherwise ("bf16").
	DType string
	// KVDType is the KV cache's dtype when it differs from DType:
	// "fp8_e4m3" for sglang's --kv-cache-dtype fp8_e4m3 (the MLA pool's
	// 576 e4m3 values per token with the layer's scale; for a sparse
	// kernel, the NSA pool's 656-byte tokens). Empty: DType.
	KVDType string
	// Dims are the model dimensions.
	Dims PlanDims
	// Shape is the batch.
	Shape PlanShape
	// Device is the device the plan runs on.
	Device DeviceInfo
	// Graph asks for a plan that holds for a batch size: its launches
	// (grids, blocks, arguments) do not depend on the lengths, so that one
	// CUDA graph captured for a batch size serves every step. Where the
	// kernels can read the lengths from the host's device tensors
	// (seq_lens, the page table) and Shape.MaxSeqLen is declared, the plan
	// has no metadata at all and declares so in Plan.Reads; otherwise only
	// its metadata changes with the lengths (launch's Prepared.Update).
	Graph bool
	// QuerySplit, of an MLA request, has the host bind the queries in
	// two parts, where DeepSeek's absorbed attention leaves them: q_nope,
	// the first HeadDimV columns of each query (the absorbing bmm's
	// output), and q_rope, the other HeadDimQK - HeadDimV (the rotated
	// part), each a strided view (TensorSpec.Strided), so that no copy
	// puts them together (launch.Tensors). The host asks for it only a
	// kernel whose catalog entry takes it (Kernel.QuerySplit).
	QuerySplit bool
}

// CacheDType returns the KV cache's dtype: KVDType, or DType when it is
// empty.
func (r *PlanRequest) CacheDType() string {
	if r.KVDType != "" {
		return r.KVDType
	}
	return r.DType
}

// PlanReads names the quantities of a plan request's shape that a plan
// depends on, besides what every plan depends on: the backend, method,
// dtype, dims and device, Graph, the batch size, the page size, the number
// of pages and MaxSeqLen. It is to plans what Reads is to answers: the
// host keeps a plan for every request that agrees with the one it answered
// on what it reads, and attnplug conform checks that the plan does not
// change within that key.
type PlanReads uint8

// The quantities a plan may read.
const (
	// PlanReadsDeclared marks a plan that declares what it reads: a plan
	// whose Reads lacks it (an older plugin's) reads everything.
	PlanReadsDeclared PlanReads = 1 << iota
	// PlanReadsSeqLens: the key lengths themselves.
	PlanReadsSeqLens
	// PlanReadsQLens: the query lengths (a target-verify plan's tensors
	// have sum(QLens) rows).
	PlanReadsQLens
	// PlanReadsChunkCapacity: the chunk capacity of MHA_CHUNKED_KV.
	PlanReadsChunkCapacity
	// PlanReadsAll is everything: what a plan that declares nothing reads.
	PlanReadsAll = PlanReadsDeclared | PlanReadsSeqLens | PlanReadsQLens | PlanReadsChunkCapacity
)

// Effective returns what r reads: r itself when declared, else everything.
func (r PlanReads) Effective() PlanReads {
	if r&PlanReadsDeclared == 0 {
		return PlanReadsAll
	}
	return r
}

// String lists the quantities r reads, as the keys of a plan cache: "all",
// or "batch" followed by those of seq_lens, q_lens and chunk_capacity.
func (r PlanReads) String() string {
	r = r.Effective()
	if r == PlanReadsAll {
		return "all"
	}
	out := "batch"
	for _, q := range []struct {
		bit  PlanReads
		name string
	}{{PlanReadsSeqLens, "seq_lens"}, {PlanReadsQLens, "q_lens"}, {PlanReadsChunkCapacity, "chunk_capacity"}} {
		if r&q.bit != 0 {
			out += "+" + q.name
		}
	}
	return out
}

// ArgKind says where a launch argument's value comes from.
type ArgKind string

// The argument kinds.
const (
	// ArgTensor is the device address of the host's tensor Name.
	ArgTensor ArgKind = "tensor"
	// ArgMeta is the device address of the plan's metadata buffer Name,
	// plus Offset bytes.
	ArgMeta ArgKind = "meta"
	// ArgWorkspace is the device address of the workspace plus Offset.
	ArgWorkspace ArgKind = "workspace"
	// ArgInt is the integer Int.
	ArgInt ArgKind = "int"
	// ArgFloat is the float Float.
	ArgFloat ArgKind = "float"
	// ArgTensorMap is a TMA descriptor the host encodes over its tensor
	// Name as Map describes, for each launch on the tensors bound then
	// (so that each layer of a captured graph keeps its own), for a
	// ParamTensorMap.
	ArgTensorMap ArgKind = "tensormap"
	// ArgStruct is a struct of Fields, for a ParamStruct: bytes not
	// covered by a field are zero.
	ArgStruct ArgKind = "struct"
	// ArgStride is the stride, in elements, of dimension Dim of the
	// host's tensor Name as bound at the launch: for a strided tensor
	// (TensorSpec.Strided), what the kernel needs to find its rows; for
	// another, the stride of its row-major shape. An i64.
	ArgStride ArgKind = "stride"
)

// TensorMap describes the TMA descriptor of an ArgTensorMap: a tiled view
// of one of the plan's tensors that the kernel loads Box at a time
// (cuTensorMapEncodeTiled).
type TensorMap struct {
	// View is the shape the kernel sees, outermost first, of the same
	// elements as the tensor (row-major, the same count), such as a paged
	// cache [pages, page_size, 576] viewed as [pages*page_size, 576];
	// empty: the tensor's own shape. At most 5 dimensions.
	View []int64
	// Box is the tile one TMA load brings, per dimension of the view,
	// outermost first; each in [1, 256] and at most the dimension.
	Box []uint32
	// Swizzle is the shared-memory swizzle: "" (none), "32B", "64B" or
	// "128B"; the box's innermost row must fit in it.
	Swizzle string
	// L2Promotion is the L2 sector promotion: "" (none), "64B", "128B" or
	// "256B".
	L2Promotion string
	// OOBNaN fills elements outside the tensor with NaN instead of zero
	// (floating-point tensors only).
	OOBNaN bool
}

// Field is one field of an ArgStruct.
type Field struct {
	// Offset is the field's byte offset in the struct, a multiple of
	// Size.
	Offset uint32
	// Size is its size: 8 for an address (ArgTensor, ArgMeta,
	// ArgWorkspace) and an ArgStride, 4 or 8 for ArgInt and ArgFloat.
	Size uint32
	// Arg is its value: a tensor, metadata or workspace address, an
	// integer or a float (Arg.Param unused).
	Arg Arg
}

// Arg binds one parameter of a launch.
type Arg struct {
	// Param is the parameter's name.
	Param string
	// Kind says where the value comes from.
	Kind ArgKind
	// Name is the tensor or metadata buffer (ArgTensor, ArgMeta,
	// ArgTensorMap, ArgStride).
	Name string
	// Dim is the dimension of an ArgStride, outermost 0.
	Dim int
	// Offset is added to a metadata or workspace address, in bytes.
	Offset int64
	// Int is the value of an ArgInt.
	Int int64
	// Float is the value of an ArgFloat.
	Float float64
	// Map describes an ArgTensorMap's descriptor.
	Map *TensorMap
	// Fields are an ArgStruct's fields.
	Fields []Field
}

// Launch is one kernel launch of a plan.
type Launch struct {
	// Module and Entry name the entry point.
	Module, Entry string
	// Grid and Block are the launch dimensions.
	Grid, Block [3]uint32
	// SharedBytes is the dynamic shared memory per block.
	SharedBytes uint32
	// Args bind every parameter of the entry, by name.
	Args []Arg
	// PerBatch marks a launch whose work depends on the batch and not on
	// a layer (a scheduler that reads seq_lens and writes the work items
	// into the workspace): a host that runs one batch through many layers
	// may run it once per batch, before the layers' launches (launch's
	// Prepared.LaunchBatch and LaunchLayer); running it again per layer is
	// correct too. It reads only tensors that every layer shares.
	PerBatch bool
	// Cluster, when set, launches thread-block clusters of these
	// dimensions (sm_90 and newer): each divides the grid's, and a
	// cluster has at most 8 blocks. Zero: no clusters.
	Cluster [3]uint32
	// Programmatic lets the launch begin before the plan's previous launch
	// on the stream ends (programmatic dependent launch, sm_90 and newer),
	// so that its prologue overlaps the other's tail: the kernel must wait
	// (griddepcontrol.wait, cudaGridDependencySynchronize) before it reads
	// what the previous launch writes.
	Programmatic bool
}

// TensorSpec is a tensor the host binds to a plan.
type TensorSpec struct {
	// Name is the tensor's name, one of the layout's (launch.Tensors): q,
	// kv_cache, kv_indptr, kv_indices, seq_lens, qo_indptr, out, lse (and
	// kv_scale for an FP8 cache) for MLA; q, kv_cache, topk_indices, out,
	// lse for sparse MLA; q, k, v (k_prefix, v_prefix), out, lse for the
	// MHA methods.
	Name string
	// DType is its element type: bf16, f32 or i32.
	DType string
	// Shape is its row-major shape.
	Shape []int64
	// Output reports that the launches write it.
	Output bool
	// Strided reports a tensor the host may bind as a view of other
	// memory: its last dimension contiguous, every other stride any
	// non-negative multiple of 16 bytes, its address 16-byte aligned. Its
	// launches read its strides (ArgStride); the others are contiguous.
	Strided bool
}

// Bytes returns the tensor's size in bytes, or -1 for an unknown dtype or
// a negative or overflowing shape.
func (t TensorSpec) Bytes() int64 {
	es := DTypeSize(t.DType)
	if es == 0 {
		return -1
	}
	n := int64(es)
	for _, d := range t.Shape {
		if d < 0 || (d > 0 && n > (1<<62)/d) {
			return -1
		}
		n *= d
	}
	return n
}

// DTypeSize returns the size of one element of dtype, or 0 when unknown.
func DTypeSize(dtype string) int {
	switch dtype {
	case "fp8_e4m3", "fp8_e5m2":
		return 1
	case "bf16", "fp16":
		return 2
	case "f32", "i32":
		return 4
	case "i64", "f64":
		return 8
	}
	return 0
}

// MetaBuffer is plan metadata the host uploads to device memory once per
// batch: int32 values, such as a split-KV work schedule.
type MetaBuffer struct {
	// Name names the buffer for ArgMeta.
	Name string
	// Int32s are its contents.
	Int32s []int32
}

// WorkItem is one unit of a split-KV schedule: queries of one request
// over the keys [KVBegin, KVEnd). The host checks every item against the
// batch, so no schedule can make a kernel read past a request's keys.
type WorkItem struct {
	// Request is the request's index in the batch.
	Request int32
	// KVBegin and KVEnd are the key range, within the request's SeqLen.
	KVBegin, KVEnd int32
	// Split is the index of this partial result among the request's.
	Split int32
}

// Plan is the launches that run one method's kernel on one batch. It
// states the request it was made for through its Tensors (the layout of
// that request: dtypes and shapes) and the tensors its launches bind.
type Plan struct {
	// Kernel is the catalog name of the kernel the plan runs.
	Kernel string
	// Tensors are the tensors the host binds, with the shapes this batch
	// gives them: exactly the request's layout (launch.Tensors). Every
	// one that holds the batch's data is bound by some launch (kv_scale
	// of an FP8 cache, topk_indices of a sparse layer among them); only
	// kv_indptr, seq_lens and qo_indptr, which restate the batch's shape,
	// may be left to the plan's metadata.
	Tensors []TensorSpec
	// Metadata are uploaded once per batch.
	Metadata []MetaBuffer
	// Schedule, when set, is the split-KV schedule the plan's "schedule"
	// metadata buffer encodes (four int32 per item: request, kv_begin,
	// kv_end, split), for the host to check.
	Schedule []WorkItem
	// WorkspaceBytes is the device scratch memory the launches use.
	WorkspaceBytes int64
	// Launches run in order on one stream.
	Launches []Launch
	// Reads says what of the request's shape the plan depends on; zero
	// (undeclared) is everything. A plan that holds for a batch size
	// declares PlanReadsDeclared (with PlanReadsQLens where its tensors'
	// shapes follow the query lengths).
	Reads PlanReads
	// Note describes the plan's choices (tile, splits), for people.
	Note string
	// ModuleSHA256 is, by module name, the SHA-256 of each module image
	// the host's registry checked the plan against (set there, not by a
	// plugin): a host prepares the plan only with those images loaded.
	ModuleSHA256 map[string]string
}

// ErrNoPlan marks a plan request the backend cannot answer: a backend
// without device code, or a method, dtype or shape its kernels do not
// cover. The host then runs the kernel another way.
var ErrNoPlan = errors.New("no device plan")

// KernelPlanner is an optional ability of a Backend: it hands the host
// device code and plans launches of it. Over the wire a plugin advertises
// it in its description (Description.DeviceCode), since a type assertion
// on a remote client always succeeds.
type KernelPlanner interface {
	// KernelModules returns the backend's device code for dev, built or
	// chosen for its architecture. The host calls it once per device,
	// before any plan; it may compile and take seconds. An error wrapping
	// ErrNoPlan means the backend has no device code for dev.
	KernelModules(ctx context.Context, dev DeviceInfo) ([]KernelModule, error)
	// PlanKernel returns the launches that run req.Method's kernel of the
	// handler req.Backend on req's batch. It is called once per batch
	// shape (the host caches plans), concurrently; it must not keep req.
	// The host calls it only where the handler's catalog kernel for the
	// method covers req (Kernel.Covers), and checks that the plan is made
	// for req: the tensors of its layout, and launches that read what
	// makes req what it is (an FP8 cache's kv_scale, a sparse layer's
	// topk_indices). An error wrapping ErrNoPlan means the kernel has no
	// device plan for req; ErrInvalidRequest, that req is malformed.
	PlanKernel(ctx context.Context, req *PlanRequest) (*Plan, error)
}

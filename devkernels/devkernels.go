package devkernels

import (
	_ "embed"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
)

// MLADecodeSource is the CUDA C source of the absorbed-MLA decode kernels
// (dense and sparse, bf16 and FP8 caches) and their combine kernel (after
// TileHeader).
//
//go:embed mla_decode.cu
var MLADecodeSource string

// MLADecodeSM90Source is the CUDA C source of the same decode kernels on
// Hopper's own data path (wgmma, TMA, sm_90a), for 64 and 16 query rows per
// block.
//
//go:embed mla_decode_sm90.cu
var MLADecodeSM90Source string

// MLACommonSource is what both decode modules share (the cache formats,
// the work items, the tile loaders, the FP8 dequantisation, the entry
// points' parameters), compiled before each.
//
//go:embed mla_common.cuh
var MLACommonSource string

// TileHeader is the tile helpers every kernel source is compiled with.
//
//go:embed tile.cuh
var TileHeader string

// SM90Header is wgmma's primitives, mbarriers and TMA loads, compiled
// after TileHeader into the modules built for sm_90a.
//
//go:embed sm90.cuh
var SM90Header string

// The module and its entries.
const (
	ModuleMLADecode = "mla_decode"
	// ModuleMLADecodeSM90 is the decode on wgmma, built for sm_90a alone
	// and handed only to a device of compute capability 9.0.
	ModuleMLADecodeSM90 = "mla_decode_sm90"
	EntryCombine        = "mla_combine"
	EntryCombineRows    = "mla_combine_rows"
	EntrySchedule       = "mla_schedule"
	EntryScheduleSplit  = "mla_schedule_split"
)

// Tile constants of mla_decode.cu (keep in step with its #defines).
const (
	mlaBN      = 32
	mlaThreads = 256
	mlaDQK     = 576
	mlaDV      = 512
	qStride    = mlaDQK + 8
	pStride    = mlaBN + 8
	// partBytes is the size of an element of a split item's partial output
	// (part_o: bf16, written by tile.cuh's quad_store16 and read by its
	// part_load4); its LSE (part_lse) is fp32.
	partBytes = 2
)

// decodeVariant is one decode body: rows per block, pipeline stages and
// blocks per multiprocessor (keep in step with the entries of
// mla_decode.cu), in each of the four forms.
type decodeVariant struct {
	suffix              string
	rows, stages, perSM int
	wide                bool // mla_decode_wide: 64-key tiles, swizzled, unpadded
	hopper              bool // mla_decode_wg (mla_decode_sm90.cu): the wide shapes on wgmma
	// fullCost is an item's cost beyond its key tiles, in tiles, in the
	// cut of a batch that fills the slots (decodeShape.costOf): the
	// queries' load before the first tile and the epilogue after the last,
	// which a slot of several items pays once each. Measured for the
	// Hopper bodies (an H100 sweep of 1-24 at 16 and 128 heads,
	// docs/bench/h100-2026-12-07-cm.md: the ragged batches ran fastest at
	// 4 and 8-12, the batches of equal requests alike at any); the others
	// keep itemCost.
	fullCost int
}

var decodeVariants = [...]decodeVariant{
	{"m16", 16, 2, 2, false, false, itemCost},
	{"m32", 32, 4, 1, false, false, itemCost},
	{"m64", 64, 2, 1, true, false, itemCost},
}

// hopperVariant replaces the 64-row variant on a GPU of compute capability
// 9.0: two warpgroups on wgmma, 64-key tiles in two stages (measured on an
// H200 at 128 heads: 2.0x the mma.sync body's throughput).
var hopperVariant = decodeVariant{"wg64", 64, 2, 1, true, true, 8}

// hopperNarrow is the 16-row body on wgmma: the transposed products
// (S^T = K Q^T, O^T = V^T P^T), one computing warpgroup, 64-key tiles in
// two stages. Its 166 KB of shared memory hold one block per
// multiprocessor where the mma.sync body holds two, and a block streams
// twice as fast; it replaces the 16-row variant in every form. Measured on
// an H200 (2026-12-04 09:36 UTC, one build after the other in one run,
// batches cut into one wave): 1.17x and 1.30x the mma.sync body at 16
// heads and batch 16 (4096 and 16384 cached), 1.25x with an FP8 cache.
var hopperNarrow = decodeVariant{"wg16", 16, 2, 1, false, true, 4}

// hopperSeesaw is the 64-row body as a seesaw (mla_decode_ss): each
// warpgroup the whole S of every other tile and half of O, its own P
// straight from registers into its P V, one warpgroup's softmax under the
// other's products, masks only on the tiles that need them. It runs every
// form for batches of two requests or more (an FP8 tile converted in place
// by the warpgroup that owns it); a single request keeps hopperVariant.
// Measured on an H100 at 128 heads (2026-12-06, NVRTC builds of both, best
// of two): 0.83-0.93x hopperVariant's time at batch 16-128 and on the
// ragged batch, 0.95x at batch 1 with 16384 keys, but 1.05-1.09x at batch
// 1 with 4096, whose items are a tile or two: one pair of tiles is the
// seesaw's step, and a single one runs padded. Over an FP8 cache (best of
// three): 0.78x its time on the dense batch of 64, 0.64-0.79x on the
// sparse batches of 16-128 tokens.
var hopperSeesaw = decodeVariant{"ss64", 64, 2, 1, true, true, 8}

// seesawForms are the forms hopperSeesaw has entries for.
var seesawForms = []decodeForm{formDense, formDenseFP8, formSparse, formSparseFP8}

// hopperCC is the compute capability whose own instructions (sm_90a) the
// Hopper module uses: its code runs on no other.
const hopperCC = 90

// variantsFor returns the decode variants of form f on a device of compute
// capability cc for a batch of the given requests.
func variantsFor(f decodeForm, cc, batch int) [len(decodeVariants)]decodeVariant {
	vs := variants(f)
	if cc == hopperCC {
		vs[len(vs)-1] = hopperVariant
		if batch > 1 && slices.Contains(seesawForms, f) {
			vs[len(vs)-1] = hopperSeesaw
		}
		vs[0] = hopperNarrow
	}
	return vs
}

// module is the module of the variant's entries.
func (v decodeVariant) module() string {
	if v.hopper {
		return ModuleMLADecodeSM90
	}
	return ModuleMLADecode
}

// variants returns the decode variants of form f: the dense FP8 cache's
// 16-row variant keeps three stages in flight, still two blocks per
// multiprocessor (its tiles are half a bf16 one; measured on an H200 as
// fast as two stages). DeepSeek-V3.2's 656-byte tokens keep two: three
// would not fit twice, and five in one block measured 1.3x slower (keep in
// step with the entries of mla_decode.cu).
func variants(f decodeForm) [len(decodeVariants)]decodeVariant {
	vs := decodeVariants
	if f == formDenseFP8 {
		vs[0].stages = 3
	}
	return vs
}

// decodeForm is the key source and cache format of a decode entry.
type decodeForm int

// The forms: dense over the paged cache, or sparse over each query token's
// top-k slots; a bf16 cache, or an FP8 one (dense: 576 e4m3 per token and
// the layer's scale; sparse: DeepSeek-V3.2's 656-byte tokens).
const (
	formDense decodeForm = iota
	formDenseFP8
	formSparse
	formSparseFP8
	numForms
)

var formPrefixes = [numForms]string{"mla_decode_", "mla_decode_fp8_", "mla_sparse_", "mla_sparse_fp8_"}

func (f decodeForm) sparse() bool { return f == formSparse || f == formSparseFP8 }

// DSARowBytes is the size of a token of DeepSeek-V3.2's FP8 latent cache
// (sglang's NSA pool in fp8_e4m3, FlashMLA's sparse FP8 layout): 512 e4m3
// values, 4 float32 scales (one per 128 of them) and the 64 rope values in
// bf16.
const DSARowBytes = mlaDV + 4*(mlaDV/128) + 2*(mlaDQK-mlaDV)

func (v decodeVariant) entry(f decodeForm) string { return formPrefixes[f] + v.suffix }

// mlaKernelNames are the catalog kernels the MLA decode module runs: the
// absorbed MLA decode of FlashAttention 3, FlashInfer and FlashMLA (dense),
// and FlashMLA's sparse MLA of DeepSeek sparse attention (dsa).
var mlaKernelNames = []string{"flash_attn_with_kvcache", "BatchMLAPagedAttentionWrapper", "flash_mla_with_kvcache"}

// sparseKernelNames are the sparse catalog kernels the module runs.
var sparseKernelNames = []string{"flash_mla_sparse_fwd"}

func decodeParams(f decodeForm) []core.Param {
	p := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamPtr} }
	i32 := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamI32} }
	common := []core.Param{p("out"), p("lse"), p("schedule"), p("requests"), p("counts"), p("slots"), p("part_o"), p("part_lse"), i32("heads")}
	f32 := core.Param{Name: "scale_log2", Kind: core.ParamF32}
	i64 := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamI64} }
	// The queries (MLA_Q_PARAMS: QView's fields).
	q := []core.Param{p("q_nope"), p("q_rope"), i64("q_nope_t"), i64("q_nope_h"), i64("q_rope_t"), i64("q_rope_h"), i32("q_rope_col")}
	if f.sparse() {
		ps := slices.Concat(q, []core.Param{p("kv_cache"), p("topk_indices")}, common)
		return append(ps, i32("topk"), i64("num_slots"), f32, i32("head_blocks"))
	}
	ps := append(q, p("kv_cache"), p("kv_indptr"), p("kv_indices"))
	if f == formDenseFP8 {
		ps = append(ps, p("kv_scale"))
	}
	ps = append(ps, common...)
	return append(ps, i32("page_shift"), f32, i32("head_blocks"))
}

func scheduleParams() []core.Param {
	p := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamPtr} }
	i := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamI32} }
	return []core.Param{p("seq_lens"), p("qo_indptr"), p("schedule"), p("requests"), p("counts"), p("slots"),
		i("batch"), i("heads"), i("capacity"), i("nslots"), i("item_cost"), i("full_cost")}
}

func scheduleSplitParams() []core.Param {
	ps := scheduleParams()
	p := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamPtr} }
	return slices.Concat(ps[:2], []core.Param{p("kv_indptr"), p("split"), p("work_indptr")}, ps[2:])
}

func combineParams() []core.Param {
	p := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamPtr} }
	return []core.Param{p("out"), p("lse"), p("requests"), p("part_o"), p("part_lse"),
		{Name: "heads", Kind: core.ParamI32}, {Name: "batch", Kind: core.ParamI32}}
}

// Spec returns the modules this package builds without their images: the
// names, entries and parameters a plan refers to (for checking plans
// where nothing is compiled).
func Spec() []core.KernelModule {
	entries := make([]core.Entry, 0, int(numForms)*len(decodeVariants)+3)
	for f := range numForms {
		for _, v := range variants(f) {
			entries = append(entries, core.Entry{Name: v.entry(f), Params: decodeParams(f)})
		}
	}
	entries = append(entries, core.Entry{Name: EntryCombine, Params: combineParams()},
		core.Entry{Name: EntryCombineRows, Params: append(combineParams(), core.Param{Name: "max_rows", Kind: core.ParamI32})},
		core.Entry{Name: EntrySchedule, Params: scheduleParams()}, core.Entry{Name: EntryScheduleSplit, Params: scheduleSplitParams()})
	hopper := make([]core.Entry, 0, 2*int(numForms)+len(seesawForms))
	for _, v := range []decodeVariant{hopperVariant, hopperNarrow} {
		for f := range numForms {
			hopper = append(hopper, core.Entry{Name: v.entry(f), Params: decodeParams(f)})
		}
	}
	for _, f := range seesawForms {
		hopper = append(hopper, core.Entry{Name: hopperSeesaw.entry(f), Params: decodeParams(f)})
	}
	kernels := slices.Concat(mlaKernelNames, sparseKernelNames)
	return []core.KernelModule{
		{Name: ModuleMLADecode, Platform: core.PlatformCUDA, Entries: entries, Kernels: kernels},
		prefillSpec(),
		{Name: ModuleMLADecodeSM90, Platform: core.PlatformCUDA, Entries: hopper, Kernels: kernels},
		prefillSM90Spec(),
	}
}

// hopperOnly reports whether module name is built from sm_90a's own
// instructions (wgmma), which run on compute capability 9.0 alone.
func hopperOnly(name string) bool {
	return name == ModuleMLADecodeSM90 || name == ModuleMHAPrefillSM90
}

// specFor returns the modules of Spec that a device of compute capability
// cc runs: all but the Hopper modules, which only compute capability 9.0
// does.
func specFor(cc int) []core.KernelModule {
	mods := Spec()
	if cc != hopperCC {
		mods = slices.DeleteFunc(mods, func(m core.KernelModule) bool { return hopperOnly(m.Name) })
	}
	return mods
}

// virtualArch is the architecture module name is compiled for on a device
// of compute capability cc: compute_90a for the Hopper modules, else the
// device's own.
func virtualArch(name string, cc int) string {
	if hopperOnly(name) {
		return fmt.Sprintf("compute_%da", hopperCC)
	}
	return fmt.Sprintf("compute_%d", cc)
}

// Plan returns the launches that run kernel k (an entry of a handler's
// catalog) on req's batch. It wraps core.ErrNoPlan for a kernel, method,
// dtype, page size or dimensions without device code, and
// core.ErrInvalidRequest for a malformed request.
func Plan(k core.Kernel, req *core.PlanRequest) (*core.Plan, error) {
	if k.Method != req.Method {
		return nil, fmt.Errorf("%w: kernel %s runs %s, not %s", core.ErrNoPlan, k.Name, k.Method, req.Method)
	}
	names := mlaKernelNames
	qk, v := mlaDQK, mlaDV
	switch {
	case k.Sparse:
		names = sparseKernelNames
	case req.Method != core.MLA:
		names, qk, v = mhaKernelNames, prefillDQK, prefillDV
	}
	if !slices.Contains(names, k.Name) {
		return nil, fmt.Errorf("%w: kernel %s (%s) has no device code", core.ErrNoPlan, k.Name, k.Method)
	}
	tensors, err := launch.Tensors(req)
	if err != nil {
		return nil, err
	}
	if err := covers(k, req, qk, v); err != nil {
		return nil, err
	}
	shared, err := Kernels.Shared(req.Device.ComputeCapability)
	if err != nil {
		return nil, err
	}
	if req.Method != core.MLA {
		p, err := planPrefill(req, tensors, shared)
		if err != nil {
			return nil, err
		}
		p.Kernel = k.Name
		return p, nil
	}
	form := formDense
	if req.CacheDType() == "fp8_e4m3" {
		form = formDenseFP8
	}
	var p *core.Plan
	switch {
	case k.Sparse:
		p, err = planSparse(req, form+formSparse, shared)
	case onDevice(req):
		p, err = planDecodeGraph(req, form, shared)
	default:
		p, err = planDecode(req, form, shared)
	}
	if err != nil {
		return nil, err
	}
	p.Kernel = k.Name
	p.Tensors = tensors
	return p, nil
}

// covers checks what of req kernel k's device code serves: the dtypes, the
// head dims, the device, the page size, a top-k for a sparse kernel and
// none for a dense one. The error wraps core.ErrNoPlan and names what is
// missing.
func covers(k core.Kernel, req *core.PlanRequest, qk, v int) error {
	kvd := req.CacheDType()
	fp8OK := req.Method == core.MLA
	switch {
	case req.DType != "bf16":
		return fmt.Errorf("%w: dtype %s (the device kernels take bf16 queries and outputs)", core.ErrNoPlan, req.DType)
	case kvd != "bf16" && !(kvd == "fp8_e4m3" && fp8OK):
		what := "bf16 or fp8_e4m3 caches"
		if !fp8OK {
			what = "bf16 keys and values"
		}
		return fmt.Errorf("%w: KV cache dtype %s (the device kernels of %s take %s)", core.ErrNoPlan, kvd, req.Method, what)
	case len(k.DTypes) > 0 && !slices.Contains(k.DTypes, kvd):
		return fmt.Errorf("%w: %s takes KV caches of %v, not %s", core.ErrNoPlan, k.Name, k.DTypes, kvd)
	case req.Dims.HeadDimQK != qk || req.Dims.HeadDimV != v:
		return fmt.Errorf("%w: head dims %d/%d (the device kernels of %s take %d/%d)", core.ErrNoPlan, req.Dims.HeadDimQK, req.Dims.HeadDimV, req.Method, qk, v)
	case req.Device.Platform != core.PlatformCUDA || req.Device.ComputeCapability < 80:
		return fmt.Errorf("%w: the device kernels need CUDA compute capability 8.0 or newer", core.ErrNoPlan)
	case k.Sparse && req.Dims.TopK < 1:
		return fmt.Errorf("%w: %s is sparse and the request gives no dims.top_k", core.ErrNoPlan, k.Name)
	case !k.Sparse && req.Dims.TopK > 0:
		return fmt.Errorf("%w: %s is dense and the request gives dims.top_k %d (a sparse layer)", core.ErrNoPlan, k.Name, req.Dims.TopK)
	}
	if req.Method != core.MLA {
		return nil
	}
	switch ps := req.Shape.PageSize; {
	case !k.Sparse && ps&(ps-1) != 0:
		return fmt.Errorf("%w: page size %d is not a power of two", core.ErrNoPlan, ps)
	case len(k.PageSizes) > 0 && !slices.Contains(k.PageSizes, ps):
		return fmt.Errorf("%w: %s takes page sizes %v, not %d", core.ErrNoPlan, k.Name, k.PageSizes, ps)
	}
	return nil
}

// planSparse plans the sparse decode (and sparse prefill: the same math,
// each new token over its own top-k): every query token is one request of
// TopK keys (its topk_indices row), cut into items as planDecode cuts a
// dense batch. The plan depends only on the number of query tokens, so it
// holds for a batch size and, with Graph, for every step of it.
func planSparse(req *core.PlanRequest, form decodeForm, shared layouts) (*core.Plan, error) {
	var tokens int64
	for _, q := range req.Shape.QLens {
		tokens += q
	}
	sub := *req
	sub.Shape.SeqLens = slices.Repeat([]int64{int64(req.Dims.TopK)}, int(tokens))
	sub.Shape.QLens = slices.Repeat([]int64{1}, int(tokens))
	p, err := planDecode(&sub, form, shared)
	if err != nil {
		return nil, err
	}
	p.Reads = core.PlanReadsDeclared | core.PlanReadsQLens
	p.Note = fmt.Sprintf("sparse over top-%d, %d token(s): %s", req.Dims.TopK, tokens, strings.TrimPrefix(p.Note, "mla decode: "))
	return p, nil
}

// onDevice reports whether req's decode is scheduled on the device: a
// graph request with a declared bound on the lengths, whose plan holds for
// the batch size (and query lengths), the schedule computed by
// mla_schedule from seq_lens and qo_indptr at each step; and any dense
// request with more query tokens than a work request holds (a long
// extend), whose work requests mla_schedule_split cuts.
func onDevice(req *core.PlanRequest) bool {
	if req.Dims.TopK != 0 {
		return false
	}
	return req.Graph && req.Shape.MaxSeqLen > 0 || slices.ContainsFunc(req.Shape.QLens, func(q int64) bool { return q > launch.MaxQLen })
}

// decodeShape is what a decode plan's launches follow: the variant for the
// rows of a request's queries, its head blocks, the slots that fit the GPU
// at once and the items the grid has room for.
type decodeShape struct {
	v                  decodeVariant
	form               decodeForm
	shared             int // the entry's dynamic shared memory
	maxRows, hb, slots int
	capacity, batch    int
	itemCost, fullCost int // an item's cost beyond its key tiles, in tiles (costOf)
}

// entry is the decode entry ds's launches run.
func (ds decodeShape) entry() string { return ds.v.entry(ds.form) }

// partialRows bounds the partial rows of any lengths of the batch size:
// items number at most capacity = batch + slots, so the requests cut into
// several items have at most slots extra items, and at most 2*slots items
// in all, each of at most maxRows rows.
func (ds decodeShape) partialRows() int64 {
	return int64(min(ds.capacity, 2*ds.slots)) * int64(ds.maxRows)
}

func shapeOf(req *core.PlanRequest, form decodeForm, shared layouts) (decodeShape, error) {
	s, d := req.Shape, req.Dims
	var maxQ int64
	for _, q := range s.QLens {
		maxQ = max(maxQ, q)
	}
	vs := variantsFor(form, req.Device.ComputeCapability, len(s.SeqLens))
	ds := decodeShape{maxRows: int(maxQ) * d.Heads, batch: len(s.SeqLens), v: vs[0], form: form}
	// The narrowest variant that holds a request's rows, of those whose
	// shared memory the device has (an A100's 164 KB hold no 64-row one,
	// a consumer card's 99 KB only the 16-row one); else the widest that
	// fits, over more head blocks.
	for _, c := range vs {
		n, ok := shared[c.entry(form)]
		if !ok {
			return ds, fmt.Errorf("%w: the device code gives no shared memory of %s (make device-code)", core.ErrNoPlan, c.entry(form))
		}
		if n > req.Device.MaxSharedPerBlock && req.Device.MaxSharedPerBlock > 0 {
			continue
		}
		ds.v, ds.shared = c, n
		if ds.maxRows <= c.rows {
			break
		}
	}
	if ds.shared == 0 {
		ds.shared = shared[ds.v.entry(form)]
	}
	ds.hb = (ds.maxRows + ds.v.rows - 1) / ds.v.rows
	ds.slots = max(max(req.Device.SMs, 1)*ds.v.perSM/ds.hb, 1)
	ds.capacity = ds.batch + ds.slots
	ds.itemCost, ds.fullCost = itemCost, ds.v.fullCost
	return ds, nil
}

// planDecodeGraph is planDecode for a plan that holds for a batch size:
// the same kernels over a grid of capacity items, with the schedule, the
// per-request metadata, the item count and the slot starts written into
// the workspace by mla_schedule at each step (a PerBatch launch), from the
// host's seq_lens and qo_indptr, exactly as planDecode cuts them.
//
// A batch with a request of more query tokens than a decode block's rows
// take (launch.MaxQLen: a long absorbed-MLA extend) is scheduled over its
// work requests (splitQueries) by mla_schedule_split, which also writes
// each work request's page-table offset for the decode to read as its
// kv_indptr. Such a plan is made for any request that needs it, a graph
// one or not; one without a graph's bound (launch.PagesPerRequest) also
// reads the key lengths (its page table's size follows them).
func planDecodeGraph(req *core.PlanRequest, form decodeForm, shared layouts) (*core.Plan, error) {
	split, workQ := splitQueries(req.Shape.QLens)
	work := req
	if split != nil {
		w := *req
		w.Shape.QLens, w.Shape.SeqLens = workQ, workQ
		work = &w
	}
	ds, err := shapeOf(work, form, shared)
	if err != nil {
		return nil, err
	}
	d := req.Dims
	align := func(n int64) int64 { return (n + 255) &^ 255 }
	partRows := ds.partialRows()
	partO := partRows * mlaDV * partBytes
	offLSE := align(partO)
	offSched := align(offLSE + partRows*4)
	offReqs := align(offSched + int64(ds.capacity)*16)
	offCounts := align(offReqs + int64(ds.batch)*32)
	offSlots := align(offCounts + 16)
	offWork := align(offSlots + int64(ds.capacity+1)*4)
	total := offWork
	buf := decodeBuffers{
		schedule: wsArg("schedule", offSched), requests: wsArg("requests", offReqs),
		counts: wsArg("counts", offCounts), slots: wsArg("slots", offSlots),
		partO: wsArg("part_o", 0), partLSE: wsArg("part_lse", offLSE), kvIndptr: tensorArg("kv_indptr"),
	}
	sched := core.Launch{
		Module: ModuleMLADecode, Entry: EntrySchedule, PerBatch: true,
		Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{schedThreads, 1, 1},
		Args: []core.Arg{tensorArg("seq_lens"), tensorArg("qo_indptr")},
	}
	p := &core.Plan{Reads: core.PlanReadsDeclared | core.PlanReadsQLens}
	note := ""
	if split != nil {
		total = align(offWork + int64(ds.batch)*4)
		buf.kvIndptr = wsArg("kv_indptr", offWork)
		sched.Entry = EntryScheduleSplit
		sched.Args = append(sched.Args, tensorArg("kv_indptr"), core.Arg{Param: "split", Kind: core.ArgMeta, Name: "split"}, wsArg("work_indptr", offWork))
		p.Metadata = []core.MetaBuffer{{Name: "split", Int32s: split}}
		note = fmt.Sprintf(", %d work request(s) of at most %d query tokens", ds.batch, launch.MaxQLen)
		if launch.PagesPerRequest(req) == 0 {
			// The page table's size follows the lengths (no bound given).
			p.Reads |= core.PlanReadsSeqLens
		}
	}
	sched.Args = append(sched.Args, buf.schedule, buf.requests, buf.counts, buf.slots,
		intArg("batch", ds.batch), intArg("heads", d.Heads), intArg("capacity", ds.capacity), intArg("nslots", ds.slots), intArg("item_cost", ds.itemCost),
		intArg("full_cost", ds.fullCost))
	p.WorkspaceBytes = total
	p.Launches = []core.Launch{sched, decodeLaunch(ds, ds.capacity, req, buf), combineLaunch(ds, d, buf, req.Device)}
	p.Note = fmt.Sprintf("mla decode, scheduled on the device: %d rows per block (%s), %d head block(s), %d item slots, %d stages%s",
		ds.v.rows, ds.entry(), ds.hb, ds.capacity, ds.v.stages, note)
	return p, nil
}

// schedThreads is the threads of mla_schedule's one block (SCHED_THREADS).
const schedThreads = 1024

// splitQueries cuts every request of more than launch.MaxQLen query
// tokens into work requests of at most that many, its tokens in order: a
// decode block holds the rows of a work request's tokens, each token
// seeing the keys up to its own (causal within the extend), so a work
// request's keys are those its last token sees. It returns the split map,
// three int32 a work request (its request, its first token within it, its
// tokens), and the work requests' query lengths; nil, nil when no request
// has more than launch.MaxQLen tokens.
func splitQueries(qlens []int64) (split []int32, workQ []int64) {
	if !slices.ContainsFunc(qlens, func(q int64) bool { return q > launch.MaxQLen }) {
		return nil, nil
	}
	for i, q := range qlens {
		for off := int64(0); off < q; off += launch.MaxQLen {
			n := min(launch.MaxQLen, q-off)
			split = append(split, int32(i), int32(off), int32(n))
			workQ = append(workQ, n)
		}
	}
	return split, workQ
}

// decodeBuffers are where a decode plan's launches find the schedule, the
// per-request metadata, the item count, the slot starts (metadata the host
// uploads, or the workspace mla_schedule writes), the partial results and
// the page-table offsets of the requests (the kv_indptr tensor, or where
// mla_schedule_split writes those of the work requests).
type decodeBuffers struct{ schedule, requests, counts, slots, partO, partLSE, kvIndptr core.Arg }

func tensorArg(name string) core.Arg { return core.Arg{Param: name, Kind: core.ArgTensor, Name: name} }
func wsArg(param string, off int64) core.Arg {
	return core.Arg{Param: param, Kind: core.ArgWorkspace, Offset: off}
}
func intArg(param string, v int) core.Arg {
	return core.Arg{Param: param, Kind: core.ArgInt, Int: int64(v)}
}

// queryArgs bind the decode's queries (QView in mla_common.cuh): q_nope
// and q_rope with their strides where req splits them, else q as both,
// its rope columns from head_dim_v on.
func queryArgs(req *core.PlanRequest) []core.Arg {
	nope, rope, col := "q_nope", "q_rope", 0
	if !req.QuerySplit {
		nope, rope, col = "q", "q", req.Dims.HeadDimV
	}
	stride := func(param, tensor string, dim int) core.Arg {
		return core.Arg{Param: param, Kind: core.ArgStride, Name: tensor, Dim: dim}
	}
	return []core.Arg{
		{Param: "q_nope", Kind: core.ArgTensor, Name: nope}, {Param: "q_rope", Kind: core.ArgTensor, Name: rope},
		stride("q_nope_t", nope, 0), stride("q_nope_h", nope, 1), stride("q_rope_t", rope, 0), stride("q_rope_h", rope, 1),
		intArg("q_rope_col", col),
	}
}

// decodeLaunch is the launch of ds's decode variant, in its form, over
// slots item slots of ds.hb head blocks each.
func decodeLaunch(ds decodeShape, slots int, req *core.PlanRequest, buf decodeBuffers) core.Launch {
	d, s := req.Dims, req.Shape
	args := append(queryArgs(req), tensorArg("kv_cache"))
	if ds.form.sparse() {
		args = append(args, tensorArg("topk_indices"))
	} else {
		args = append(args, buf.kvIndptr, tensorArg("kv_indices"))
	}
	if ds.form == formDenseFP8 {
		args = append(args, tensorArg("kv_scale"))
	}
	args = append(args, tensorArg("out"), tensorArg("lse"),
		buf.schedule, buf.requests, buf.counts, buf.slots, buf.partO, buf.partLSE, intArg("heads", d.Heads))
	if ds.form.sparse() {
		args = append(args, intArg("topk", d.TopK), intArg("num_slots", s.NumPages*s.PageSize))
	} else {
		pageShift := 0
		for 1<<pageShift < s.PageSize {
			pageShift++
		}
		args = append(args, intArg("page_shift", pageShift))
	}
	args = append(args, core.Arg{Param: "scale_log2", Kind: core.ArgFloat, Float: d.SoftmaxScale * math.Log2E}, intArg("head_blocks", ds.hb))
	return core.Launch{
		Module: ds.v.module(), Entry: ds.entry(),
		Grid: [3]uint32{uint32(slots * ds.hb), 1, 1}, Block: [3]uint32{mlaThreads, 1, 1},
		SharedBytes:  uint32(ds.shared),
		Args:         args,
		Programmatic: programmatic(req.Device),
	}
}

// programmatic reports whether the decode and the combine launch
// programmatically on dev (compute capability 9.0 and newer): each may
// start while the launch before it ends, and the kernels wait
// (griddepcontrol.wait) before they touch what it writes, so a small batch
// does not pay every kernel's launch and tail in turn.
func programmatic(dev core.DeviceInfo) bool { return dev.ComputeCapability >= 90 }

// combineLaunch is the merge of the partial outputs over every query row
// of the batch: mla_combine for a batch of at most combineManyRows rows (a
// block a row and column range; the columns of a batch of at most
// combineShortRows rows cut into four ranges, so that its few rows still
// spread over the GPU), else mla_combine_rows (a warp a row, over a grid
// of at most combineBlocksPerSM blocks a multiprocessor: there a block a
// row pays every block's start, even where the row's request is unsplit).
func combineLaunch(ds decodeShape, d core.PlanDims, buf decodeBuffers, dev core.DeviceInfo) core.Launch {
	l := core.Launch{
		Module: ModuleMLADecode, Entry: EntryCombine, Programmatic: programmatic(dev),
		Grid: [3]uint32{uint32(ds.batch), uint32(ds.maxRows), 1}, Block: [3]uint32{256, 1, 1},
		Args: []core.Arg{
			tensorArg("out"), tensorArg("lse"), buf.requests, buf.partO, buf.partLSE,
			intArg("heads", d.Heads), intArg("batch", ds.batch),
		},
	}
	switch rows := ds.batch * ds.maxRows; {
	case rows <= combineShortRows:
		l.Grid[2] = combineShortParts
	case rows > combineManyRows:
		blocks := min((rows+combineWarps-1)/combineWarps, combineBlocksPerSM*max(dev.SMs, 1))
		l.Entry, l.Grid = EntryCombineRows, [3]uint32{uint32(blocks), 1, 1}
		l.Args = append(l.Args, intArg("max_rows", ds.maxRows))
	}
	return l
}

// combineShortParts is the column ranges mla_combine cuts each row of a
// short batch into (the kernel takes 1, 2 or 4); combineWarps is the
// warps of a combine block, each merging a row in mla_combine_rows, and
// combineBlocksPerSM the blocks a multiprocessor is given: 2048 threads'
// worth, of which three are resident at once (the kernel's 80 registers a
// thread, read from the sm_90 image), the rest starting as those end.
const combineShortParts, combineWarps, combineBlocksPerSM = 4, 8, 8

// combineShortRows is the most rows a batch has for mla_combine to cut
// their columns, combineManyRows the most it has for mla_combine at all. A
// warp a row (mla_combine_rows) reads a row's chunks one after the other,
// a block a row eight at a time: on an H200 a batch of 256 rows (16
// heads, batch 16) merged 1.5 us slower a layer by warps than by blocks,
// one of 2048 rows 2.2-2.7 us faster (16 heads, batch 128; 128 heads,
// batch 16), one of 8192 16.6 us faster (128 heads, batch 64).
const combineShortRows, combineManyRows = 128, 1024

// cutItems cuts every request of lens into work items of about an even
// share of the batch's cost over ds.slots blocks, one item a block; with
// graph, the share grows until the items fit the grid's capacity. Where
// that share leaves more items than slots (a second, part-filled wave), it
// takes instead the least share that cuts the batch into one wave, if the
// one wave is estimated no slower (oneWave). Where one item a block is
// estimated well over the packed cut's time (packs: a ragged batch, whose
// short requests' items leave most blocks idle while its long ones run),
// it packs the batch instead: every slot runs a share of it, item after
// item (packItems, FlashMLA's tile scheduler). It returns the items, the
// slot of each (in order) and the share, in key tiles. mla_schedule
// (mla_decode.cu) cuts on the device exactly so.
func cutItems(lens []int64, ds decodeShape, graph bool) (items []core.WorkItem, slotOf []int, share int) {
	b, slots := ds.batch, ds.slots
	tiles := make([]int, b)
	var total, most int
	for i, n := range lens {
		tiles[i] = int((n + mlaBN - 1) / mlaBN)
		total += tiles[i]
		most = max(most, tiles[i])
	}
	cost := ds.costOf(total)
	total += b * cost
	// Cut each request into chunks of about target tiles, target being an
	// even share of the batch's work over the blocks that fit the GPU at
	// once, so that one wave runs it. Each chunk (item) is one block per
	// head block; the hardware starts the next block on a multiprocessor as
	// soon as one ends.
	target := max((total+slots-1)/slots, minTiles+cost)
	capacity := math.MaxInt
	if graph {
		// One graph per batch size: the grid is fixed at the most items
		// any lengths can produce, and the kernel skips the empty ones.
		capacity = ds.capacity
	}
	n, costliest := cutCount(tiles, target, cost)
	for n > capacity {
		target += target/4 + 1
		n, costliest = cutCount(tiles, target, cost)
	}
	target, n, costliest = oneWave(tiles, target, n, costliest, cost, slots, most)
	if share := packShare(total, slots, cost); packs(total, b, n, costliest, share, slots, cost) {
		items, slotOf = packItems(lens, tiles, share, cost)
		return items, slotOf, share
	}
	for i := range b {
		chunks, per := cutRequest(tiles[i], target, cost)
		for c := range chunks {
			lo := c * per * mlaBN
			hi := min((c+1)*per*mlaBN, int(lens[i]))
			items = append(items, core.WorkItem{Request: int32(i), KVBegin: int32(lo), KVEnd: int32(hi), Split: int32(c)})
			slotOf = append(slotOf, len(slotOf))
		}
	}
	return items, slotOf, target
}

// costOf is an item's cost, in key tiles, in the cut of a batch of the
// given key tiles: the body's fullCost where the batch at that cost fills
// the slots (a share of at least an item of minTiles), since there a
// slot's items run one after the other and each one's fixed work takes
// the place of keys; else itemCost, since there the items run side by
// side, a block each, and an item's fixed work adds to its own time only
// (at 128 heads, batch 1 and 4096 keys, a cut at a cost of 8 took 1.12x
// the time of one at 1; at 24, 1.9x). mla_schedule decides so too.
func (ds decodeShape) costOf(tiles int) int {
	if ds.fullCost > ds.itemCost && tiles+ds.batch*ds.fullCost >= ds.slots*(minTiles+ds.fullCost) {
		return ds.fullCost
	}
	return ds.itemCost
}

// packShare is a slot's share of a packed batch of total cost (its key
// tiles plus cost a request): at least one tile beyond an item's cost, so
// that every share holds a tile.
func packShare(total, slots, cost int) int { return max((total+slots-1)/slots, minTiles+cost) }

// packs reports whether a batch of total cost (its key tiles plus cost a
// request, b requests) whose one-item-a-block cut leaves n items, the
// costliest costing costliest, is packed at share instead: where there are
// two slots or more and the packed cut's estimate (a share and one more
// item's cost: a slot starts with the rest of a request at most once) is
// at most packGain of the one-item cut's. That is its costliest item in
// one wave; over several, the least of its waves times the costliest item
// and an even share of its items' cost plus the costliest (the hardware
// starts each block as one ends, so no slot runs past the average by more
// than one item). Equal requests cut into one wave at about the share and
// keep one item a block, which measured faster where both cuts balance
// alike.
func packs(total, b, n, costliest, share, slots, cost int) bool {
	est := costliest
	if n > slots {
		items := total - b*cost + n*cost
		est = min((n+slots-1)/slots*costliest, (items+slots-1)/slots+costliest)
	}
	return slots > 1 && packGainDen*(share+cost) <= packGainNum*est
}

// packGain (packGainNum / packGainDen) is the estimated time, over the
// one-item cut's, at or under which a batch is packed.
const packGainNum, packGainDen = 7, 8

// packItems lays the batch's requests end to end in key tiles, each of at
// least one tile after a fixed cost of cost tiles (empty requests take no
// room), and cuts the line into shares of share tiles: slot s runs the
// items of the tiles in [s*share, (s+1)*share), in order, each a request's
// tiles within the share. A request split across shares is merged by the
// combine; a share cuts at most one request, so the items number at most
// the requests plus the slots less one. Every share holds a tile (share >
// cost), so every slot up to the last used starts with an item.
func packItems(lens []int64, tiles []int, share, cost int) (items []core.WorkItem, slotOf []int) {
	at := 0 // the line's end so far
	for i, t := range tiles {
		if t == 0 {
			continue
		}
		first := at + cost // the request's first tile on the line
		at = first + t
		for a, c := first, int32(0); a < at; c++ {
			s := a / share
			e := min(at, (s+1)*share)
			items = append(items, core.WorkItem{Request: int32(i), KVBegin: int32((a - first) * mlaBN),
				KVEnd: int32(min(int64(e-first)*mlaBN, lens[i])), Split: c})
			slotOf = append(slotOf, s)
			a = e
		}
	}
	return items, slotOf
}

// The cost of an item, in key tiles: its tiles plus a fixed cost (the
// query load and the epilogue, the partial output written and combined);
// an item has at least minTiles tiles.
const itemCost, minTiles = 1, 1

// cutRequest cuts a request of the given key tiles at target tiles per
// item, an item costing cost tiles beyond its own: its item count and the
// tiles of each but the last.
func cutRequest(tiles, target, cost int) (items, per int) {
	if tiles == 0 {
		return 0, 1
	}
	chunks := max(1, min((tiles+cost+target-1)/target, tiles/minTiles))
	per = (tiles + chunks - 1) / chunks
	return (tiles + per - 1) / per, per
}

// cutCount is the item count of tiles cut at target, and the cost of the
// costliest item.
func cutCount(tiles []int, target, cost int) (items, costliest int) {
	for _, t := range tiles {
		n, per := cutRequest(t, target, cost)
		items += n
		if n > 0 {
			costliest = max(costliest, per+cost)
		}
	}
	return items, costliest
}

// oneWave returns the share a batch is cut at, with its item count and
// the cost of its costliest item: target (which cuts it into n0 items, the
// costliest costing c0), unless target leaves more items
// than slots and the least share that leaves at most
// slots (found by bisection: the count falls as the share grows) runs the
// batch in no more time, estimated as the waves times the costliest item.
// An even share rounds each request up to whole items, so a batch of equal
// requests can overflow the slots by a few items a request and pay a
// second wave as long as the first (at 16 heads, 64 requests of 4096 keys
// over 132 slots: 192 items of 44 tiles, two waves; one wave of 128 items
// of 65 tiles is estimated 1.35x faster).
func oneWave(tiles []int, target, n0, c0, cost, slots, most int) (share, n, costliest int) {
	hi := most + cost // every request one item
	if n0 <= slots || hi <= target {
		return target, n0, c0
	}
	if n, _ := cutCount(tiles, hi, cost); n > slots {
		return target, n0, c0
	}
	for lo := target; hi-lo > 1; {
		mid := lo + (hi-lo)/2
		if n, _ := cutCount(tiles, mid, cost); n <= slots {
			hi = mid
		} else {
			lo = mid
		}
	}
	if n1, c1 := cutCount(tiles, hi, cost); c1 <= (n0+slots-1)/slots*c0 {
		return hi, n1, c1
	}
	return target, n0, c0
}

// planDecode cuts the batch into work items of balanced cost on the CPU
// (cutItems): every head block of a slot is one thread block, one block
// per multiprocessor, running the slot's items (one, or a packed batch's
// share), so the slots are sized to fill the GPU once. A request whose
// keys span several items gets partial results that mla_combine merges.
func planDecode(req *core.PlanRequest, form decodeForm, shared layouts) (*core.Plan, error) {
	s, d := req.Shape, req.Dims
	ds, err := shapeOf(req, form, shared)
	if err != nil {
		return nil, err
	}
	b, v, hb := ds.batch, ds.v, ds.hb
	m := v.rows

	sched, slotOf, target := cutItems(s.SeqLens, ds, req.Graph)
	// The grid: a graph plan's capacity (the most items any lengths of the
	// batch size leave), else the slots used.
	capacity, gridSlots := ds.capacity, ds.capacity
	if !req.Graph {
		capacity = len(sched)
		gridSlots = 0
		if len(slotOf) > 0 {
			gridSlots = slotOf[len(slotOf)-1] + 1
		}
	}
	splits := make([]int, b)
	for _, w := range sched {
		splits[w.Request]++
	}
	reqs := make([]int32, 8*b)
	var qStart, partRows int64
	for i := range b {
		rows := s.QLens[i] * int64(d.Heads)
		reqs[8*i+0] = int32(qStart)
		reqs[8*i+1] = int32(s.QLens[i])
		reqs[8*i+2] = int32(s.SeqLens[i])
		reqs[8*i+3] = int32(splits[i])
		reqs[8*i+4] = int32(partRows)
		if splits[i] > 1 {
			partRows += int64(splits[i]) * rows
		}
		qStart += s.QLens[i]
	}
	items := capacity
	if req.Graph {
		// Pad the schedule with empty items, so that every buffer has the
		// same size for any lengths of this batch size.
		partRows = ds.partialRows()
	}
	slotStart := make([]int32, gridSlots+1)
	for k := range slotStart {
		slotStart[k] = int32(len(sched))
	}
	for k := len(sched) - 1; k >= 0; k-- {
		slotStart[slotOf[k]] = int32(k)
	}
	for k := gridSlots - 1; k >= 0; k-- { // a slot with no item starts where the next does
		slotStart[k] = min(slotStart[k], slotStart[k+1])
	}
	count := len(sched)
	for len(sched) < items {
		sched = append(sched, core.WorkItem{})
	}
	schedule := make([]int32, 0, 4*len(sched))
	combine := false
	for _, w := range sched[:count] {
		combine = combine || splits[w.Request] > 1
	}
	for _, w := range sched {
		schedule = append(schedule, w.Request, w.KVBegin, w.KVEnd, w.Split)
	}
	partO := partRows * mlaDV * partBytes
	meta := func(param string) core.Arg { return core.Arg{Param: param, Kind: core.ArgMeta, Name: param} }
	buf := decodeBuffers{
		schedule: meta("schedule"), requests: meta("requests"), counts: meta("counts"), slots: meta("slots"),
		partO: wsArg("part_o", 0), partLSE: wsArg("part_lse", partO), kvIndptr: tensorArg("kv_indptr"),
	}
	p := &core.Plan{
		Metadata: []core.MetaBuffer{
			{Name: "schedule", Int32s: schedule},
			{Name: "requests", Int32s: reqs},
			// counts[1] 0: the page table may still be written as the
			// decode starts (MLA_ITEMS); mla_schedule writes 1.
			{Name: "counts", Int32s: []int32{int32(count), 0}},
			{Name: "slots", Int32s: slotStart},
		},
		Schedule:       sched,
		WorkspaceBytes: partO + partRows*4,
		Launches:       []core.Launch{decodeLaunch(ds, gridSlots, req, buf)},
		Note: fmt.Sprintf("mla decode: %d rows per block (%s), %d head block(s), %d block(s) of ~%d key tiles of %d, %d item(s), %d stages",
			m, ds.entry(), hb, gridSlots, target, mlaBN, count, v.stages),
	}
	if combine || req.Graph {
		p.Launches = append(p.Launches, combineLaunch(ds, d, buf, req.Device))
	}
	return p, nil
}

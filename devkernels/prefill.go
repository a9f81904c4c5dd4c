package devkernels

import (
	_ "embed"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/attnplug/attnplug/core"
)

// MHAPrefillSource is the CUDA C source of the varlen prefill kernel and
// merge_state (after TileHeader).
//
//go:embed mha_prefill.cu
var MHAPrefillSource string

// MHAPrefillSM90Source is the CUDA C source of the same prefill on
// Hopper's own data path (wgmma, sm_90a; after TileHeader and SM90Header).
//
//go:embed mha_prefill_sm90.cu
var MHAPrefillSM90Source string

// The prefill modules and their entries. ModuleMHAPrefillSM90 is built for
// sm_90a alone and handed only to a device of compute capability 9.0,
// whose plans run EntryPrefillTMA (TMA loads over descriptors of q, k and
// v) in place of EntryPrefill, or EntryPrefillWG (cp.async) for a pass
// over fewer than prefillBM query or key rows; merge_state stays in
// ModuleMHAPrefill.
const (
	ModuleMHAPrefill     = "mha_prefill"
	ModuleMHAPrefillSM90 = "mha_prefill_sm90"
	EntryPrefill         = "mha_prefill"
	EntryPrefillWG       = "mha_prefill_wg"
	EntryPrefillTMA      = "mha_prefill_tma"
	EntryMergeState      = "merge_state"
)

// Tile constants of mha_prefill.cu.
const (
	prefillBM      = 128
	prefillThreads = 256
	prefillDQK     = 192
	prefillDV      = 128
	// mha_prefill_wg and mha_prefill_tma: two consumer warpgroups and a
	// producer's (PW_THREADS in mha_prefill_sm90.cu). The entries' shared
	// memory is their sources' (layout.go).
	prefillSM90Threads = 384
)

// mhaKernelNames are the catalog kernels the prefill module runs: the
// varlen prefill of FlashAttention 3, FlashInfer's ragged prefill, and
// either with merge_state for MHA_CHUNKED_KV.
var mhaKernelNames = []string{
	"flash_attn_varlen_func", "flash_attn_varlen_func+merge_state",
	"BatchPrefillWithRaggedKVCacheWrapper", "BatchPrefillWithRaggedKVCacheWrapper+merge_state",
}

func prefillParams() []core.Param {
	p := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamPtr} }
	return []core.Param{p("q"), p("k"), p("v"), p("out"), p("lse"), p("cu_q"), p("k_ranges"), p("schedule"),
		{Name: "heads", Kind: core.ParamI32}, {Name: "causal", Kind: core.ParamI32}, {Name: "scale_log2", Kind: core.ParamF32}}
}

func mergeParams() []core.Param {
	p := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamPtr} }
	return []core.Param{p("o"), p("lse"), p("o2"), p("lse2"), {Name: "rows", Kind: core.ParamI64}}
}

// prefillSpec is the prefill module without its image.
func prefillSpec() core.KernelModule {
	return core.KernelModule{
		Name: ModuleMHAPrefill, Platform: core.PlatformCUDA,
		Entries: []core.Entry{{Name: EntryPrefill, Params: prefillParams()}, {Name: EntryMergeState, Params: mergeParams()}},
		Kernels: slices.Clone(mhaKernelNames),
	}
}

// prefillSM90Params are the Hopper entries' parameters: mha_prefill's,
// then the schedule's block count and the work counters their blocks
// claim items from (their grid is persistent: prefillGrid).
func prefillSM90Params() []core.Param {
	return append(prefillParams(), core.Param{Name: "blocks", Kind: core.ParamI32}, core.Param{Name: "work", Kind: core.ParamPtr})
}

// prefillSM90Spec is the Hopper prefill module without its image.
func prefillSM90Spec() core.KernelModule {
	maps := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamTensorMap} }
	return core.KernelModule{
		Name: ModuleMHAPrefillSM90, Platform: core.PlatformCUDA,
		Entries: []core.Entry{
			{Name: EntryPrefillWG, Params: prefillSM90Params()},
			{Name: EntryPrefillTMA, Params: append(prefillSM90Params(), maps("q_map"), maps("k_map"), maps("v_map"))},
		},
		Kernels: slices.Clone(mhaKernelNames),
	}
}

// prefillMap is the TMA descriptor mha_prefill_tma reads tensor name of
// ts through: its rows by heads x the head dimension, boxes of prefillBM
// rows x 64 columns (128 bytes, the 128-byte swizzle), or false when the
// tensor has fewer rows than a box.
func prefillMap(param, name string, ts []core.TensorSpec) (core.Arg, bool) {
	for _, t := range ts {
		if t.Name != name || len(t.Shape) != 3 {
			continue
		}
		if t.Shape[0] < prefillBM {
			return core.Arg{}, false
		}
		return core.Arg{Param: param, Kind: core.ArgTensorMap, Name: name, Map: &core.TensorMap{
			View: []int64{t.Shape[0], t.Shape[1] * t.Shape[2]}, Box: []uint32{prefillBM, 64}, Swizzle: "128B", L2Promotion: "256B"}}, true
	}
	return core.Arg{}, false
}

// planPrefill plans the three MHA methods:
//
//   - MHA and MHA_ONE_SHOT: one causal pass of each request's queries over
//     its keys (prefix and new tokens, which the caller decompressed);
//   - MHA_CHUNKED_KV: a causal pass of the new tokens over themselves into
//     out and lse, then for each prefix chunk (as sglang cuts them:
//     core.PlanShape.PrefixChunks) a pass
//     without a mask into the workspace, merged into out and lse by
//     merge_state;
//   - MHA_CHUNKED_KV's pass over one prefix chunk (shape.prefix_chunk):
//     one pass without a mask of each request's new tokens over its keys
//     in the chunk, into out and lse.
//
// Blocks of 128 queries of one request and one head are ordered longest
// first (their causal work), so the long blocks start in the first wave.
// On compute capability 9.0 the passes run mha_prefill_tma (wgmma, TMA
// loads), or mha_prefill_wg (cp.async) over tensors of fewer rows than a
// box, on a persistent grid (prefillGrid) whose blocks claim these blocks
// x the heads as work items from the plan's work counters, in the same
// order; else mha_prefill (mma.sync).
func planPrefill(req *core.PlanRequest, tensors []core.TensorSpec, shared layouts) (*core.Plan, error) {
	s, d := req.Shape, req.Dims
	entries := []string{EntryPrefill}
	if req.Device.ComputeCapability == hopperCC {
		entries = []string{EntryPrefillWG, EntryPrefillTMA}
	}
	for _, e := range entries {
		if _, ok := shared[e]; !ok {
			return nil, fmt.Errorf("%w: the device code gives no shared memory of %s (make device-code)", core.ErrNoPlan, e)
		}
	}
	chunked := req.Method == core.MHAChunkedKV && !s.PrefixChunk
	cuQ, keys := prefillRows(s, chunked)
	sched := prefillSchedule(s, keys)
	pl := &prefillPasses{req: req, tensors: tensors, blocks: len(sched) / 4, entries: map[string]int{}, shared: shared}
	p := &core.Plan{
		Tensors:  tensors,
		Metadata: []core.MetaBuffer{{Name: "cu_q", Int32s: cuQ}, {Name: "k_ranges", Int32s: keys}, {Name: "blocks", Int32s: sched}},
	}
	if req.Device.ComputeCapability == hopperCC {
		// The Hopper passes' work counters, zero at each launch: the kernel
		// zeroes them as it ends, so a plan's passes run one at a time.
		p.Metadata = append(p.Metadata, core.MetaBuffer{Name: "work", Int32s: []int32{0, 0}})
	}
	if s.PrefixChunk {
		p.Launches = []core.Launch{pl.pass("k", "v", prefillTensor("out", "out"), prefillTensor("lse", "lse"), "k_ranges", 0)}
		p.Note = fmt.Sprintf("prefix chunk (%s): %d block(s) of %d queries x %d heads, every key of the chunk", pl.note(), pl.blocks, prefillBM, d.Heads)
		return p, nil
	}
	p.Launches = []core.Launch{pl.pass("k", "v", prefillTensor("out", "out"), prefillTensor("lse", "lse"), "k_ranges", 1)}
	p.Note = fmt.Sprintf("varlen prefill (%s): %d block(s) of %d queries x %d heads, causal", pl.note(), pl.blocks, prefillBM, d.Heads)
	if !chunked {
		return p, nil
	}
	size, chunks := pl.addPrefixChunks(p)
	p.Note = fmt.Sprintf("varlen prefill (%s): %d block(s) of %d queries x %d heads, causal, then %d prefix chunk(s) of %d keys per request merged by LSE",
		pl.note(), pl.blocks, prefillBM, d.Heads, chunks, size)
	return p, nil
}

// prefillRows returns the query offsets of a prefill batch (cu_q: request
// i's queries are rows cu_q[i]:cu_q[i+1] of q) and the keys of its causal
// pass, per request, as [begin, end) rows of k: every key of the request,
// or for MHA_CHUNKED_KV its new tokens alone.
func prefillRows(s core.PlanShape, chunked bool) (cuQ, keys []int32) {
	b := len(s.SeqLens)
	cuQ = make([]int32, b+1)
	keys = make([]int32, 2*b)
	var kOff int32
	for i := range b {
		cuQ[i+1] = cuQ[i] + int32(s.QLens[i])
		n := int32(s.SeqLens[i])
		if chunked {
			n = int32(s.QLens[i])
		}
		keys[2*i], keys[2*i+1] = kOff, kOff+n
		kOff += n
	}
	return cuQ, keys
}

// prefillSchedule returns the blocks of the causal pass, four int32 each
// (request, first query row, 0, 0), the costliest first: a block's cost
// is the keys its last row sees.
func prefillSchedule(s core.PlanShape, keys []int32) []int32 {
	type block struct {
		req, q0 int32
		cost    int64
	}
	var blocks []block
	for i := range s.SeqLens {
		kn := keys[2*i+1] - keys[2*i]
		for q0 := int32(0); q0 < int32(s.QLens[i]); q0 += prefillBM {
			last := int64(kn) - s.QLens[i] + int64(q0) + prefillBM // keys the block's last row sees
			if s.PrefixChunk {
				last = int64(kn) // every key of the chunk
			}
			blocks = append(blocks, block{int32(i), q0, min(last, int64(kn))})
		}
	}
	sort.SliceStable(blocks, func(x, y int) bool { return blocks[x].cost > blocks[y].cost })
	sched := make([]int32, 0, 4*len(blocks))
	for _, bl := range blocks {
		sched = append(sched, bl.req, bl.q0, 0, 0)
	}
	return sched
}

func prefillTensor(param, tensor string) core.Arg {
	return core.Arg{Param: param, Kind: core.ArgTensor, Name: tensor}
}

func prefillWorkspace(param string, off int64) core.Arg {
	return core.Arg{Param: param, Kind: core.ArgWorkspace, Offset: off}
}

// prefillPasses makes the launches of one prefill plan, counting the
// entries they run (for the plan's note).
type prefillPasses struct {
	req     *core.PlanRequest
	tensors []core.TensorSpec
	blocks  int
	entries map[string]int
	shared  layouts
}

// pass launches a pass over keys k and values v (tensors of the plan) into
// out and lse, over the key ranges of metadata buffer ranges: on Hopper
// through their descriptors when each tensor has rows enough for a box.
func (pl *prefillPasses) pass(k, v string, out, lse core.Arg, ranges string, causal int) core.Launch {
	d := pl.req.Dims
	meta := func(param, name string) core.Arg { return core.Arg{Param: param, Kind: core.ArgMeta, Name: name} }
	i32 := func(param string, v int) core.Arg { return core.Arg{Param: param, Kind: core.ArgInt, Int: int64(v)} }
	l := core.Launch{Module: ModuleMHAPrefill, Entry: EntryPrefill, Grid: [3]uint32{uint32(pl.blocks), uint32(d.Heads), 1},
		Block: [3]uint32{prefillThreads, 1, 1}, SharedBytes: uint32(pl.shared[EntryPrefill]),
		Args: []core.Arg{prefillTensor("q", "q"), prefillTensor("k", k), prefillTensor("v", v), out, lse,
			meta("cu_q", "cu_q"), meta("k_ranges", ranges), meta("schedule", "blocks"), i32("heads", d.Heads), i32("causal", causal),
			{Param: "scale_log2", Kind: core.ArgFloat, Float: d.SoftmaxScale * math.Log2E}}}
	if pl.req.Device.ComputeCapability == hopperCC {
		l.Module, l.Entry, l.Block, l.SharedBytes = ModuleMHAPrefillSM90, EntryPrefillWG, [3]uint32{prefillSM90Threads, 1, 1}, uint32(pl.shared[EntryPrefillWG])
		l.Grid = [3]uint32{prefillGrid(pl.blocks, d.Heads, pl.req.Device.SMs), 1, 1}
		l.Args = append(l.Args, i32("blocks", pl.blocks), meta("work", "work"))
		qm, okq := prefillMap("q_map", "q", pl.tensors)
		km, okk := prefillMap("k_map", k, pl.tensors)
		vm, okv := prefillMap("v_map", v, pl.tensors)
		if okq && okk && okv {
			l.Entry, l.Args, l.SharedBytes = EntryPrefillTMA, append(l.Args, qm, km, vm), uint32(pl.shared[EntryPrefillTMA])
		}
	}
	pl.entries[l.Entry]++
	return l
}

// prefillGrid is a Hopper pass's grid: one block an SM (the entries hold
// 208 KB of shared memory), each running the pass's blocks x heads work
// items in turn, claimed from the plan's work counters in the order a grid
// of one block an item would start them (mha_prefill_sm90.cu's pw_claim);
// one block a work item when there are fewer, or when the device gives no
// count of its SMs.
func prefillGrid(blocks, heads, sms int) uint32 {
	items := int64(blocks) * int64(heads)
	if sms <= 0 {
		return uint32(items)
	}
	return uint32(min(items, int64(sms)))
}

// note names the entries the passes run, sorted.
func (pl *prefillPasses) note() string {
	names := make([]string, 0, len(pl.entries))
	for e := range pl.entries {
		names = append(names, e)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// addPrefixChunks adds MHA_CHUNKED_KV's prefix chunks to p: for each, a
// pass without a mask over the chunk's keys of every request into the
// workspace, merged into out and lse by merge_state. It returns the
// chunk size and count.
func (pl *prefillPasses) addPrefixChunks(p *core.Plan) (size, chunks int64) {
	s, d := pl.req.Shape, pl.req.Dims
	b := len(s.SeqLens)
	size, chunks = s.PrefixChunks() // within core's bounds: launch.CheckRequest checked req
	var tokens int64
	for _, q := range s.QLens {
		tokens += q
	}
	rows := tokens * int64(d.Heads)
	outBytes := rows * int64(d.HeadDimV) * 2
	p.WorkspaceBytes = outBytes + rows*4
	starts := make([]int64, b)
	var pOff int64
	for i := range b {
		starts[i] = pOff
		pOff += s.SeqLens[i] - s.QLens[i]
	}
	// The chunk passes see every key of their chunk: all blocks do the same
	// work, so they keep the causal pass's order.
	for c := range chunks {
		r := make([]int32, 2*b)
		for i := range b {
			prefix := s.SeqLens[i] - s.QLens[i]
			lo := min(int64(c)*size, prefix)
			hi := min(int64(c+1)*size, prefix)
			r[2*i], r[2*i+1] = int32(starts[i]+lo), int32(starts[i]+hi)
		}
		name := fmt.Sprintf("chunk%d", c)
		p.Metadata = append(p.Metadata, core.MetaBuffer{Name: name, Int32s: r})
		p.Launches = append(p.Launches,
			pl.pass("k_prefix", "v_prefix", prefillWorkspace("out", 0), prefillWorkspace("lse", outBytes), name, 0),
			core.Launch{Module: ModuleMHAPrefill, Entry: EntryMergeState,
				Grid: [3]uint32{uint32((rows + 15) / 16), 1, 1}, Block: [3]uint32{prefillThreads, 1, 1},
				Args: []core.Arg{prefillTensor("o", "out"), prefillTensor("lse", "lse"), prefillWorkspace("o2", 0), prefillWorkspace("lse2", outBytes),
					{Param: "rows", Kind: core.ArgInt, Int: rows}}})
	}
	return size, chunks
}

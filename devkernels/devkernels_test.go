package devkernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
)

// h200 is an H200 as the host describes it.
var h200 = core.DeviceInfo{Platform: core.PlatformCUDA, Name: "NVIDIA H200", ComputeCapability: 90, SMs: 132,
	MaxThreadsPerBlock: 1024, MaxSharedPerBlock: 232448, MaxGrid: [3]int{1<<31 - 1, 65535, 65535}}

var fa3MLA = core.Kernel{Name: "flash_attn_with_kvcache", Method: core.MLA, DTypes: []string{"bf16"}, HeadDims: []int{576, 512}, PageSizes: []int{1, 16, 64}}

// dsaSparse is the dsa catalog's sparse MLA.
var dsaSparse = core.Kernel{Name: "flash_mla_sparse_fwd", Method: core.MLA, DTypes: []string{"bf16", "fp8_e4m3"}, HeadDims: []int{576, 512}, PageSizes: []int{64}, Sparse: true}

func request(heads, pageSize int, seq, q []int64, graph bool) *core.PlanRequest {
	pages := 0
	for _, n := range seq {
		pages += int((n + int64(pageSize) - 1) / int64(pageSize))
	}
	return &core.PlanRequest{
		Backend: "fa3", Method: core.MLA, DType: "bf16",
		Dims:   core.PlanDims{Heads: heads, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352},
		Shape:  core.PlanShape{SeqLens: seq, QLens: q, PageSize: pageSize, NumPages: pages + 1},
		Device: h200, Graph: graph,
	}
}

func randomRequest(rng *rand.Rand, graph bool) *core.PlanRequest {
	heads := []int{16, 32, 64, 128}[rng.IntN(4)]
	ps := []int{1, 16, 64}[rng.IntN(3)]
	b := 1 + rng.IntN(256)
	ql := int64(1 + rng.IntN(4))
	var seq, q []int64
	for range b {
		seq = append(seq, ql+rng.Int64N(1<<uint(rng.IntN(17))))
		q = append(q, ql)
	}
	return request(heads, ps, seq, q, graph)
}

// TestPlansPassTheHostChecks plans random batches and checks every plan as
// the host does, then checks the schedule covers each request's keys once,
// in order, with the split counts the kernels read.
func TestPlansPassTheHostChecks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		req := randomRequest(rng, i%3 == 0)
		p, err := Plan(fa3MLA, req)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if err := launch.Check(p, req, Spec(), h200); err != nil {
			t.Fatalf("case %d (%s): %v", i, p.Note, err)
		}
		var count int32
		var reqs, slots []int32
		for _, m := range p.Metadata {
			switch m.Name {
			case "counts":
				// counts[1] 0: a planner's decode asks L2 for no keys before
				// its wait (MLA_ITEMS); the page table may still be written.
				if len(m.Int32s) != 2 || m.Int32s[1] != 0 {
					t.Fatalf("case %d: counts %v, want the item count and 0", i, m.Int32s)
				}
				count = m.Int32s[0]
			case "requests":
				reqs = m.Int32s
			case "slots":
				slots = m.Int32s
			}
		}
		// The slots cut the items into contiguous runs, one per block row of
		// the grid.
		if len(slots) < 2 || int(p.Launches[0].Grid[0])%(len(slots)-1) != 0 || slots[0] != 0 || slots[len(slots)-1] != count {
			t.Fatalf("case %d: slots %v for %d items and grid %v", i, slots, count, p.Launches[0].Grid)
		}
		for k := 1; k < len(slots); k++ {
			if slots[k] < slots[k-1] {
				t.Fatalf("case %d: slots %v decrease", i, slots)
			}
		}
		next := make([]int32, len(req.Shape.SeqLens))
		splits := make([]int32, len(req.Shape.SeqLens))
		for k, w := range p.Schedule[:count] {
			if w.KVBegin != next[w.Request] || w.KVEnd <= w.KVBegin || w.Split != splits[w.Request] {
				t.Fatalf("case %d: item %d %+v does not continue request %d at %d (split %d)", i, k, w, w.Request, next[w.Request], splits[w.Request])
			}
			next[w.Request] = w.KVEnd
			splits[w.Request]++
		}
		var qStart int32
		for r, n := range req.Shape.SeqLens {
			if int64(next[r]) != n {
				t.Fatalf("case %d: request %d covered up to %d of %d keys", i, r, next[r], n)
			}
			if reqs[8*r] != qStart || reqs[8*r+1] != int32(req.Shape.QLens[r]) || reqs[8*r+2] != int32(n) || reqs[8*r+3] != splits[r] {
				t.Fatalf("case %d: request %d metadata %v, want q_start %d q_len %d seq %d splits %d", i, r, reqs[8*r:8*r+5], qStart, req.Shape.QLens[r], n, splits[r])
			}
			qStart += int32(req.Shape.QLens[r])
		}
	}
}

// TestGraphPlansKeepTheirLaunches: for one batch size, any lengths give the
// same launches and buffer sizes, so one captured graph serves them all.
func TestGraphPlansKeepTheirLaunches(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		a := randomRequest(rng, true)
		seq := slices.Clone(a.Shape.SeqLens)
		for i := range seq {
			seq[i] = a.Shape.QLens[i] + rng.Int64N(20000)
		}
		b := request(a.Dims.Heads, a.Shape.PageSize, seq, a.Shape.QLens, true)
		pa, err := Plan(fa3MLA, a)
		if err != nil {
			t.Fatal(err)
		}
		pb, err := Plan(fa3MLA, b)
		if err != nil {
			t.Fatal(err)
		}
		if len(pa.Launches) != len(pb.Launches) || pa.WorkspaceBytes != pb.WorkspaceBytes {
			t.Fatalf("launches %d/%d, workspace %d/%d", len(pa.Launches), len(pb.Launches), pa.WorkspaceBytes, pb.WorkspaceBytes)
		}
		for i := range pa.Launches {
			la, lb := pa.Launches[i], pb.Launches[i]
			if la.Entry != lb.Entry || la.Grid != lb.Grid || !reflect.DeepEqual(la.Args, lb.Args) {
				t.Fatalf("launch %d differs: %+v vs %+v", i, la, lb)
			}
		}
		for i := range pa.Metadata {
			if len(pa.Metadata[i].Int32s) != len(pb.Metadata[i].Int32s) {
				t.Fatalf("metadata %s: %d vs %d values", pa.Metadata[i].Name, len(pa.Metadata[i].Int32s), len(pb.Metadata[i].Int32s))
			}
		}
	}
}

// TestBalancedSchedule: a ragged batch is cut so that no item costs much
// more than the average share of a multiprocessor.
func TestBalancedSchedule(t *testing.T) {
	seq := []int64{32768, 64, 64, 64, 100, 8000, 64, 64}
	q := []int64{1, 1, 1, 1, 1, 1, 1, 1}
	p, err := Plan(fa3MLA, request(16, 64, seq, q, false))
	if err != nil {
		t.Fatal(err)
	}
	var longest, total int32
	for _, w := range p.Schedule {
		longest = max(longest, w.KVEnd-w.KVBegin)
		total += w.KVEnd - w.KVBegin
	}
	if share := total / (2 * 132); longest > 2*share+2*mlaBN {
		t.Errorf("longest item %d keys, average share of a block %d (%s)", longest, share, p.Note)
	}
}

func TestPlanRefusals(t *testing.T) {
	cases := []struct {
		name string
		edit func(k *core.Kernel, r *core.PlanRequest)
		want error
	}{
		{"fp8", func(k *core.Kernel, r *core.PlanRequest) { r.DType = "fp8_e4m3" }, core.ErrNoPlan},
		{"mha dims", func(k *core.Kernel, r *core.PlanRequest) { r.Dims.HeadDimQK, r.Dims.HeadDimV = 192, 128 }, core.ErrNoPlan},
		{"page 48", func(k *core.Kernel, r *core.PlanRequest) { r.Shape.PageSize = 48; k.PageSizes = nil }, core.ErrNoPlan},
		{"page outside catalog", func(k *core.Kernel, r *core.PlanRequest) { k.PageSizes = []int{1} }, core.ErrNoPlan},
		{"turing", func(k *core.Kernel, r *core.PlanRequest) { r.Device.ComputeCapability = 75 }, core.ErrNoPlan},
		{"hip", func(k *core.Kernel, r *core.PlanRequest) { r.Device.Platform = core.PlatformHIP }, core.ErrNoPlan},
		{"sparse kernel", func(k *core.Kernel, r *core.PlanRequest) { k.Sparse = true }, core.ErrNoPlan},
		{"sparse without top_k", func(k *core.Kernel, r *core.PlanRequest) { *k = dsaSparse }, core.ErrNoPlan},
		{"dense with top_k", func(k *core.Kernel, r *core.PlanRequest) { r.Dims.TopK = 2048 }, core.ErrNoPlan},
		{"fp8 cache outside catalog", func(k *core.Kernel, r *core.PlanRequest) { r.KVDType = "fp8_e4m3" }, core.ErrNoPlan},
		{"fp8 e5m2 cache", func(k *core.Kernel, r *core.PlanRequest) { r.KVDType = "fp8_e5m2"; k.DTypes = nil }, core.ErrNoPlan},
		{"unknown kv_dtype", func(k *core.Kernel, r *core.PlanRequest) { r.KVDType = "int3" }, core.ErrInvalidRequest},
		{"negative top_k", func(k *core.Kernel, r *core.PlanRequest) { r.Dims.TopK = -1 }, core.ErrInvalidRequest},
		{"mha method", func(k *core.Kernel, r *core.PlanRequest) { r.Method = core.MHA }, core.ErrNoPlan},
		{"no heads", func(k *core.Kernel, r *core.PlanRequest) { r.Dims.Heads = 0 }, core.ErrInvalidRequest},
		{"q longer than keys", func(k *core.Kernel, r *core.PlanRequest) { r.Shape.QLens[0] = 9; r.Shape.SeqLens[0] = 4 }, core.ErrInvalidRequest},
		{"lengths mismatch", func(k *core.Kernel, r *core.PlanRequest) { r.Shape.QLens = r.Shape.QLens[:1] }, core.ErrInvalidRequest},
		{"nan scale", func(k *core.Kernel, r *core.PlanRequest) { r.Dims.SoftmaxScale = -1 }, core.ErrInvalidRequest},
		{"too few pages", func(k *core.Kernel, r *core.PlanRequest) { r.Shape.NumPages = 1 }, core.ErrInvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := fa3MLA
			r := request(16, 64, []int64{100, 200}, []int64{1, 1}, false)
			c.edit(&k, r)
			_, err := Plan(k, r)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

// TestModulesWithoutGPU: asking for modules for a device the kernels do not
// serve is ErrNoPlan, with no NVRTC needed.
func TestModulesWithoutGPU(t *testing.T) {
	var b Builder
	for _, dev := range []core.DeviceInfo{{Platform: core.PlatformHIP, ComputeCapability: 90}, {Platform: core.PlatformCUDA, ComputeCapability: 75}} {
		if _, err := b.Modules(dev); !errors.Is(err, core.ErrNoPlan) {
			t.Errorf("%+v: got %v, want ErrNoPlan", dev, err)
		}
	}
}

// TestSparseAndFP8Plans: a sparse plan binds the top-k and not the page
// table, cuts every query token's top-k into items the host's check
// accepts, reads only the query lengths (so it holds for a batch size
// whatever the lengths), and reads DeepSeek-V3.2's 656-byte tokens from an
// FP8 cache; a dense plan over an FP8 cache binds its scale.
func TestSparseAndFP8Plans(t *testing.T) {
	for _, kvd := range []string{"", "fp8_e4m3"} {
		for _, heads := range []int{16, 128} {
			req := request(heads, 64, []int64{9000, 70, 3000}, []int64{1, 2, 4}, true)
			req.Backend, req.KVDType, req.Dims.TopK = "dsa", kvd, 2048
			p, err := Plan(dsaSparse, req)
			if err != nil {
				t.Fatalf("kv %q heads %d: %v", kvd, heads, err)
			}
			if err := launch.Check(p, req, Spec(), h200); err != nil {
				t.Fatalf("kv %q heads %d (%s): %v", kvd, heads, p.Note, err)
			}
			byName := map[string]core.TensorSpec{}
			for _, ts := range p.Tensors {
				byName[ts.Name] = ts
			}
			row := int64(576)
			if kvd != "" {
				row = DSARowBytes
			}
			if ti := byName["topk_indices"]; !slices.Equal(ti.Shape, []int64{7, 2048}) || byName["kv_indices"].Name != "" || byName["kv_cache"].Shape[2] != row {
				t.Errorf("kv %q: tensors %+v", kvd, p.Tensors)
			}
			if p.Reads != core.PlanReadsDeclared|core.PlanReadsQLens {
				t.Errorf("kv %q: reads %s", kvd, p.Reads)
			}
			items := map[int32]int32{}
			for _, w := range p.Schedule {
				items[w.Request] += w.KVEnd - w.KVBegin
			}
			for tok := range int32(7) {
				if items[tok] != 2048 {
					t.Errorf("kv %q: token %d has %d keys scheduled, want its 2048", kvd, tok, items[tok])
				}
			}
			other := *req
			other.Shape.SeqLens = []int64{100, 9000, 64}
			q, err := Plan(dsaSparse, &other)
			if err != nil || !reflect.DeepEqual(q.Launches, p.Launches) || !reflect.DeepEqual(q.Metadata, p.Metadata) {
				t.Errorf("kv %q: the plan changed with the lengths: %v", kvd, err)
			}
		}
	}
	k := fa3MLA
	k.DTypes = []string{"bf16", "fp8_e4m3"}
	req := request(16, 64, []int64{4097, 33}, []int64{1, 1}, false)
	req.KVDType = "fp8_e4m3"
	p, err := Plan(k, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := launch.Check(p, req, Spec(), h200); err != nil {
		t.Fatalf("%s: %v", p.Note, err)
	}
	if !strings.HasPrefix(p.Launches[0].Entry, "mla_decode_fp8_") || !slices.ContainsFunc(p.Tensors, func(ts core.TensorSpec) bool { return ts.Name == "kv_scale" }) {
		t.Errorf("dense FP8 plan: entry %s, tensors %+v", p.Launches[0].Entry, p.Tensors)
	}
}

// TestPlansPickByArchitecture: on compute capability 9.0 the 64-row shapes
// run the Hopper module's wgmma entries, in every form, within the H200's
// shared memory (batches of two or more the seesaw's, in every form), and
// so do the 16-row ones; elsewhere, and for the other shapes,
// mla_decode's, the widest that fits the device's shared memory (an A100's
// 164 KB hold no 64-row variant and no bf16 32-row one).
func TestPlansPickByArchitecture(t *testing.T) {
	a100 := h200
	a100.Name, a100.ComputeCapability, a100.SMs, a100.MaxSharedPerBlock = "NVIDIA A100", 80, 108, 166912
	for _, tc := range []struct {
		dev         core.DeviceInfo
		heads       int
		kvd         string
		sparse      bool
		module, ent string
		lens        []int64
	}{
		{h200, 128, "", false, ModuleMLADecodeSM90, "mla_decode_ss64", nil},
		{h200, 64, "fp8_e4m3", false, ModuleMLADecodeSM90, "mla_decode_fp8_ss64", nil},
		{h200, 128, "fp8_e4m3", false, ModuleMLADecodeSM90, "mla_decode_fp8_wg64", []int64{4096}},
		{h200, 128, "", true, ModuleMLADecodeSM90, "mla_sparse_ss64", nil},
		// A single request keeps the 64-row body of one tile a step.
		{h200, 128, "", false, ModuleMLADecodeSM90, "mla_decode_wg64", []int64{4096}},
		{h200, 128, "", true, ModuleMLADecodeSM90, "mla_sparse_wg64", []int64{9000}},
		{h200, 128, "fp8_e4m3", true, ModuleMLADecodeSM90, "mla_sparse_fp8_ss64", nil},
		{h200, 128, "fp8_e4m3", true, ModuleMLADecodeSM90, "mla_sparse_fp8_wg64", []int64{9000}},
		{h200, 16, "", false, ModuleMLADecodeSM90, "mla_decode_wg16", nil},
		{h200, 16, "", false, ModuleMLADecodeSM90, "mla_decode_wg16", []int64{9000}},
		{h200, 16, "fp8_e4m3", false, ModuleMLADecodeSM90, "mla_decode_fp8_wg16", []int64{9000}},
		{h200, 16, "", true, ModuleMLADecodeSM90, "mla_sparse_wg16", nil},
		{h200, 16, "fp8_e4m3", true, ModuleMLADecodeSM90, "mla_sparse_fp8_wg16", nil},
		{h200, 16, "", false, ModuleMLADecodeSM90, "mla_decode_wg16", slices.Repeat([]int64{4096}, 17)},
		{h200, 16, "fp8_e4m3", false, ModuleMLADecodeSM90, "mla_decode_fp8_wg16", slices.Repeat([]int64{4096}, 16)},
		{h200, 16, "", false, ModuleMLADecodeSM90, "mla_decode_wg16", slices.Repeat([]int64{4096}, 2)},
		{h200, 16, "fp8_e4m3", false, ModuleMLADecodeSM90, "mla_decode_fp8_wg16", slices.Repeat([]int64{4096}, 64)},
		{h200, 16, "fp8_e4m3", true, ModuleMLADecodeSM90, "mla_sparse_fp8_wg16", []int64{9000}},
		{h200, 32, "fp8_e4m3", true, ModuleMLADecode, "mla_sparse_fp8_m32", nil},
		{a100, 128, "", false, ModuleMLADecode, "mla_decode_m16", nil},
		{a100, 128, "fp8_e4m3", true, ModuleMLADecode, "mla_sparse_fp8_m32", nil},
	} {
		for _, graph := range []bool{false, true} {
			lens := tc.lens
			if lens == nil {
				lens = []int64{9000, 70, 3000}
			}
			req := request(tc.heads, 64, lens, slices.Repeat([]int64{1}, len(lens)), graph)
			req.Device, req.KVDType = tc.dev, tc.kvd
			k := fa3MLA
			k.DTypes = []string{"bf16", "fp8_e4m3"}
			if tc.sparse {
				k, req.Backend, req.Dims.TopK = dsaSparse, "dsa", 2048
			}
			p, err := Plan(k, req)
			if err != nil {
				t.Fatalf("%+v: %v", tc, err)
			}
			if err := launch.Check(p, req, specFor(tc.dev.ComputeCapability), tc.dev); err != nil {
				t.Fatalf("%s %d heads kv %q graph %v (%s): %v", tc.dev.Name, tc.heads, tc.kvd, graph, p.Note, err)
			}
			i := 0
			if p.Launches[0].Entry == EntrySchedule {
				i = 1
			}
			if l := p.Launches[i]; l.Module != tc.module || l.Entry != tc.ent {
				t.Errorf("%s %d heads kv %q sparse %v graph %v: %s.%s, want %s.%s", tc.dev.Name, tc.heads, tc.kvd, tc.sparse, graph, l.Module, l.Entry, tc.module, tc.ent)
			}
		}
	}
}

// checkPrefillGrid checks a prefill pass's grid: on Hopper one block an
// SM, each claiming the (schedule block, head) items in turn from the
// plan's work counters, uploaded as zeros (the entries' parameter blocks
// says how many schedule blocks), or one block an item where there are
// fewer items than SMs or the device gives no count; elsewhere one block
// an item, the heads the grid's y.
func checkPrefillGrid(p *core.Plan, l core.Launch, req *core.PlanRequest) error {
	var blocks int
	var work []int32
	for _, m := range p.Metadata {
		switch m.Name {
		case "blocks":
			blocks = len(m.Int32s) / 4
		case "work":
			work = m.Int32s
		}
	}
	hopper := l.Module == ModuleMHAPrefillSM90
	var bound *core.Arg
	if w := slices.IndexFunc(l.Args, func(a core.Arg) bool { return a.Param == "work" }); w >= 0 {
		bound = &l.Args[w]
	}
	if hopper != (bound != nil) || hopper && (bound.Kind != core.ArgMeta || bound.Name != "work" || !slices.Equal(work, []int32{0, 0})) {
		return fmt.Errorf("%s binds work %+v (the plan's work buffer: %v), want the plan's buffer of two zeros on Hopper alone", l.Entry, bound, work)
	}
	items, heads := blocks*req.Dims.Heads, req.Dims.Heads
	want := [3]uint32{uint32(blocks), uint32(heads), 1}
	if hopper {
		want = [3]uint32{uint32(items), 1, 1}
		if sms := req.Device.SMs; sms > 0 && sms < items {
			want[0] = uint32(sms)
		}
		i := slices.IndexFunc(l.Args, func(a core.Arg) bool { return a.Param == "blocks" })
		if i < 0 || l.Args[i].Int != int64(blocks) {
			return fmt.Errorf("%s binds blocks %v, want the schedule's %d", l.Entry, l.Args, blocks)
		}
	}
	if l.Grid != want {
		return fmt.Errorf("%s: grid %v for %d schedule blocks x %d heads on %d SMs, want %v", l.Entry, l.Grid, blocks, heads, req.Device.SMs, want)
	}
	return nil
}

// TestPrefillPicksByArchitecture: on compute capability 9.0 every prefill
// pass (the causal one and the prefix chunks') runs the Hopper module's
// mha_prefill_tma, with descriptors over its own q, keys and values that
// the host accepts, or mha_prefill_wg where a tensor has fewer rows than a
// box, within the H200's shared memory; merge_state stays in mha_prefill.
// Elsewhere every pass runs mha_prefill, and a device without the Hopper
// module refuses a plan that names it.
func TestPrefillPicksByArchitecture(t *testing.T) {
	a100 := h200
	a100.Name, a100.ComputeCapability, a100.SMs, a100.MaxSharedPerBlock = "NVIDIA A100", 80, 108, 166912
	uncounted := h200 // a device that gives no count of its SMs
	uncounted.SMs = 0
	mha := core.Kernel{Name: "flash_attn_varlen_func+merge_state", Method: core.MHAChunkedKV, DTypes: []string{"bf16"}, HeadDims: []int{192, 128}}
	for _, tc := range []struct {
		dev           core.DeviceInfo
		seq, q        []int64
		module, entry string // of every pass
		threads       uint32
	}{
		{h200, []int64{3000, 1000}, []int64{300, 1000}, ModuleMHAPrefillSM90, EntryPrefillTMA, 384},
		{uncounted, []int64{3000, 1000}, []int64{300, 1000}, ModuleMHAPrefillSM90, EntryPrefillTMA, 384},
		{h200, []int64{3000, 90}, []int64{30, 90}, ModuleMHAPrefillSM90, EntryPrefillWG, 384}, // 120 new tokens
		{h200, []int64{40, 300}, []int64{10, 290}, ModuleMHAPrefillSM90, "", 384},             // 40 prefix rows: the chunks' passes by cp.async
		{a100, []int64{3000, 1000}, []int64{300, 1000}, ModuleMHAPrefill, EntryPrefill, 256},
	} {
		req := &core.PlanRequest{
			Backend: "fa3", Method: core.MHAChunkedKV, DType: "bf16",
			Dims:   core.PlanDims{Heads: 16, HeadDimQK: 192, HeadDimV: 128, SoftmaxScale: 0.0722},
			Shape:  core.PlanShape{SeqLens: tc.seq, QLens: tc.q, ChunkCapacity: 1024},
			Device: tc.dev,
		}
		p, err := Plan(mha, req)
		if err != nil {
			t.Fatalf("%s: %v", tc.dev.Name, err)
		}
		if err := launch.Check(p, req, specFor(tc.dev.ComputeCapability), tc.dev); err != nil {
			t.Fatalf("%s %v (%s): %v", tc.dev.Name, tc.q, p.Note, err)
		}
		passes, merges := 0, 0
		for i, l := range p.Launches {
			if l.Entry == EntryMergeState {
				merges++
				if l.Module != ModuleMHAPrefill {
					t.Errorf("%s: merge_state in %s", tc.dev.Name, l.Module)
				}
				continue
			}
			passes++
			want := tc.entry
			if want == "" { // the causal pass over the new tokens by TMA, the chunks' by cp.async
				want = EntryPrefillWG
				if i == 0 {
					want = EntryPrefillTMA
				}
			}
			if l.Module != tc.module || l.Entry != want || l.Block[0] != tc.threads {
				t.Errorf("%s %v: pass %d runs %s.%s with %d threads, want %s.%s with %d", tc.dev.Name, tc.q, i, l.Module, l.Entry, l.Block[0], tc.module, want, tc.threads)
			}
			maps := 0
			for _, a := range l.Args {
				if a.Kind == core.ArgTensorMap {
					maps++
				}
			}
			if (l.Entry == EntryPrefillTMA) != (maps == 3) {
				t.Errorf("%s %v: pass %d (%s) binds %d descriptors", tc.dev.Name, tc.q, i, l.Entry, maps)
			}
			if err := checkPrefillGrid(p, l, req); err != nil {
				t.Errorf("%s %v: pass %d: %v", tc.dev.Name, tc.q, i, err)
			}
			if !strings.Contains(p.Note, l.Entry) {
				t.Errorf("%s: the note does not name %s: %s", tc.dev.Name, l.Entry, p.Note)
			}
		}
		if passes != merges+1 || merges < 1 {
			t.Errorf("%s %v: %d passes and %d merges, want the causal pass and one a prefix chunk (%s)", tc.dev.Name, tc.q, passes, merges, p.Note)
		}
	}
	req := &core.PlanRequest{Backend: "fa3", Method: core.MHAOneShot, DType: "bf16",
		Dims:   core.PlanDims{Heads: 16, HeadDimQK: 192, HeadDimV: 128, SoftmaxScale: 0.0722},
		Shape:  core.PlanShape{SeqLens: []int64{300}, QLens: []int64{300}},
		Device: h200}
	mha.Method = core.MHAOneShot
	p, err := Plan(mha, req)
	if err != nil {
		t.Fatal(err)
	}
	req.Device = a100
	if err := launch.Check(p, req, specFor(a100.ComputeCapability), a100); err == nil {
		t.Error("an A100 accepted a plan of the Hopper prefill")
	}
}

// TestOneWave checks the cut of a batch whose even share leaves a second,
// part-filled wave: equal requests are cut into one wave where it is
// estimated faster, and on random batches a cut of one item a block is
// never estimated slower than the even share's, fits the slots when it
// differs from it, and covers every key once.
func TestOneWave(t *testing.T) {
	ds := decodeShape{batch: 64, slots: 132, capacity: 64 + 132, itemCost: 1}
	lens := slices.Repeat([]int64{4096}, 64)
	items, _, target := cutItems(lens, ds, true)
	if len(items) != 128 || target != 65 {
		t.Errorf("64 requests of 4096 keys over 132 slots: %d items at %d tiles, want 128 at 65", len(items), target)
	}
	// One request far longer than the rest: one wave would make its items
	// the whole batch's length; the even share stays.
	lens = append(slices.Repeat([]int64{64}, 140), 1<<20)
	ds = decodeShape{batch: len(lens), slots: 132, capacity: len(lens) + 132, itemCost: 1}
	if _, _, target := cutItems(lens, ds, true); target >= 1<<15 {
		t.Errorf("one long request among short ones: cut at %d tiles", target)
	}
	rng := rand.New(rand.NewPCG(5, 9))
	for range 2000 {
		lens, ds := randomCut(rng)
		items, slotOf, target := cutItems(lens, ds, rng.IntN(2) == 0)
		checkCover(t, lens, items)
		if packed(slotOf) {
			continue // TestPackedCut
		}
		slots, cost := ds.slots, ds.costOf(keyTiles(lens))
		tiles, total := tilesOf(lens, cost)
		even := max((total+slots-1)/slots, minTiles+cost)
		for m, _ := cutCount(tiles, even, cost); m > ds.capacity; m, _ = cutCount(tiles, even, cost) {
			even += even/4 + 1
		}
		n0, c0 := cutCount(tiles, even, cost)
		n1, c1 := cutCount(tiles, target, cost)
		if n1 != len(items) {
			t.Fatalf("%d items cut, %d counted", len(items), n1)
		}
		if target != even && (n1 > slots || c1 > (n0+slots-1)/slots*c0) {
			t.Fatalf("lens %v over %d slots: cut at %d (%d items, costliest %d) over the even share %d (%d items, costliest %d)",
				lens, slots, target, n1, c1, even, n0, c0)
		}
		if packs(total, len(lens), n1, c1, packShare(total, slots, cost), slots, cost) {
			t.Fatalf("lens %v over %d slots: one item a block, where the packed cut is estimated faster", lens, slots)
		}
	}
}

// TestPackedCut checks the packed cut (packItems): a ragged batch whose one
// item a block would leave most blocks idle while its longest requests run
// (the bench's h128_ragged64 over an H200's 66 slots of two head blocks) is
// packed, equal requests are not, and on random batches a packed cut has
// every slot up to its last start with an item, costs each slot at most a
// share and one item's cost, fits the grid's capacity and the partial rows
// the workspace has room for (decodeShape.partialRows), and covers every
// key once.
func TestPackedCut(t *testing.T) {
	var ragged []int64
	for i := range 64 {
		ragged = append(ragged, int64(64*math.Pow(512, float64((i*37)%64)/63)))
	}
	// 16 heads: the 16-row body over 132 slots; 128 heads: the 64-row body
	// over two head blocks.
	h16, h128 := hopperNarrow.fullCost, hopperSeesaw.fullCost
	for _, tc := range []struct {
		name        string
		lens        []int64
		slots, full int
		packed      bool
	}{
		{"ragged 64, 128 heads", ragged, 66, h128, true},
		{"ragged 64, 16 heads", ragged, 132, h16, true},
		{"64 x 4096, 16 heads", slices.Repeat([]int64{4096}, 64), 132, h16, false},
		{"128 x 4096, 128 heads", slices.Repeat([]int64{4096}, 128), 66, h128, false},
		{"128 x 16384, 128 heads", slices.Repeat([]int64{16384}, 128), 66, h128, false},
		{"16 x 4096, 128 heads", slices.Repeat([]int64{4096}, 16), 66, h128, false},
		{"one request", []int64{1 << 20}, 132, h16, false},
		{"one slot", ragged, 1, h16, false},
	} {
		ds := decodeShape{batch: len(tc.lens), slots: tc.slots, capacity: len(tc.lens) + tc.slots, itemCost: itemCost, fullCost: tc.full}
		items, slotOf, _ := cutItems(tc.lens, ds, true)
		if packed(slotOf) != tc.packed {
			t.Errorf("%s: packed %v, want %v", tc.name, packed(slotOf), tc.packed)
		}
		checkCover(t, tc.lens, items)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	seen := 0
	for range 4000 {
		lens, ds := randomCut(rng)
		items, slotOf, share := cutItems(lens, ds, true)
		checkCover(t, lens, items)
		if !packed(slotOf) {
			continue
		}
		seen++
		cost := ds.costOf(keyTiles(lens))
		if len(items) > ds.capacity {
			t.Fatalf("lens %v over %d slots: %d items, capacity %d", lens, ds.slots, len(items), ds.capacity)
		}
		load := make([]int, ds.slots)
		pieces := make([]int, ds.batch)
		for k, w := range items {
			s := slotOf[k]
			if s < 0 || s >= ds.slots || k > 0 && s < slotOf[k-1] || k > 0 && s > slotOf[k-1]+1 || k == 0 && s != 0 {
				t.Fatalf("lens %v over %d slots: item %d in slot %d after slot %d", lens, ds.slots, k, s, slotOf[max(k-1, 0)])
			}
			load[s] += int(w.KVEnd-w.KVBegin+mlaBN-1)/mlaBN + cost
			pieces[w.Request]++
		}
		for s, l := range load {
			if l > share+cost {
				t.Fatalf("lens %v over %d slots: slot %d costs %d tiles, share %d", lens, ds.slots, s, l, share)
			}
		}
		var rows int
		for _, n := range pieces {
			if n > 1 {
				rows += n
			}
		}
		if int64(rows) > ds.partialRows() {
			t.Fatalf("lens %v over %d slots: %d partial items, room for %d", lens, ds.slots, rows, ds.partialRows())
		}
	}
	if seen < 100 {
		t.Errorf("%d random batches packed of 4000", seen)
	}
}

// TestItemCostFollowsTheBatch checks costOf: a batch that fills the slots
// at the body's full cost is cut at it, one that leaves them idle at
// itemCost, so that batch 1 is cut as before (64 items of two tiles at 128
// heads and 4096 keys); and the cut of a filling batch is the cut at the
// full cost.
func TestItemCostFollowsTheBatch(t *testing.T) {
	var ragged []int64
	for i := range 64 {
		ragged = append(ragged, int64(64*math.Pow(512, float64((i*37)%64)/63)))
	}
	const h16, h128 = 132, 66 // the slots of an H100's 132 multiprocessors at 16 and 128 heads
	for _, tc := range []struct {
		name        string
		lens        []int64
		slots, full int
		want        int
	}{
		{"128 heads, 1 x 4096", []int64{4096}, h128, 8, itemCost},
		{"128 heads, 4 x 4096", slices.Repeat([]int64{4096}, 4), h128, 8, itemCost}, // 4 x 136 < 66 x 9
		{"128 heads, 5 x 4096", slices.Repeat([]int64{4096}, 5), h128, 8, 8},
		{"128 heads, 16 x 4096", slices.Repeat([]int64{4096}, 16), h128, 8, 8},
		{"128 heads, ragged 64", ragged, h128, 8, 8},
		{"16 heads, 1 x 16384", []int64{16384}, h16, 4, itemCost}, // 516 < 132 x 5
		{"16 heads, 2 x 16384", []int64{16384, 16384}, h16, 4, 4},
		{"16 heads, ragged 64", ragged, h16, 4, 4},
		{"at the edge", []int64{(h16*5 - 4) * mlaBN}, h16, 4, 4},
		{"a tile short of it", []int64{(h16*5 - 5) * mlaBN}, h16, 4, itemCost},
		{"no full cost", ragged, h16, 0, itemCost},
	} {
		ds := decodeShape{batch: len(tc.lens), slots: tc.slots, capacity: len(tc.lens) + tc.slots, itemCost: itemCost, fullCost: tc.full}
		if got := ds.costOf(keyTiles(tc.lens)); got != tc.want {
			t.Errorf("%s: an item costs %d tiles, want %d", tc.name, got, tc.want)
		}
		flat := ds
		flat.itemCost, flat.fullCost = tc.want, 0
		items, slotOf, share := cutItems(tc.lens, ds, true)
		fItems, fSlotOf, fShare := cutItems(tc.lens, flat, true)
		if !slices.Equal(items, fItems) || !slices.Equal(slotOf, fSlotOf) || share != fShare {
			t.Errorf("%s: the cut differs from the cut at %d tiles an item", tc.name, tc.want)
		}
	}
	// Batch 1's items, the chunks a row of it has in the combine
	// (mla_combine's comment): 64 at 128 heads; 64 or 128 at 16.
	for _, tc := range []struct {
		name        string
		n           int64
		slots, full int
		want        int
	}{
		{"128 heads, 1 x 4096", 4096, h128, 8, 64},
		{"128 heads, 1 x 16384", 16384, h128, 8, 64},
		{"16 heads, 1 x 4096", 4096, h16, 4, 64},
		{"16 heads, 1 x 16384", 16384, h16, 4, 128},
	} {
		ds := decodeShape{batch: 1, slots: tc.slots, capacity: 1 + tc.slots, itemCost: itemCost, fullCost: tc.full}
		if items, _, _ := cutItems([]int64{tc.n}, ds, true); len(items) != tc.want {
			t.Errorf("%s: %d items, want %d", tc.name, len(items), tc.want)
		}
	}
}

// randomCut is a random batch of lengths from 0 to 2^17 keys, over 1 to
// 300 slots, an item costing 1 to 8 tiles, and 0 to 11 more where the
// batch fills the slots.
func randomCut(rng *rand.Rand) ([]int64, decodeShape) {
	n := 1 + rng.IntN(300)
	lens := make([]int64, n)
	for i := range lens {
		lens[i] = rng.Int64N(1 << uint(1+rng.IntN(17)))
	}
	slots := 1 + rng.IntN(300)
	cost := 1 + rng.IntN(8)
	return lens, decodeShape{batch: n, slots: slots, capacity: n + slots, itemCost: cost, fullCost: cost + rng.IntN(12), maxRows: 1}
}

// keyTiles is the key tiles of lens.
func keyTiles(lens []int64) int {
	_, total := tilesOf(lens, 0)
	return total
}

// tilesOf is each length's key tiles, and the batch's cost: its tiles and
// cost an item.
func tilesOf(lens []int64, cost int) (tiles []int, total int) {
	tiles = make([]int, len(lens))
	for i, l := range lens {
		tiles[i] = int((l + mlaBN - 1) / mlaBN)
		total += tiles[i] + cost
	}
	return tiles, total
}

// packed reports whether a cut's slots hold several items (packItems).
func packed(slotOf []int) bool {
	for k, s := range slotOf {
		if s != k {
			return true
		}
	}
	return false
}

// checkCover fails t unless items cover every key of lens once, each
// request's in order, split numbered from 0.
func checkCover(t *testing.T, lens []int64, items []core.WorkItem) {
	t.Helper()
	covered := make([]int64, len(lens))
	split := make([]int32, len(lens))
	for _, w := range items {
		if int64(w.KVBegin) != covered[w.Request] || w.KVEnd <= w.KVBegin || w.Split != split[w.Request] {
			t.Fatalf("lens %v: item %+v after %d keys and %d items", lens, w, covered[w.Request], split[w.Request])
		}
		covered[w.Request] = int64(w.KVEnd)
		split[w.Request]++
	}
	if !slices.Equal(covered, lens) {
		t.Fatalf("lens %v: items cover %v", lens, covered)
	}
}

// TestCombineCutsShortBatches: the combine of a batch of at most
// combineShortRows query rows runs mla_combine, four blocks a row (a column
// range each), so that its few rows still spread over the GPU; one of at
// most combineManyRows a block a row; a longer batch runs
// mla_combine_rows, a warp a row over at most a wave of blocks.
func TestCombineCutsShortBatches(t *testing.T) {
	for _, tc := range []struct {
		heads, batch int
		qlen         int64
		entry        string
		grid         [3]uint32
	}{
		{16, 1, 1, EntryCombine, [3]uint32{1, 16, 4}}, {128, 1, 1, EntryCombine, [3]uint32{1, 128, 4}},
		{16, 8, 1, EntryCombine, [3]uint32{8, 16, 4}}, {16, 2, 4, EntryCombine, [3]uint32{2, 64, 4}},
		{16, 9, 1, EntryCombine, [3]uint32{9, 16, 1}}, {128, 2, 1, EntryCombine, [3]uint32{2, 128, 1}},
		{16, 16, 4, EntryCombine, [3]uint32{16, 64, 1}}, {16, 17, 4, EntryCombineRows, [3]uint32{136, 1, 1}},
		{16, 64, 3, EntryCombineRows, [3]uint32{384, 1, 1}},
		// Unsplit on the host (no combine); a graph plan's grid stops at
		// a wave.
		{128, 64, 1, EntryCombineRows, [3]uint32{1024, 1, 1}}, {128, 128, 1, EntryCombineRows, [3]uint32{8 * 132, 1, 1}},
	} {
		for _, graph := range []bool{false, true} {
			if !graph && tc.batch >= 64 && tc.heads == 128 {
				continue
			}
			req := request(tc.heads, 64, slices.Repeat([]int64{4096}, tc.batch), slices.Repeat([]int64{tc.qlen}, tc.batch), graph)
			p, err := Plan(fa3MLA, req)
			if err != nil {
				t.Fatal(err)
			}
			l := p.Launches[len(p.Launches)-1]
			if l.Entry != tc.entry || l.Grid != tc.grid {
				t.Errorf("%d heads, batch %d, %d query tokens, graph %v: combine %s grid %v, want %s %v", tc.heads, tc.batch, tc.qlen, graph, l.Entry, l.Grid, tc.entry, tc.grid)
			}
		}
	}
}

// TestLongExtendsAreCutIntoWorkRequests: a request of more query tokens
// than a work request holds (launch.MaxQLen) is cut into work requests of
// at most that many, in order, scheduled on the device by
// mla_schedule_split, whose page-table offsets the decode reads as its
// kv_indptr; the plan passes the host's check, in a graph or not, and one
// that is not a graph's reads the key lengths too. Batches of MaxQLen
// tokens or fewer keep mla_schedule and the kv_indptr tensor.
func TestLongExtendsAreCutIntoWorkRequests(t *testing.T) {
	seq, q := []int64{1300, 300, 4097, 65}, []int64{1000, 2, 129, 64}
	wantSplit := []int32{}
	for i, n := range q {
		for off := int64(0); off < n; off += launch.MaxQLen {
			wantSplit = append(wantSplit, int32(i), int32(off), int32(min(launch.MaxQLen, n-off)))
		}
	}
	for _, heads := range []int{16, 128} {
		// eager, a graph's without a bound (its page table follows the
		// lengths) and a graph's with one.
		for _, mode := range []string{"eager", "graph", "graph_bound"} {
			graph := mode != "eager"
			req := request(heads, 64, seq, q, graph)
			if mode == "graph_bound" {
				req.Shape.MaxSeqLen = 8192
				req.Shape.NumPages = 8192/64 + 1
			}
			p, err := Plan(fa3MLA, req)
			if err != nil {
				t.Fatal(err)
			}
			if err := launch.Check(p, req, Spec(), h200); err != nil {
				t.Fatalf("%d heads %s (%s): %v", heads, mode, p.Note, err)
			}
			want := core.PlanReadsDeclared | core.PlanReadsQLens
			if mode != "graph_bound" {
				want |= core.PlanReadsSeqLens
			}
			if p.Reads != want {
				t.Errorf("%d heads %s: reads %v, want %v", heads, mode, p.Reads, want)
			}
			if len(p.Metadata) != 1 || p.Metadata[0].Name != "split" || !slices.Equal(p.Metadata[0].Int32s, wantSplit) {
				t.Fatalf("%d heads %s: metadata %+v, want the split map %v", heads, mode, p.Metadata, wantSplit)
			}
			s, d := p.Launches[0], p.Launches[1]
			var work, kvIndptr core.Arg
			for _, a := range s.Args {
				if a.Param == "work_indptr" {
					work = a
				}
			}
			for _, a := range d.Args {
				if a.Param == "kv_indptr" {
					kvIndptr = a
				}
			}
			works := int64(len(wantSplit) / 3)
			switch {
			case s.Entry != EntryScheduleSplit || !s.PerBatch:
				t.Errorf("%d heads %s: first launch %s (per batch %v), want %s", heads, mode, s.Entry, s.PerBatch, EntryScheduleSplit)
			case work.Kind != core.ArgWorkspace || !reflect.DeepEqual(kvIndptr, core.Arg{Param: "kv_indptr", Kind: core.ArgWorkspace, Offset: work.Offset}):
				t.Errorf("%d heads %s: the decode reads kv_indptr %+v, the schedule writes %+v", heads, mode, kvIndptr, work)
			case work.Offset+4*works > p.WorkspaceBytes:
				t.Errorf("%d heads %s: %d work requests' offsets at %d past the workspace of %d bytes", heads, mode, works, work.Offset, p.WorkspaceBytes)
			case !strings.Contains(p.Note, fmt.Sprintf("%d work request(s) of at most %d query tokens", works, launch.MaxQLen)):
				t.Errorf("%d heads %s: note %q", heads, mode, p.Note)
			}
		}
	}
	req := request(16, 64, seq, []int64{64, 2, 64, 64}, true)
	req.Shape.MaxSeqLen, req.Shape.NumPages = 8192, 8192/64+1
	p, err := Plan(fa3MLA, req)
	if err != nil {
		t.Fatal(err)
	}
	args := p.Launches[1].Args
	ip := slices.IndexFunc(args, func(a core.Arg) bool { return a.Param == "kv_indptr" })
	if p.Launches[0].Entry != EntrySchedule || len(p.Metadata) != 0 || ip < 0 || !reflect.DeepEqual(args[ip], tensorArg("kv_indptr")) {
		t.Errorf("a batch of %d query tokens a request at most: %s, metadata %+v, args %+v", launch.MaxQLen, p.Launches[0].Entry, p.Metadata, args)
	}
}

// TestPrefixChunkPlans: a prefix chunk's pass (shape.prefix_chunk, sglang's
// attn_attend_prefix_cache call) is one pass without a mask of every
// request's new tokens over its keys in the chunk, a request without any
// included, into out and lse: no merge, no prefix tensors, on Hopper and
// elsewhere; the host's check accepts it, and a kernel whose catalog entry
// takes no prefix chunks gets no request.
func TestPrefixChunkPlans(t *testing.T) {
	a100 := h200
	a100.Name, a100.ComputeCapability, a100.SMs, a100.MaxSharedPerBlock = "NVIDIA A100", 80, 108, 166912
	k := core.Kernel{Name: "flash_attn_varlen_func+merge_state", Method: core.MHAChunkedKV, DTypes: []string{"bf16"}, HeadDims: []int{192, 128}, PageSizes: []int{1}, PrefixChunks: true}
	for _, dev := range []core.DeviceInfo{h200, a100} {
		req := &core.PlanRequest{
			Backend: "fa3", Method: core.MHAChunkedKV, DType: "bf16",
			Dims:   core.PlanDims{Heads: 16, HeadDimQK: 192, HeadDimV: 128, SoftmaxScale: 0.0722},
			Shape:  core.PlanShape{SeqLens: []int64{1024, 0, 300}, QLens: []int64{500, 7, 2000}, PrefixChunk: true},
			Device: dev,
		}
		if err := k.Covers(req); err != nil {
			t.Fatal(err)
		}
		p, err := Plan(k, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := launch.Check(p, req, specFor(dev.ComputeCapability), dev); err != nil {
			t.Fatalf("%s (%s): %v", dev.Name, p.Note, err)
		}
		var causal core.Arg
		for _, a := range p.Launches[0].Args {
			if a.Param == "causal" {
				causal = a
			}
		}
		if len(p.Launches) != 1 || causal.Int != 0 || p.WorkspaceBytes != 0 || !strings.HasPrefix(p.Note, "prefix chunk") {
			t.Errorf("%s: %d launches, causal %d, workspace %d: %s", dev.Name, len(p.Launches), causal.Int, p.WorkspaceBytes, p.Note)
		}
		for _, ts := range p.Tensors {
			if ts.Name == "k" && ts.Shape[0] != 1324 || ts.Name == "k_prefix" {
				t.Errorf("%s: tensor %s %v: want k over the chunk's 1324 keys and no prefix tensors", dev.Name, ts.Name, ts.Shape)
			}
		}
		var ranges []int32
		for _, m := range p.Metadata {
			if m.Name == "k_ranges" {
				ranges = m.Int32s
			}
		}
		if !slices.Equal(ranges, []int32{0, 1024, 1024, 1024, 1024, 1324}) {
			t.Errorf("%s: key ranges %v", dev.Name, ranges)
		}
		k.PrefixChunks = false
		if err := k.Covers(req); !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), "prefix_chunk") {
			t.Errorf("a kernel without prefix_chunks: %v", err)
		}
		k.PrefixChunks = true
	}
}

// TestSparseStepsAtDeepSeekContext: a DeepSeek-V3.2 step of sglang's
// chunked prefill (8192 new tokens) and a 256-request verify graph, at
// the model's context length over a larger pool, make sparse requests
// the host accepts and the planner plans: a sparse request's keys are
// its tokens' top-k, whatever bound the step gives its lengths.
func TestSparseStepsAtDeepSeekContext(t *testing.T) {
	step := core.StepRequest{
		Backend: "dsa", Mode: core.ModeExtend, Method: core.MLA,
		Model: core.StepModel{Heads: 16, KVLoraRank: 512, QKRopeHeadDim: 64, QKNopeHeadDim: 128, VHeadDim: 128,
			SoftmaxScale: 0.1352, IndexTopK: 2048},
		Pool:   core.StepPool{PageSize: 64, Slots: 200064, MaxTokens: 200000, RowWidth: 163844, ContextLen: 163840},
		Batch:  core.StepBatch{Size: 1, QLens: []int64{8192}, Graph: true},
		Device: h200,
	}
	verify := step
	verify.Mode, verify.Batch = core.ModeTargetVerify, core.StepBatch{Size: 256, QueryTokens: 4, Graph: true}
	for name, s := range map[string]core.StepRequest{"extend of 8192": step, "verify of 256 x 4": verify} {
		req, _, err := s.PlanRequest()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p, err := Plan(dsaSparse, &req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := launch.Check(p, &req, Spec(), h200); err != nil {
			t.Fatalf("%s (%s): %v", name, p.Note, err)
		}
	}
}

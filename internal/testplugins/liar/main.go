package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/backendkit"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/ptxstub"
	"github.com/attnplug/attnplug/launch"
	"github.com/attnplug/attnplug/wire"
	"github.com/hashicorp/go-hclog"
)

// lies is what the plugin was told to lie about.
type lies struct {
	set       map[string]bool
	imageMiB  int
	variant   string
	log       string
	planSleep time.Duration
}

func parse(spec, log string) (lies, error) {
	l := lies{set: map[string]bool{}, log: log}
	for _, item := range strings.Split(spec, ",") {
		key, val, _ := strings.Cut(strings.TrimSpace(item), "=")
		var err error
		switch key {
		case "":
		case "unknown_entry", "unknown_module", "grid", "block", "shared", "unbound", "schedule", "shape",
			"wrong_kernel", "hash", "no_plan", "no_modules", "crash_plan", "holds_for_batch", "swapped_params", "example_plan",
			"ignores_kv_dtype", "ignores_top_k", "ignores_query_split", "catalog_fp8", "catalog_sparse", "catalog_split":
			l.set[key] = true
		case "image_mib":
			l.imageMiB, err = strconv.Atoi(val)
			if err == nil && (l.imageMiB < 0 || l.imageMiB > 256) {
				err = fmt.Errorf("%d is outside [0, 256]", l.imageMiB)
			}
		case "variant":
			l.variant = val
		case "plan_sleep":
			l.planSleep, err = time.ParseDuration(val)
		default:
			err = fmt.Errorf("unknown lie %q", key)
		}
		if err != nil {
			return l, fmt.Errorf("ATTNPLUG_LIE: %s: %w", item, err)
		}
	}
	return l, nil
}

// The plugin's one catalog kernel, module and entries.
const (
	kernelName = "liar_mla_decode"
	moduleName = "liar_mla"
	splitEntry = "liar_mla_split"
	mergeEntry = "liar_mla_combine"
	// simpleEntry is the kernel of the example_plan lie: one block per
	// request and head, reading nothing of the lengths.
	simpleEntry = "liar_mla_simple"
	// chunk is how many keys one schedule item covers.
	chunk = 256
)

// kernel is what the plugin's kernels do: the dense MLA decode of a bf16
// cache, pages of 1 or 64 tokens, DeepSeek's head dims.
func kernel() core.Kernel {
	return core.Kernel{
		Name: kernelName, Library: "liar", Method: core.MLA, DTypes: []string{"bf16"}, HeadDims: []int{576, 512},
		PageSizes: []int{1, 64}, CUDAGraph: true,
		Hardware: []core.Hardware{{Platforms: []core.Platform{core.PlatformCUDA}, MinCapability: 80}},
	}
}

// catalog is what the plugin's catalog claims: kernel, or more with the
// catalog_fp8 and catalog_sparse lies.
func (l lies) catalog() []core.Kernel {
	k := kernel()
	if l.set["catalog_fp8"] {
		k.DTypes = append(k.DTypes, "fp8_e4m3")
	}
	if l.set["catalog_sparse"] {
		k.Sparse = true
	}
	if l.set["catalog_split"] {
		k.QuerySplit = true
	}
	return []core.Kernel{k}
}

func entries() []core.Entry {
	ptr := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamPtr} }
	return []core.Entry{
		{Name: splitEntry, Params: []core.Param{ptr("q"), ptr("kv_cache"), ptr("kv_indptr"), ptr("kv_indices"), ptr("schedule"), ptr("partial"),
			{Name: "items", Kind: core.ParamI32}, {Name: "page_size", Kind: core.ParamI32}, {Name: "scale", Kind: core.ParamF32}}},
		{Name: mergeEntry, Params: []core.Param{ptr("partial"), ptr("schedule"), ptr("out"), ptr("lse"), {Name: "items", Kind: core.ParamI32}}},
		{Name: simpleEntry, Params: []core.Param{ptr("q"), ptr("kv_cache"), ptr("kv_indptr"), ptr("kv_indices"), ptr("out"), ptr("lse"),
			{Name: "batch", Kind: core.ParamI32}, {Name: "scale", Kind: core.ParamF32}}},
	}
}

// backend is the lying backend.
type backend struct {
	l lies
	// planning counts the plan calls in flight under plan_sleep; each
	// notes the count it found ("in_flight N").
	planning atomic.Int32
}

func (b *backend) Describe(context.Context) (*core.Description, error) {
	return &core.Description{Name: "liar", Version: "0.0.1-liar", DeviceCode: true, Handlers: []core.HandlerInfo{{
		Name: "liar", Reads: core.Reads{Facts: core.FactMode}, Methods: []core.Method{core.MLA}, Kernels: b.l.catalog(),
	}}}, nil
}

func (b *backend) Dispatch(_ context.Context, req *core.Request) (core.Method, error) {
	if req.Backend != "liar" {
		return 0, fmt.Errorf("liar: %w %q", core.ErrUnknownBackend, req.Backend)
	}
	return core.MLA, nil
}

// RunKernel runs the catalog's kernel with the reference kernels, so that
// the honest plugin passes every check of attnplug conform.
func (b *backend) RunKernel(ctx context.Context, req *core.KernelRequest) (*core.KernelResult, error) {
	if req.Method != core.MLA {
		return nil, fmt.Errorf("%w: no liar kernel for %s", core.ErrNoKernel, req.Method)
	}
	return backendkit.Run(ctx, b.l.catalog()[0], req, nil)
}

// note appends what to the call log, if any.
func (b *backend) note(what string) {
	if b.l.log == "" {
		return
	}
	f, err := os.OpenFile(b.l.log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	fmt.Fprintln(f, what)
	f.Close()
}

// KernelModules hands a fake PTX module for dev: text that looks like PTX,
// of the size asked, never compiled.
func (b *backend) KernelModules(_ context.Context, dev core.DeviceInfo) ([]core.KernelModule, error) {
	b.note("modules")
	if b.l.set["no_modules"] {
		return nil, fmt.Errorf("%w: liar: no device code, as asked", core.ErrNoPlan)
	}
	arch := fmt.Sprintf("compute_%d", dev.ComputeCapability)
	var sb strings.Builder
	// The image declares the entries' signatures as the kernels take
	// them; with swapped_params, Entries below swaps two of them.
	sb.Write(ptxstub.Image(arch, "fake PTX of the liar test plugin "+b.l.variant+": its kernels only return", entries()))
	for sb.Len() < b.l.imageMiB<<20 {
		sb.WriteString("// padding of a large module image ......................................\n")
	}
	img := []byte(sb.String())
	m := core.KernelModule{
		Name: moduleName, Platform: core.PlatformCUDA, Arch: arch, Format: core.FormatPTX,
		Image: img, SHA256: core.ImageSHA256(img), Entries: entries(), Kernels: []string{kernelName},
	}
	if b.l.set["hash"] {
		m.SHA256 = core.ImageSHA256(append(img, '\n'))
	}
	if b.l.set["swapped_params"] {
		// Entries says partial comes before items; the kernel takes a
		// pointer and an i32 in the other order.
		p := m.Entries[1].Params
		i := slices.IndexFunc(p, func(x core.Param) bool { return x.Name == "items" })
		p[0], p[i] = p[i], p[0]
	}
	return []core.KernelModule{m}, nil
}

// PlanKernel plans the split-KV decode of req, then tells the lies asked.
func (b *backend) PlanKernel(_ context.Context, req *core.PlanRequest) (*core.Plan, error) {
	b.note("plan")
	if b.l.planSleep > 0 {
		// A plan that takes this long to compute: noted with the plan
		// calls the plugin holds at once.
		n := b.planning.Add(1)
		defer b.planning.Add(-1)
		b.note(fmt.Sprintf("in_flight %d", n))
		time.Sleep(b.l.planSleep)
	}
	if b.l.set["crash_plan"] {
		fmt.Fprintln(os.Stderr, "liar: crashing in PlanKernel, as asked")
		os.Exit(2)
	}
	if b.l.set["no_plan"] {
		return nil, fmt.Errorf("%w: liar: no plan, as asked", core.ErrNoPlan)
	}
	if req.Backend != "liar" {
		return nil, fmt.Errorf("liar: %w %q", core.ErrUnknownBackend, req.Backend)
	}
	// What the plugin reads of the request: all of it, or, told to ignore
	// a field, the request as a plugin built before that field existed
	// sees it.
	read := *req
	if b.l.set["ignores_kv_dtype"] {
		read.KVDType = ""
	}
	if b.l.set["ignores_top_k"] {
		read.Dims.TopK = 0
	}
	if b.l.set["ignores_query_split"] {
		read.QuerySplit = false
	}
	if err := kernel().Covers(&read); err != nil {
		return nil, fmt.Errorf("liar: %w", err)
	}
	// The tensors of the request, as the SDK gives them: an FP8 cache's
	// kv_scale and a sparse layer's topk_indices among them.
	tensors, err := launch.Tensors(req)
	if err != nil {
		return nil, err
	}
	p := honest(req, tensors)
	b.lie(p, req)
	return p, nil
}

// honest is the plan of req: one schedule item per chunk of each
// request's keys, a split launch over items and heads writing partial
// results to the workspace, and a combine launch over items and heads.
func honest(req *core.PlanRequest, tensors []core.TensorSpec) *core.Plan {
	var sched []core.WorkItem
	var meta []int32
	for i, n := range req.Shape.SeqLens {
		for split, begin := int32(0), int64(0); begin < n; split, begin = split+1, begin+chunk {
			end := min(begin+chunk, n)
			w := core.WorkItem{Request: int32(i), KVBegin: int32(begin), KVEnd: int32(end), Split: split}
			sched = append(sched, w)
			meta = append(meta, w.Request, w.KVBegin, w.KVEnd, w.Split)
		}
	}
	items := uint32(len(sched))
	heads := uint32(req.Dims.Heads)
	tensor := func(name string) core.Arg { return core.Arg{Param: name, Kind: core.ArgTensor, Name: name} }
	schedule := core.Arg{Param: "schedule", Kind: core.ArgMeta, Name: "schedule"}
	partial := core.Arg{Param: "partial", Kind: core.ArgWorkspace}
	n := core.Arg{Param: "items", Kind: core.ArgInt, Int: int64(items)}
	return &core.Plan{
		Kernel:         kernelName,
		Tensors:        tensors,
		Metadata:       []core.MetaBuffer{{Name: "schedule", Int32s: meta}},
		Schedule:       sched,
		WorkspaceBytes: int64(items) * int64(heads) * int64(req.Dims.HeadDimV+1) * 4,
		Launches: []core.Launch{
			{Module: moduleName, Entry: splitEntry, Grid: [3]uint32{items, heads, 1}, Block: [3]uint32{128, 1, 1}, SharedBytes: 48 << 10,
				Args: []core.Arg{tensor("q"), tensor("kv_cache"), tensor("kv_indptr"), tensor("kv_indices"), schedule, partial, n,
					{Param: "page_size", Kind: core.ArgInt, Int: int64(req.Shape.PageSize)},
					{Param: "scale", Kind: core.ArgFloat, Float: req.Dims.SoftmaxScale}}},
			{Module: moduleName, Entry: mergeEntry, Grid: [3]uint32{items, heads, 1}, Block: [3]uint32{128, 1, 1},
				Args: []core.Arg{partial, schedule, tensor("out"), tensor("lse"), n}},
		},
		Note: fmt.Sprintf("%d items of at most %d keys", items, chunk),
	}
}

// lie changes the honest plan p as asked.
func (b *backend) lie(p *core.Plan, req *core.PlanRequest) {
	first := &p.Launches[0]
	dev := req.Device
	for lie := range b.l.set {
		switch lie {
		case "unknown_entry":
			first.Entry = "liar_mla_split_v2"
		case "unknown_module":
			first.Module = "liar_mla_extra"
		case "grid":
			first.Grid[1] = uint32(max(dev.MaxGrid[1], 65535) + 1)
		case "block":
			first.Block[0] = uint32(max(dev.MaxThreadsPerBlock, 1024) * 2)
		case "shared":
			first.SharedBytes = uint32(max(dev.MaxSharedPerBlock, 48<<10) + 1)
		case "unbound":
			last := &p.Launches[1]
			for i, a := range last.Args {
				if a.Param == "lse" {
					last.Args = append(last.Args[:i], last.Args[i+1:]...)
					break
				}
			}
		case "schedule":
			i := len(p.Schedule) - 1
			w := &p.Schedule[i]
			w.KVEnd = int32(req.Shape.SeqLens[w.Request]) + chunk
			p.Metadata[0].Int32s[4*i+2] = w.KVEnd
		case "shape":
			for i := range p.Tensors {
				if p.Tensors[i].Name == "out" {
					p.Tensors[i].Shape[1]++
				}
			}
		case "holds_for_batch":
			// Claims to hold for the batch size, but its grid follows the
			// lengths (its items): a host would replay a wrong grid.
			if req.Graph && req.Shape.MaxSeqLen > 0 {
				p.Reads = core.PlanReadsDeclared | core.PlanReadsQLens
				p.Metadata, p.Schedule = nil, nil
				for i := range p.Launches {
					for j, a := range p.Launches[i].Args {
						if a.Kind == core.ArgMeta {
							p.Launches[i].Args[j] = core.Arg{Param: a.Param, Kind: core.ArgWorkspace}
						}
					}
				}
			}
		case "wrong_kernel":
			p.Kernel = "flash_attn_with_kvcache"
		case "example_plan":
			// The plan of the first example of device code in the docs:
			// one launch over requests x heads that binds the batch size
			// and the scale, neither the lengths nor the query layout.
			t := func(n string) core.Arg { return core.Arg{Param: n, Kind: core.ArgTensor, Name: n} }
			p.Metadata, p.Schedule, p.WorkspaceBytes, p.Note = nil, nil, 0, "one block per request and head"
			p.Launches = []core.Launch{{Module: moduleName, Entry: simpleEntry,
				Grid: [3]uint32{uint32(len(req.Shape.SeqLens)), uint32(req.Dims.Heads), 1}, Block: [3]uint32{128, 1, 1},
				Args: []core.Arg{t("q"), t("kv_cache"), t("kv_indptr"), t("kv_indices"), t("out"), t("lse"),
					{Param: "batch", Kind: core.ArgInt, Int: int64(len(req.Shape.SeqLens))},
					{Param: "scale", Kind: core.ArgFloat, Float: req.Dims.SoftmaxScale}}}}
		}
	}
}

func main() {
	l, err := parse(os.Getenv("ATTNPLUG_LIE"), os.Getenv("ATTNPLUG_LIE_LOG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	wire.Main(func(hclog.Logger) (core.Backend, error) { return &backend{l: l}, nil })
}

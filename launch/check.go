package launch

import (
	"fmt"
	"slices"

	"github.com/attnplug/attnplug/core"
)

// PlanError is a plan the host refuses, with the reason.
type PlanError struct {
	// Launch is the index of the offending launch, or -1.
	Launch int
	// Reason says what is wrong.
	Reason string
}

func (e *PlanError) Error() string {
	if e.Launch >= 0 {
		return fmt.Sprintf("plan refused: launch %d: %s", e.Launch, e.Reason)
	}
	return "plan refused: " + e.Reason
}

func refuse(launch int, format string, args ...any) error {
	return &PlanError{Launch: launch, Reason: fmt.Sprintf(format, args...)}
}

// Check verifies plan p, answered for req, against the modules it may
// launch and the device: the plan is within the bounds of a plan
// (core.Plan.CheckSize: launches, metadata, workspace); every launch names
// a known entry and binds each
// of its parameters exactly once with a value of the right kind; grids,
// blocks and shared memory are within dev's limits; every tensor argument
// names a tensor the plan declares; the declared tensors have the shapes
// req implies; metadata and workspace offsets stay inside their buffers;
// and every schedule item stays inside its request's keys. It returns a
// *PlanError naming the first problem.
func Check(p *core.Plan, req *core.PlanRequest, modules []core.KernelModule, dev core.DeviceInfo) error {
	if p == nil {
		return refuse(-1, "no plan")
	}
	if len(p.Launches) == 0 {
		return refuse(-1, "no launches")
	}
	if err := checkTensors(p, req); err != nil {
		return err
	}
	bound := boundTensors(p)
	if err := checkMadeFor(p, req, bound); err != nil {
		return err
	}
	if err := p.CheckSize(); err != nil {
		return refuse(-1, "%v", err)
	}
	meta := map[string]int64{}
	for _, m := range p.Metadata {
		if m.Name == "" {
			return refuse(-1, "metadata buffer without a name")
		}
		if _, dup := meta[m.Name]; dup {
			return refuse(-1, "metadata buffer %q declared twice", m.Name)
		}
		meta[m.Name] = 4 * int64(len(m.Int32s))
	}
	if err := checkSchedule(p, req, meta); err != nil {
		return err
	}
	sparse := req.Dims.TopK > 0 // the keys of each query token are its top-k, whatever the lengths
	// A plan that reads the query lengths alone may carry metadata of them
	// (the work requests of a long extend); a schedule cuts the keys.
	if r := p.Reads.Effective(); r&core.PlanReadsSeqLens == 0 && !sparse && (len(p.Schedule) > 0 || len(p.Metadata) > 0 && r&core.PlanReadsQLens == 0) {
		return refuse(-1, "the plan declares it does not read the lengths (reads %s), yet carries metadata or a schedule of them", r)
	}
	if r := p.Reads.Effective(); r&core.PlanReadsSeqLens == 0 && !sparse && PagesPerRequest(req) == 0 {
		// The tensors' shapes follow the lengths (the keys of the ragged
		// layout, the pages of a page table without a declared bound).
		return refuse(-1, "the plan declares it does not read the lengths (reads %s), but its tensors' shapes follow them: only an MLA graph request with shape.max_seq_len has shapes that do not", r)
	}
	if r := p.Reads.Effective(); r&core.PlanReadsQLens == 0 {
		return refuse(-1, "the plan declares it does not read the query lengths (reads %s), but its tensors have a row per query token", r)
	}
	tensors := map[string]core.TensorSpec{}
	for _, t := range p.Tensors {
		tensors[t.Name] = t
	}
	mods := map[string]*core.KernelModule{}
	for i := range modules {
		mods[modules[i].Name] = &modules[i]
	}
	for i, l := range p.Launches {
		m, ok := mods[l.Module]
		if !ok {
			return refuse(i, "unknown module %q", l.Module)
		}
		e, ok := m.Entry(l.Entry)
		if !ok {
			return refuse(i, "module %q has no entry %q", l.Module, l.Entry)
		}
		if err := checkDims(i, l, dev); err != nil {
			return err
		}
		if err := checkLaunchFeatures(i, l, dev); err != nil {
			return err
		}
		if err := checkArgs(i, l, e, bindings{tensors, meta, p.WorkspaceBytes}); err != nil {
			return err
		}
	}
	return checkBound(p, bound)
}

// boundTensors returns the tensors some launch of p binds: by address
// (ArgTensor, or a struct field of one) or through a TMA descriptor. (An
// ArgStride reads a tensor's strides, not its data.)
func boundTensors(p *core.Plan) map[string]bool {
	bound := map[string]bool{}
	for _, l := range p.Launches {
		for _, a := range l.Args {
			switch a.Kind {
			case core.ArgTensor, core.ArgTensorMap:
				bound[a.Name] = true
			case core.ArgStruct:
				for _, f := range a.Fields {
					if f.Arg.Kind == core.ArgTensor {
						bound[f.Arg.Name] = true
					}
				}
			}
		}
	}
	return bound
}

// checkMadeFor checks that the launches read what makes req the request
// it is, beyond the shapes checkTensors compared: the scale of an FP8
// cache (kv_scale) and the indexer's top-k of a sparse layer
// (topk_indices). A plan whose launches do not read them was made for
// another request (a bf16 cache, a dense layer), whatever it declares.
// p's tensors are the layout's (checkTensors).
func checkMadeFor(p *core.Plan, req *core.PlanRequest, bound map[string]bool) error {
	for _, t := range p.Tensors {
		if (t.Name == "kv_scale" || t.Name == "topk_indices") && !bound[t.Name] {
			return refuse(-1, "no launch binds tensor %q, and %s: the plan was not made for this request", t.Name, requestNeeds(t.Name, req))
		}
	}
	return nil
}

// indexTensors are the tensors of the layout that restate the batch's
// shape, which a plan was asked for: a plan that reads the lengths may
// carry what they hold in its metadata instead of binding them
// (attnplug conform checks that its kernels can know each request's keys
// and query rows).
var indexTensors = map[string]bool{"kv_indptr": true, "seq_lens": true, "qo_indptr": true}

// checkBound checks that some launch of p binds every tensor of the
// layout that holds the batch's data (all but indexTensors), unless it
// has no element (the prefix of MHA_CHUNKED_KV without one): an unbound
// tensor is an input the kernels never read or an output they never
// write.
func checkBound(p *core.Plan, bound map[string]bool) error {
	for _, t := range p.Tensors {
		if bound[t.Name] || indexTensors[t.Name] || t.Bytes() == 0 {
			continue
		}
		what := "an input the kernels never read"
		if t.Output {
			what = "an output the kernels never write"
		}
		return refuse(-1, "no launch binds tensor %q, %s (every tensor of the layout but kv_indptr, seq_lens and qo_indptr is bound)", t.Name, what)
	}
	return nil
}

// requestNeeds says why req's layout has, or lacks, tensor name: the
// request's cache dtype for kv_scale and kv_cache, its sparsity for
// topk_indices and the page table; "" for the others.
func requestNeeds(name string, req *core.PlanRequest) string {
	switch name {
	case "kv_scale", "kv_cache":
		if req.KVDType == "" {
			return fmt.Sprintf("the request's KV cache is of its dtype, %s (no kv_dtype)", req.DType)
		}
		return fmt.Sprintf("the request's KV cache is kv_dtype %s", req.KVDType)
	case "topk_indices", "kv_indptr", "kv_indices", "seq_lens", "qo_indptr":
		if req.Method != core.MLA {
			return ""
		}
		if req.Dims.TopK > 0 {
			return fmt.Sprintf("the request is sparse (dims.top_k %d)", req.Dims.TopK)
		}
		return "the request is dense (no dims.top_k)"
	}
	return ""
}

func checkDims(i int, l core.Launch, dev core.DeviceInfo) error {
	threads := uint64(1)
	for d := 0; d < 3; d++ {
		if l.Grid[d] == 0 || l.Block[d] == 0 {
			return refuse(i, "grid %v or block %v has a zero dimension", l.Grid, l.Block)
		}
		if dev.MaxGrid[d] > 0 && uint64(l.Grid[d]) > uint64(dev.MaxGrid[d]) {
			return refuse(i, "grid dimension %d is %d, the device allows %d", d, l.Grid[d], dev.MaxGrid[d])
		}
		threads *= uint64(l.Block[d])
	}
	if dev.MaxThreadsPerBlock > 0 && threads > uint64(dev.MaxThreadsPerBlock) {
		return refuse(i, "block %v has %d threads, the device allows %d", l.Block, threads, dev.MaxThreadsPerBlock)
	}
	if dev.MaxSharedPerBlock > 0 && uint64(l.SharedBytes) > uint64(dev.MaxSharedPerBlock) {
		return refuse(i, "%d bytes of shared memory per block, the device allows %d", l.SharedBytes, dev.MaxSharedPerBlock)
	}
	return nil
}

// checkTensors checks that the plan declares the tensors req implies, with
// their shapes.
func checkTensors(p *core.Plan, req *core.PlanRequest) error {
	want, err := Tensors(req)
	if err != nil {
		return refuse(-1, "%v", err)
	}
	got := map[string]core.TensorSpec{}
	for _, t := range p.Tensors {
		if _, dup := got[t.Name]; dup {
			return refuse(-1, "tensor %q declared twice", t.Name)
		}
		if t.Bytes() < 0 {
			return refuse(-1, "tensor %q: dtype %q, shape %v", t.Name, t.DType, t.Shape)
		}
		got[t.Name] = t
	}
	because := func(name string) string {
		if why := requestNeeds(name, req); why != "" {
			return " (" + why + ")"
		}
		return ""
	}
	for _, w := range want {
		g, ok := got[w.Name]
		if !ok {
			return refuse(-1, "tensor %q is not declared%s", w.Name, because(w.Name))
		}
		if g.Strided != w.Strided {
			return refuse(-1, "tensor %q declared strided %t, the layout's is strided %t", w.Name, g.Strided, w.Strided)
		}
		if g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) || g.Output != w.Output {
			note := because(w.Name)
			if w.Name == "kv_cache" && g.DType == w.DType {
				note = ""
			}
			return refuse(-1, "tensor %q declared as %s %v (output %t), the batch gives %s %v (output %t)%s",
				w.Name, g.DType, g.Shape, g.Output, w.DType, w.Shape, w.Output, note)
		}
		delete(got, w.Name)
	}
	for _, t := range p.Tensors {
		if _, extra := got[t.Name]; extra {
			return refuse(-1, "tensor %q is not one the host binds%s", t.Name, because(t.Name))
		}
	}
	return nil
}

// checkSchedule checks every work item against the batch: a known request,
// a key range inside its keys, and a schedule buffer that encodes exactly
// the items.
func checkSchedule(p *core.Plan, req *core.PlanRequest, meta map[string]int64) error {
	if len(p.Schedule) == 0 {
		if _, ok := meta["schedule"]; ok {
			return refuse(-1, "metadata \"schedule\" without a Schedule to check it against")
		}
		return nil
	}
	var buf []int32
	for _, m := range p.Metadata {
		if m.Name == "schedule" {
			buf = m.Int32s
		}
	}
	if len(buf) != 4*len(p.Schedule) {
		return refuse(-1, "metadata \"schedule\" holds %d values, the schedule has %d items of 4", len(buf), len(p.Schedule))
	}
	// The keys of each request: its length, or, for a sparse request,
	// whose items are query tokens, the top-k of each.
	n := int32(len(req.Shape.SeqLens))
	keys := func(r int32) int64 { return req.Shape.SeqLens[r] }
	if k := req.Dims.TopK; k > 0 {
		var tokens int64
		for _, q := range req.Shape.QLens {
			tokens += q
		}
		n, keys = int32(tokens), func(int32) int64 { return int64(k) }
	}
	for i, w := range p.Schedule {
		if w.Request < 0 || w.Request >= n {
			return refuse(-1, "schedule item %d: request %d, the batch has %d", i, w.Request, n)
		}
		seq := keys(w.Request)
		if w.KVBegin < 0 || w.KVBegin > w.KVEnd || int64(w.KVEnd) > seq {
			return refuse(-1, "schedule item %d: keys [%d, %d) of request %d, which has %d", i, w.KVBegin, w.KVEnd, w.Request, seq)
		}
		if w.Split < 0 {
			return refuse(-1, "schedule item %d: split %d", i, w.Split)
		}
		if buf[4*i] != w.Request || buf[4*i+1] != w.KVBegin || buf[4*i+2] != w.KVEnd || buf[4*i+3] != w.Split {
			return refuse(-1, "schedule item %d: metadata %v differs from %+v", i, buf[4*i:4*i+4], w)
		}
	}
	return nil
}

package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
	"github.com/attnplug/attnplug/registry"
)

// planProbe is a plan request the device-code check sends an MLA planner
// whatever its catalog lists, and what it probes.
type planProbe struct {
	what string
	req  core.PlanRequest
}

// planProbes returns the plan requests the device-code check sends the
// MLA planner name, whose catalog kernel is k, beyond the batches of its
// catalog (planBatches), whatever the catalog lists: a plugin must answer
// each with no plan (core.ErrNoPlan) or a plan that passes the host's
// check, since a plugin that ignores a field of the request (an FP8
// cache, a top-k) plans it as the request it knows. They are
//
//   - an FP8 cache and a bf16 one, of a dense and of a sparse layer
//     (dims.top_k 2048), and an FP8 cache in a CUDA graph;
//   - page sizes 2, 3, 16, 17, 128 and 4096;
//   - 1, 3, 20, 127 and 1024 heads; head dims 192/128 and 512/512;
//   - a target verify of 64 query tokens (launch.MaxQLen), an extend of
//     1000 query tokens over a prefix (more than a work request's
//     launch.MaxQLen), one request of one key, one of 131072 keys, and
//     4096 requests.
//
// The shapes are of the kernel's own sparsity, cache and page size (its
// first, else 64), so that a probe changes one thing at a time; every
// probe is a valid request (launch.CheckRequest).
func planProbes(name string, k core.Kernel, dev core.DeviceInfo) []planProbe {
	page := 64
	if len(k.PageSizes) > 0 {
		page = k.PageSizes[0]
	}
	topK := 0
	if k.Sparse {
		topK = 2048
	}
	base := func(seq, q []int64) core.PlanRequest {
		return core.PlanRequest{Backend: name, Method: core.MLA, DType: "bf16",
			Dims:   core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352, TopK: topK},
			Shape:  core.PlanShape{SeqLens: seq, QLens: q, PageSize: page},
			Device: dev}
	}
	three := func() core.PlanRequest { return base([]int64{1, 300, 4097}, []int64{1, 1, 1}) }
	var out []planProbe
	add := func(what string, r core.PlanRequest) {
		// The cache holds every request's pages, and the bound's.
		s := &r.Shape
		var used int64
		for _, n := range s.SeqLens {
			used += (n + int64(s.PageSize) - 1) / int64(s.PageSize)
		}
		s.NumPages = int(max(used, (s.MaxSeqLen+int64(s.PageSize)-1)/int64(s.PageSize)) + 16)
		out = append(out, planProbe{what, r})
	}
	for _, sparse := range []bool{false, true} {
		for _, kvd := range []string{"", "fp8_e4m3"} {
			r := three()
			r.Dims.TopK, r.KVDType = 0, kvd
			what := "a dense layer"
			if sparse {
				r.Dims.TopK, what = 2048, "a sparse layer (dims.top_k 2048)"
			}
			if kvd == "" {
				what += " over a bf16 cache"
			} else {
				what += " over an FP8 cache (kv_dtype fp8_e4m3)"
			}
			add(what, r)
		}
	}
	graph := three()
	graph.KVDType, graph.Graph, graph.Shape.MaxSeqLen = "fp8_e4m3", true, 8192
	add("an FP8 cache in a CUDA graph (shape.max_seq_len 8192)", graph)
	for _, p := range []int{2, 3, 16, 17, 128, launch.MaxPageSize} {
		r := three()
		r.Shape.PageSize = p
		add(fmt.Sprintf("page size %d", p), r)
	}
	for _, h := range []int{1, 3, 20, 127, launch.MaxHeads} {
		r := three()
		r.Dims.Heads = h
		add(fmt.Sprintf("%d heads", h), r)
	}
	for _, d := range [][2]int{{192, 128}, {512, 512}} {
		r := three()
		r.Dims.HeadDimQK, r.Dims.HeadDimV = d[0], d[1]
		add(fmt.Sprintf("head dims %d/%d", d[0], d[1]), r)
	}
	add(fmt.Sprintf("a target verify of %d query tokens", launch.MaxQLen),
		base([]int64{launch.MaxQLen, 300, 4097}, []int64{launch.MaxQLen, 2, 7}))
	add("an extend of 1000 query tokens over a prefix of 300", base([]int64{1300, 300, 4097}, []int64{1000, 2, 200}))
	add("one request of one key", base([]int64{1}, []int64{1}))
	add("one request of 131072 keys", base([]int64{131072}, []int64{1}))
	rng := rand.New(rand.NewPCG(31, 37))
	var seq, q []int64
	for range 4096 {
		seq, q = append(seq, 1+rng.Int64N(64)), append(q, 1)
	}
	add("4096 requests", base(seq, q))
	return out
}

// probePlans sends h's MLA planner the probes (planProbes) and checks each
// answer as a host does: no plan, or a plan that passes registry.CheckPlan
// (which refuses a plan made for another request: an FP8 cache's kv_scale
// or a sparse layer's topk_indices its launches never read, tensors of
// other dtypes or shapes) and lets its kernels know every request's keys
// and query rows; the plans that pass are kept for the device-run check.
// A failure names the probe and the request.
func (s *suite) probePlans(ctx context.Context, c *Check, kp core.KernelPlanner, h core.HandlerInfo, mods []core.KernelModule, t *planTally) {
	k, ok := h.Kernel(core.MLA)
	if !ok {
		return
	}
	for _, pr := range planProbes(h.Name, k, *s.opts.Device) {
		if s.dead != nil {
			return
		}
		req := pr.req
		t.probes++
		p, err := s.plan(ctx, kp, &req)
		switch {
		case errors.Is(err, core.ErrNoPlan):
			continue
		case err != nil:
			c.problem("%s: probe %s: MLA plan for %s: %v (want a plan or no plan)", h.Name, pr.what, batchString(&req), err)
			continue
		}
		t.probePlans++
		if err := registry.CheckPlan(p, &req, h, mods); err != nil {
			c.problem("%s: probe %s: MLA plan for %s: %v", h.Name, pr.what, batchString(&req), err)
			continue
		}
		if why := layoutProblem(p, &req); why != "" {
			c.problem("%s: probe %s: MLA plan for %s: %s", h.Name, pr.what, batchString(&req), why)
			continue
		}
		s.runs = append(s.runs, planRun{h: h, mods: mods, req: req})
	}
}

package registry

import (
	"testing"

	"github.com/attnplug/attnplug/core"
)

// TestPlanKeySeparatesWhatAPlanDependsOn: the keys the plan cache keeps
// plans by (core.PlanRequest.Key): requests that differ in what
// every plan depends on (the cache's dtype, the top-k of a sparse layer,
// the dims) never share a cached plan; requests that differ only in what
// the plan declares it does not read do.
func TestPlanKeySeparatesWhatAPlanDependsOn(t *testing.T) {
	base := core.PlanRequest{
		Backend: "dsa", Method: core.MLA, DType: "bf16",
		Dims:  core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352, TopK: 2048},
		Shape: core.PlanShape{SeqLens: []int64{100, 5000}, QLens: []int64{1, 1}, PageSize: 64, NumPages: 200},
	}
	reads := core.PlanReadsDeclared | core.PlanReadsQLens
	key := base.Key(reads)
	for name, change := range map[string]func(r *core.PlanRequest){
		"kv_dtype": func(r *core.PlanRequest) { r.KVDType = "fp8_e4m3" },
		"top_k":    func(r *core.PlanRequest) { r.Dims.TopK = 1024 },
		"dense":    func(r *core.PlanRequest) { r.Dims.TopK = 0 },
		"heads":    func(r *core.PlanRequest) { r.Dims.Heads = 128 },
		"dtype":    func(r *core.PlanRequest) { r.DType = "fp16" },
	} {
		r := base
		change(&r)
		if r.Key(reads) == key {
			t.Errorf("%s: a request that differs in %s shares the plan key", name, name)
		}
	}
	r := base
	r.Shape.SeqLens = []int64{7, 9}
	if r.Key(reads) != key {
		t.Errorf("seq_lens: a plan that does not read the lengths is keyed by them")
	}
}

// TestPlanCacheIsBoundedInBytes: plans of tens of MiB each (within core's
// bounds) are kept up to planBudget bytes, the most recent first; small
// ones up to planCapacity.
func TestPlanCacheIsBoundedInBytes(t *testing.T) {
	var c planCache
	big := &core.Plan{Metadata: []core.MetaBuffer{{Int32s: make([]int32, 10<<20/4)}}} // 10 MiB
	key := func(i int) [32]byte { return [32]byte{byte(i), byte(i >> 8)} }
	for i := range 100 {
		c.put(key(i), planOutcome{plan: big})
	}
	if c.bytes > planBudget || c.order.Len() != planBudget/(10<<20) {
		t.Errorf("100 plans of 10 MiB: %d kept, %d bytes; want %d, at most %d bytes", c.order.Len(), c.bytes, planBudget/(10<<20), planBudget)
	}
	if _, ok := c.get(key(99)); !ok {
		t.Errorf("the newest plan was evicted")
	}
	if _, ok := c.get(key(0)); ok {
		t.Errorf("the oldest plan is still kept")
	}
	var small planCache
	for i := range 2 * planCapacity {
		small.put(key(i), planOutcome{plan: &core.Plan{}})
	}
	if small.order.Len() != planCapacity || len(small.byKey) != planCapacity {
		t.Errorf("%d small plans: %d kept, want %d", 2*planCapacity, small.order.Len(), planCapacity)
	}
}

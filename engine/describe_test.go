package engine

import (
	"slices"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry"
)

// TestRouteReadsForClients: the engine API says reads in facts and
// constants; declared quantities with such a form are said in it, and a
// route whose quantities have none is not cacheable, so that a client
// that keys by facts never mixes answers.
func TestRouteReadsForClients(t *testing.T) {
	acme := registry.RouteInfo{Name: "acme_mla", Cacheable: true, Reads: core.Reads{Quantities: []core.Read{
		{Quantity: core.QuantityForwardMode}, {Quantity: core.QuantityPiecewiseCUDAGraph},
		{Quantity: core.QuantityPrefixSum, At: []int64{16384}},
	}}}
	r := routeToProto(acme)
	if !r.GetCacheable() || !slices.Equal(r.GetReads().GetFacts(), []string{"mode", "piecewise_cuda_graph"}) ||
		!slices.Equal(r.GetReads().GetPrefixSumAtLeast(), []int64{16384}) {
		t.Errorf("acme_mla: %v", r)
	}
	dtype := acme
	dtype.Reads.Quantities = append(slices.Clone(acme.Reads.Quantities), core.Read{Quantity: core.QuantityKVCacheDType})
	if r := routeToProto(dtype); r.GetCacheable() {
		t.Errorf("a route that reads the dtype, which facts cannot say, is cacheable: %v", r)
	}
}

// TestRouteReadsConditions: a condition of the reads reaches clients with
// its fact by name and its reads in facts and constants.
func TestRouteReadsConditions(t *testing.T) {
	dsa := registry.RouteInfo{Name: "dsa", Cacheable: true, Reads: core.Reads{
		Facts: core.FactDSAUseMHA | core.FactDSAUseMHASet | core.FactMode, MaxSeqLenAtMost: []int64{2048},
		Conditions: []core.ReadsCondition{{When: core.FactDSAUseMHASet, Reads: core.Reads{Quantities: []core.Read{{Quantity: core.QuantityDSAUseMHA}}}}},
	}}
	r := routeToProto(dsa)
	cs := r.GetReads().GetConditions()
	if !r.GetCacheable() || len(cs) != 1 || cs[0].GetWhen() != "dsa_use_mha_set" || !slices.Equal(cs[0].GetReads().GetFacts(), []string{"dsa_use_mha"}) {
		t.Errorf("dsa: %v", r)
	}
}

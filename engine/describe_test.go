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

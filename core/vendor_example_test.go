package core_test

import (
	"context"
	"fmt"
	"log"

	"github.com/attnplug/attnplug/core"
)

// acmeThreshold is a vendor's own prefix threshold.
const acmeThreshold = 16384

// acmeDecide is a vendor's rule: chunked-prefix MHA from its own threshold
// on, MLA otherwise.
func acmeDecide(r *core.Request) core.Method {
	if r.Batch.Mode.IsExtendWithoutSpeculative() && r.Batch.PrefixSum() >= acmeThreshold {
		return core.MHAChunkedKV
	}
	return core.MLA
}

func extendWithPrefix(name string, prefix int64) core.Request {
	r := core.NewRequest(name, core.ModeExtend)
	r.Runtime.Platform = core.PlatformCUDA
	r.Batch.ExtendPrefixLens = []int64{prefix}
	r.Batch.SeqLens = []int64{prefix + 1024}
	return r
}

// A vendor's backend is a RuleBackend: each name it serves is a Rule with
// its Decide function, the Reads it declares (the host caches answers by
// them) and its catalog of Methods.
func ExampleNewRuleBackend_vendor() {
	b, err := core.NewRuleBackend("acme_mla", "1.0.0", nil, core.Rule{
		Name:    "acme_mla",
		Decide:  acmeDecide,
		Reads:   core.Reads{Facts: core.FactMode, PrefixSumAtLeast: []int64{acmeThreshold}},
		Methods: []core.Method{core.MLA, core.MHAChunkedKV},
	}, core.Rule{
		Name:       "acme",
		AliasOf:    "acme_mla",
		Deprecated: `"acme" is the old name of "acme_mla"`,
		Decide:     acmeDecide,
		Reads:      core.Reads{Facts: core.FactMode, PrefixSumAtLeast: []int64{acmeThreshold}},
		Methods:    []core.Method{core.MLA, core.MHAChunkedKV},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, prefix := range []int64{0, 8192, acmeThreshold} {
		req := extendWithPrefix("acme_mla", prefix)
		m, _ := b.Dispatch(ctx, &req)
		fmt.Println(prefix, m)
	}
	req := extendWithPrefix("fa3", 0)
	_, err = b.Dispatch(ctx, &req)
	fmt.Println(err)
	// Output:
	// 0 MLA
	// 8192 MLA
	// 16384 MHA_CHUNKED_KV
	// acme_mla: unknown backend "fa3"
}

// Reads declares what a rule reads; the host caches answers by the Key of
// the declared Reads, so two requests with the same Key must get the same
// answer. A vendor constant goes in PrefixSumAtLeast or SeqSumAtMost.
func ExampleReads_Key_vendor() {
	reads := core.Reads{Facts: core.FactMode, PrefixSumAtLeast: []int64{acmeThreshold}}
	a := extendWithPrefix("acme_mla", 100)
	b := extendWithPrefix("acme_mla", acmeThreshold-1)
	c := extendWithPrefix("acme_mla", acmeThreshold)
	fmt.Println(reads.Key(&a) == reads.Key(&b), acmeDecide(&a) == acmeDecide(&b))
	fmt.Println(reads.Key(&b) == reads.Key(&c), acmeDecide(&b) == acmeDecide(&c))
	fmt.Println(reads.Cacheable())
	// Output:
	// true true
	// false false
	// true
}

// A vendor may reuse the rules several of sglang's backends share, and
// extend their Reads and Methods with its own.
func ExampleChunkedPrefixRule_vendor() {
	shared := core.ChunkedPrefixRule{OneShot: true}
	rule := core.Rule{
		Name: "acme_fa",
		Decide: func(r *core.Request) core.Method {
			if r.Runtime.DeterministicInference {
				return core.MLASubtype(r)
			}
			return shared.Decide(r)
		},
		Reads:   shared.Reads(),
		Methods: shared.Methods(),
	}
	rule.Reads.Facts |= core.FactDeterministicInference
	req := extendWithPrefix("acme_fa", 0)
	req.Batch.MaxChunkCapacity = 1 << 20
	fmt.Println(rule.Decide(&req))
	req.Runtime.DeterministicInference = true
	fmt.Println(rule.Decide(&req))
	// Output:
	// MHA_ONE_SHOT
	// MLA
}

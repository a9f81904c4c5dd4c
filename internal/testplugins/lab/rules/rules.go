// Package rules holds the rules of the lab test plugin (see its command's
// documentation): Decide reads one quantity of each kind, Declarations
// declares them, and Breaks break the plugin on command.
package rules

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/backendkit"
	"github.com/attnplug/attnplug/core"
)

// Name is the plugin's family name and first backend name; NameB shares
// its rules but answers decode batches otherwise (the rules read the name).
const (
	Name  = "lab"
	NameB = "lab_b"
)

// The thresholds the rules compare with.
const (
	PrefixThreshold   = 1000  // prefix_sum >= 1000
	CapacityThreshold = 65536 // max_chunk_capacity >= 65536
	LongSequence      = 2048  // seq_max > 2048
	MinCapability     = 100   // compute_capability >= 10.0
	ManySequences     = 4     // seq_count >= 4
	LongPrefix        = 512   // prefix_max >= 512
)

// Decide is the lab's rule:
//
//  1. inside a piecewise CUDA graph: MLA;
//  2. an fp8_e5m2 KV cache: MHA;
//  3. lab_b on a decode batch: MHA_CHUNKED_KV;
//  4. compute capability 10.0 or newer with a sequence longer than 2048:
//     MHA_CHUNKED_KV;
//  5. an extend batch whose prefix sum reaches 1000: MHA_ONE_SHOT when the
//     chunk capacity is at least 65536, else MHA_CHUNKED_KV;
//  6. four or more sequences whose longest prefix reaches 512: MHA;
//  7. on hip: MLA_FUSED_ROPE_ROCM;
//  8. anything else: MLA.
func Decide(r *core.Request) core.Method {
	rt, b := &r.Runtime, &r.Batch
	switch {
	case rt.PiecewiseCUDAGraph:
		return core.MLA
	case rt.KVCacheDType == "fp8_e5m2":
		return core.MHA
	case r.Backend == NameB && b.Mode == core.ModeDecode:
		return core.MHAChunkedKV
	case rt.ComputeCapability >= MinCapability && b.MaxSeqLen() > LongSequence:
		return core.MHAChunkedKV
	case b.Mode.IsExtend() && b.PrefixSum() >= PrefixThreshold:
		if b.MaxChunkCapacity >= CapacityThreshold {
			return core.MHAOneShot
		}
		return core.MHAChunkedKV
	case len(b.SeqLens) >= ManySequences && core.QuantityPrefixMax.Value(r) >= LongPrefix:
		return core.MHA
	case rt.Platform == core.PlatformHIP:
		return core.MLAFusedRoPEROCm
	}
	return core.MLA
}

// Declarations are what Decide reads.
func Declarations() []core.Read {
	return []core.Read{
		{Quantity: core.QuantityPiecewiseCUDAGraph},
		{Quantity: core.QuantityKVCacheDType},
		{Quantity: core.QuantityBackend},
		{Quantity: core.QuantityForwardMode},
		{Quantity: core.QuantityComputeCapability, At: []int64{MinCapability}},
		{Quantity: core.QuantitySeqMax, At: []int64{LongSequence + 1}},
		{Quantity: core.QuantityPrefixSum, At: []int64{PrefixThreshold}},
		{Quantity: core.QuantityMaxChunkCapacity, At: []int64{CapacityThreshold}},
		{Quantity: core.QuantitySeqCount, At: []int64{ManySequences}},
		{Quantity: core.QuantityPrefixMax, At: []int64{LongPrefix}},
		{Quantity: core.QuantityPlatform},
	}
}

// Conditions are where Decide reads less: inside a piecewise CUDA graph,
// the flag alone (the first step answers).
func Conditions() []core.ReadsCondition {
	return []core.ReadsCondition{{When: core.FactPiecewiseCUDAGraph, Reads: core.Reads{Quantities: []core.Read{{Quantity: core.QuantityPiecewiseCUDAGraph}}}}}
}

// lyingCondition is the condition of the break condition_lies: that with a
// dense KV cache dtype (bf16, fp8_e4m3, ...) Decide reads the CUDA graph
// flag alone, when it reads everything of the other steps too.
func lyingCondition() core.ReadsCondition {
	return core.ReadsCondition{When: core.FactKVCacheDenseDType, Reads: core.Reads{Quantities: []core.Read{{Quantity: core.QuantityPiecewiseCUDAGraph}}}}
}

// Methods are the methods Decide can answer.
func Methods() []core.Method {
	return []core.Method{core.MLA, core.MHA, core.MHAChunkedKV, core.MHAOneShot, core.MLAFusedRoPEROCm}
}

// Kernels is the lab's kernel catalog: one kernel a method.
func Kernels() []core.Kernel {
	var out []core.Kernel
	for _, m := range Methods() {
		out = append(out, core.Kernel{
			Name: "lab_" + strings.ToLower(m.String()), Library: "lab", Method: m,
			DTypes: []string{"bf16", "fp8_e4m3"}, HeadDims: []int{576, 512}, PageSizes: []int{1, 64},
			Hardware: []core.Hardware{{Platforms: []core.Platform{core.PlatformCUDA, core.PlatformHIP}}},
		})
	}
	return out
}

// Breaks say how the plugin misbehaves.
type Breaks struct {
	Undeclared    []core.Quantity
	OffByOne      bool
	ConditionLies bool
	RareMethod    bool
	Time          bool
	Stdout        bool
	Mutate        bool
	Sleep         time.Duration
	Catalog       string
}

// Parse reads a comma-separated list of breaks.
func Parse(spec string) (Breaks, error) {
	var b Breaks
	for _, item := range strings.Split(spec, ",") {
		key, val, _ := strings.Cut(strings.TrimSpace(item), "=")
		var err error
		switch key {
		case "":
		case "undeclared":
			var q core.Quantity
			q, err = core.ParseQuantity(val)
			b.Undeclared = append(b.Undeclared, q)
		case "off_by_one":
			b.OffByOne = true
		case "condition_lies":
			b.ConditionLies = true
		case "rare_method":
			b.RareMethod = true
		case "time":
			b.Time = true
		case "stdout":
			b.Stdout = true
		case "mutate":
			b.Mutate = true
		case "sleep":
			b.Sleep, err = time.ParseDuration(val)
		case "catalog":
			switch val {
			case "dtype", "headdim", "hardware", "method":
				b.Catalog = val
			default:
				err = fmt.Errorf("want dtype, headdim, hardware or method")
			}
		default:
			err = fmt.Errorf("unknown break")
		}
		if err != nil {
			return b, fmt.Errorf("ATTNPLUG_LAB: %s: %w", item, err)
		}
	}
	return b, nil
}

// New returns the lab backend with the breaks of b.
func New(b Breaks, logger core.Logger) (*backendkit.Backend, error) {
	var calls atomic.Int64
	decide := func(r *core.Request) core.Method {
		n := calls.Add(1)
		if b.Sleep > 0 {
			time.Sleep(b.Sleep)
		}
		if b.Stdout && n == 50 {
			fmt.Println("lab: a line on stdout, where go-plugin speaks")
		}
		if b.Mutate {
			slices.Sort(r.Batch.SeqLens)
		}
		if b.RareMethod && len(r.Batch.SeqLens) > 8 && r.Runtime.KVCacheDType == "fp4_e2m1" {
			return core.MHANPU
		}
		if b.Time && r.Batch.Mode == core.ModeDecode && time.Now().UnixMilli()/100%2 == 1 {
			return core.MHA
		}
		return Decide(r)
	}
	var decls []core.Read
	for _, d := range Declarations() {
		if slices.Contains(b.Undeclared, d.Quantity) {
			continue
		}
		if b.OffByOne && d.Quantity == core.QuantityPrefixSum {
			d.At = []int64{PrefixThreshold - 1}
		}
		decls = append(decls, d)
	}
	// A condition stays while the declarations hold its fact and its reads.
	var conds []core.ReadsCondition
	all := Conditions()
	if b.ConditionLies {
		all = append(all, lyingCondition())
	}
	for _, c := range all {
		if r := (core.Reads{Quantities: decls, Conditions: []core.ReadsCondition{c}}); r.Validate() == nil {
			conds = append(conds, c)
		}
	}
	ks := Kernels()
	switch b.Catalog {
	case "dtype":
		ks[0].DTypes = []string{"bf16", "bfloat17"}
	case "headdim":
		ks[1].HeadDims = []int{576, -3}
	case "hardware":
		ks[2].Hardware = []core.Hardware{{MinCapability: 90}}
	case "method":
		ks = append(ks, core.Kernel{Name: "lab_npu", Library: "lab", Method: core.MHANPU, DTypes: []string{"bf16"}})
	}
	rule := func(name string) core.Rule {
		return core.Rule{Name: name, Decide: decide, Reads: core.Reads{Quantities: decls, Conditions: conds}, Methods: Methods(), Kernels: ks}
	}
	return backendkit.NewRules(Name, "1.0.0", logger, rule(Name), rule(NameB))
}

package core

import (
	"context"
	"fmt"
)

// TritonName is the registry name of the triton rules, the fallback of
// every name that no backend serves.
const TritonName = "triton"

// ReferenceNames returns the backend names that sglang's registry
// registers (the handlers of attention_backend_handler.py), in its order:
// the one list of them that the registry, the engine's metrics, the demo
// and the reference comparisons read.
func ReferenceNames() []string {
	return []string{
		"ascend", "flashinfer", "fa3", "flashmla", "cutlass_mla", "fa4",
		"trtllm_mla", "tokenspeed_mla", "aiter", "dsa", "nsa", TritonName, "intel_xpu",
	}
}

// TritonDecide is sglang's handle_attention_triton:
//
//  1. inside a piecewise CUDA graph: MLA;
//  2. with deterministic inference: MLASubtype;
//  3. an extend batch without speculation and a prefix sum of 0: MHA;
//  4. anything else: MLASubtype.
//
// Unlike the reference, which raises on an extend batch without prefix
// lengths, a missing extend_prefix_lens counts as a sum of 0.
func TritonDecide(req *Request) Method {
	if req.Runtime.PiecewiseCUDAGraph {
		return MLA
	}
	if req.Runtime.DeterministicInference {
		return MLASubtype(req)
	}
	if req.Batch.Mode.IsExtendWithoutSpeculative() && req.Batch.PrefixSum() == 0 {
		return MHA
	}
	return MLASubtype(req)
}

// TritonRule is the triton rules as a Rule.
func TritonRule() Rule {
	return Rule{
		Name:    TritonName,
		Decide:  TritonDecide,
		Reads:   Reads{Facts: MLASubtypeReads | FactPiecewiseCUDAGraph | FactDeterministicInference | FactPrefixSumZero},
		Methods: append(MLASubtypeMethods(), MHA),
		Kernels: TritonKernels(),
	}
}

// Triton is the fallback Backend: the triton rules, in process, always
// present. It serves the one name "triton", as core.Backend asks; a host
// answers a name nobody serves by asking it for "triton" (the registry's
// default route and fallback do). It is safe for concurrent use.
type Triton struct{}

// Describe says that Triton serves the name "triton".
func (Triton) Describe(context.Context) (*Description, error) {
	r := TritonRule()
	return &Description{
		Name:    PluginCore,
		Version: Version,
		Handlers: []HandlerInfo{{
			Name: r.Name, Reads: r.Reads, Methods: r.Methods, Kernels: r.Kernels,
		}},
	}, nil
}

// Dispatch decides req by the triton rules; a req.Backend other than
// "triton" is refused with an error wrapping ErrUnknownBackend.
func (Triton) Dispatch(ctx context.Context, req *Request) (Method, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("triton: %w", err)
	}
	if req.Backend != TritonName {
		return 0, fmt.Errorf("%w: %q: the triton backend serves %q", ErrUnknownBackend, req.Backend, TritonName)
	}
	return TritonDecide(req), nil
}

// Version is the version of this attnplug module's core rules.
const Version = "0.2.0"

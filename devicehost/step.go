package devicehost

import (
	"fmt"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/launch/cudaexec"
)

// Tensors are a host's device buffers by the names a plan binds (q,
// kv_cache, kv_indptr, seq_lens, out, lse...: launch.Tensors lists each
// method's).
type Tensors map[string]cudaexec.Buffer

// Bind returns t's buffers in the order of specs, a plan's tensors
// (cudaexec.Prepared.Tensors), whatever order the plan lists them in. A
// tensor the plan binds and t lacks is an error naming it.
func (t Tensors) Bind(specs []core.TensorSpec) ([]cudaexec.Buffer, error) {
	return t.bindInto(make([]cudaexec.Buffer, len(specs)), specs)
}

// bindInto is Bind into out, of len(specs).
func (t Tensors) bindInto(out []cudaexec.Buffer, specs []core.TensorSpec) ([]cudaexec.Buffer, error) {
	for i, s := range specs {
		b, ok := t[s.Name]
		if !ok {
			have := make([]string, 0, len(t))
			for n := range t {
				have = append(have, n)
			}
			return nil, fmt.Errorf("the plan binds tensor %q, which is not among the tensors given (%s)", s.Name, strings.Join(have, ", "))
		}
		out[i] = b
	}
	return out, nil
}

// Step runs one batch of a prepared plan as a serving loop runs a forward
// pass: the plan's PerBatch launches (a scheduler reading the lengths)
// once, then every layer's launches, each on its own tensors (a layer's
// queries, cache and outputs) over the tensors every layer shares (the
// page table and the lengths), on one stream. The launches make no RPC,
// no host copy and no allocation, so a Step can be captured in a CUDA
// graph. A Step is not safe for concurrent use.
type Step struct {
	p      *cudaexec.Prepared
	specs  []core.TensorSpec // p's tensors
	stream cuda.Stream
	shared Tensors
	merged Tensors           // shared and a layer's, reused
	bound  []cudaexec.Buffer // in the plan's order, reused
}

// NewStep returns the Step of p on stream, whose layers share the tensors
// of shared.
func NewStep(p *cudaexec.Prepared, stream cuda.Stream, shared Tensors) *Step {
	specs := p.Tensors()
	return &Step{p: p, specs: specs, stream: stream, shared: shared, merged: Tensors{}, bound: make([]cudaexec.Buffer, len(specs))}
}

// Prepared is the step's plan.
func (s *Step) Prepared() *cudaexec.Prepared { return s.p }

// bind orders the shared tensors and layer's (layer's win on a name both
// give) as the plan binds them.
func (s *Step) bind(layer Tensors) ([]cudaexec.Buffer, error) {
	clear(s.merged)
	for n, b := range s.shared {
		s.merged[n] = b
	}
	for n, b := range layer {
		s.merged[n] = b
	}
	return s.merged.bindInto(s.bound, s.specs)
}

// Batch queues the plan's PerBatch launches, once per step before its
// layers, on the tensors of layer over the shared ones (a scheduler reads
// only shared tensors; the others may be any layer's). It runs inside the
// device's Do, x being its Ctx.
func (s *Step) Batch(x *cuda.Ctx, layer Tensors) error {
	ts, err := s.bind(layer)
	if err != nil {
		return err
	}
	return s.p.LaunchBatch(x, s.stream, ts)
}

// Layer queues the plan's launches that are not PerBatch on the tensors
// of layer over the shared ones. It runs inside the device's Do.
func (s *Step) Layer(x *cuda.Ctx, layer Tensors) error {
	ts, err := s.bind(layer)
	if err != nil {
		return err
	}
	return s.p.LaunchLayer(x, s.stream, ts)
}

// All queues every launch of the plan, in order, on the tensors of layer
// over the shared ones: a batch of one layer.
func (s *Step) All(x *cuda.Ctx, layer Tensors) error {
	ts, err := s.bind(layer)
	if err != nil {
		return err
	}
	return s.p.Launch(x, s.stream, ts)
}

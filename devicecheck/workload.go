package devicecheck

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devicehost"
	"github.com/attnplug/attnplug/launch/cudaexec"
)

// Workload is one kind of kernel check: a batch described by its shape
// and seed, whose tensors it puts on the device (Alloc) and whose outputs
// it compares with the float64 reference (Batch.Verify). There is one
// implementation per kind of kernel: MLA (absorbed-MLA decode, target
// verify and extend over a paged bf16 cache), Quant (the same over an FP8
// cache, and DeepSeek-V3.2's sparse MLA over each token's top-k) and
// Prefill (the MHA methods over ragged tensors). Env.Run runs any of them
// through the Env's Host, as attnplug run --device, bench --gpu, conform
// and the GPU tests do.
type Workload interface {
	// Describe says what the batch is, for people.
	Describe() string
	// Alloc puts the batch's tensors on e's device: its inputs hashed from
	// its seed, copies copies of its KV cache (the layers of a forward
	// pass), its outputs. The caller frees the Batch.
	Alloc(e *Env, copies int) (Batch, error)
}

// Batch is a Workload's tensors on the device.
type Batch interface {
	// Request is the plan request of the batch on its device, without a
	// backend (Env.Run sets it).
	Request() core.PlanRequest
	// Tensors are the tensors of layer (KV cache copy) i, by name.
	Tensors(i int) devicehost.Tensors
	// Layers is the number of KV cache copies.
	Layers() int
	// Outputs are the output and its LSE, which Env.Run poisons before a
	// checked launch.
	Outputs() (out, lse cudaexec.Buffer)
	// Verify compares the outputs, computed from cache copy layer, with the
	// float64 reference on up to rows sampled rows (and counts the poison
	// left anywhere in them).
	Verify(layer, rows int) (Check, error)
	// Cost is what one launch must move and compute at least.
	Cost() Cost
	// Free releases the tensors.
	Free()
}

// Cost is the least work of one launch: the bytes it must read and write
// (each input once at its stored size) and the FLOPs of its products.
type Cost struct {
	Bytes, FLOPs float64
}

// ErrCheckFailed marks a batch whose outputs are outside the tolerances.
var ErrCheckFailed = errors.New("outputs differ from the fp64 reference")

// Run is a checked workload: its batch on the device, the plan prepared
// for it, and the check of one launch. The caller closes it.
type Run struct {
	Batch Batch
	// Prepared is the plan, from the Host's Source, prepared on the device.
	Prepared *cudaexec.Prepared
	// Check is the comparison of one launch with the float64 reference.
	Check Check
	// Step launches the plan on the batch's tensors.
	Step *devicehost.Step
	env  *Env
}

// Run checks w on the Env's device as every caller of the verification
// layer does: its batch allocated (copies KV cache copies), its plan asked
// of the Host's Source for backend (the plugin's device code, checked by
// the Source; devicehost.Host.Plan), its outputs poisoned, one launch on
// cache copy 0, and the outputs compared with the float64 reference on
// rows sampled rows. The error wraps ErrCheckFailed when the outputs are
// outside the tolerances (the Run is then returned too, for its Check),
// core.ErrNoPlan when the Source has no plan for the batch, and
// core.ErrInvalidRequest for a batch the layer cannot make. The caller
// closes the Run.
func (e *Env) Run(ctx context.Context, backend string, w Workload, copies, rows int) (*Run, error) {
	b, err := w.Alloc(e, copies)
	if err != nil {
		return nil, err
	}
	req := b.Request()
	req.Backend = backend
	p, err := e.Host.Plan(ctx, &req)
	if err != nil {
		b.Free()
		return nil, err
	}
	r := &Run{Batch: b, Prepared: p, Step: devicehost.NewStep(p, e.stream, nil), env: e}
	if err := r.Launch(); err != nil {
		r.Close()
		return nil, fmt.Errorf("launching: %w", err)
	}
	if r.Check, err = b.Verify(0, rows); err != nil {
		r.Close()
		return nil, fmt.Errorf("reading the outputs: %w", err)
	}
	if !r.Check.OK() {
		return r, fmt.Errorf("%w: %v (tolerance: relative error %.0e, lse %.0e; unwritten outputs are the poison left)",
			ErrCheckFailed, r.Check, MaxRelErr, MaxLSEErr)
	}
	return r, nil
}

// Launch poisons the batch's outputs and launches the whole plan once on
// cache copy 0.
func (r *Run) Launch() error {
	out, lse := r.Batch.Outputs()
	return r.env.Do(func(x *cuda.Ctx) error {
		if err := poison(x, out, lse); err != nil {
			return err
		}
		return r.Step.All(x, r.Batch.Tensors(0))
	})
}

// Close frees the plan and the batch.
func (r *Run) Close() {
	r.Prepared.Close()
	r.Batch.Free()
}

// Timing is a kernel's time per launch.
type Timing struct {
	// Median is the median over the repetitions, in microseconds.
	Median float64
	// Spread is (max-min)/median over the repetitions.
	Spread float64
}

// Time captures iters launches of the plan's layers (rotating over the
// batch's KV cache copies, as the layers of a forward pass do) in a CUDA
// graph, as a serving host runs a step, replays it reps times after a
// warm-up and returns the time per launch: the device's time, not the
// host's launch rate. A plan with a scheduler (PerBatch launches) runs it
// once, before the capture: the graph times the layers' launches alone.
func (r *Run) Time(iters, reps int) (Timing, error) {
	e, b := r.env, r.Batch
	var ts []float64
	err := e.Do(func(x *cuda.Ctx) error {
		if err := r.Step.Batch(x, b.Tensors(0)); err != nil {
			return err
		}
		g, err := x.Capture(e.stream, func() error {
			for i := range iters {
				if err := r.Step.Layer(x, b.Tensors(i%b.Layers())); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		defer x.DestroyGraph(g)
		ts, err = e.repeat(x, reps, float64(iters), func() error { return x.LaunchGraph(g, e.stream) })
		return err
	})
	if err != nil {
		return Timing{}, err
	}
	return median(ts), nil
}

// StepTime captures a decode step of layers layers as a serving host runs
// it, the plan's PerBatch launches (the scheduler) once and then every
// layer's launches (rotating over the batch's KV cache copies), replays it
// reps times after a warm-up, and returns the time of a step in
// microseconds.
func (r *Run) StepTime(layers, reps int) (Timing, error) {
	e, b := r.env, r.Batch
	var ts []float64
	err := e.Do(func(x *cuda.Ctx) error {
		g, err := x.Capture(e.stream, func() error {
			if err := r.Step.Batch(x, b.Tensors(0)); err != nil {
				return err
			}
			for l := range layers {
				if err := r.Step.Layer(x, b.Tensors(l%b.Layers())); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		defer x.DestroyGraph(g)
		ts, err = e.repeat(x, reps, 1, func() error { return x.LaunchGraph(g, e.stream) })
		return err
	})
	if err != nil {
		return Timing{}, err
	}
	return median(ts), nil
}

// repeat times f (work queued on the Env's stream) once to warm up and
// then reps times, and returns each time in microseconds over per.
func (e *Env) repeat(x *cuda.Ctx, reps int, per float64, f func() error) ([]float64, error) {
	var ts []float64
	for r := -1; r < reps; r++ {
		ms, err := e.timeOnce(x, f)
		if err != nil {
			return nil, err
		}
		if r >= 0 {
			ts = append(ts, ms*1000/per)
		}
	}
	return ts, nil
}

// timeOnce times f's work on the Env's stream, in milliseconds.
func (e *Env) timeOnce(x *cuda.Ctx, f func() error) (float64, error) {
	start, err := x.NewEvent()
	if err != nil {
		return 0, err
	}
	defer x.DestroyEvent(start)
	end, err := x.NewEvent()
	if err != nil {
		return 0, err
	}
	defer x.DestroyEvent(end)
	if err := x.SyncStream(e.stream); err != nil {
		return 0, err
	}
	if err := x.Record(start, e.stream); err != nil {
		return 0, err
	}
	if err := f(); err != nil {
		return 0, err
	}
	if err := x.Record(end, e.stream); err != nil {
		return 0, err
	}
	ms, err := x.Elapsed(start, end)
	return float64(ms), err
}

// median returns the median of ts and their spread.
func median(ts []float64) Timing {
	s := slices.Sorted(slices.Values(ts))
	m := s[len(s)/2]
	return Timing{Median: m, Spread: (s[len(s)-1] - s[0]) / m}
}

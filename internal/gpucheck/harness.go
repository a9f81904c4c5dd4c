package gpucheck

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devicecheck"
	"github.com/attnplug/attnplug/devkernels"
	dsa "github.com/attnplug/attnplug/plugins/dsa/rules"
	fa3 "github.com/attnplug/attnplug/plugins/fa3/rules"
	flashinfer "github.com/attnplug/attnplug/plugins/flashinfer/rules"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
)

// The GPU tests reach the device the one way every command does: a
// devicecheck.Env over a devicehost.Host whose Source is a registry. The
// registry of the tests links the CUDA plugins' own backends in process
// (fa3, flashinfer with flashmla, dsa: their rules, catalogs, device code
// and planners, with no plugin binary, since the GPU machine has no Go
// toolchain to build one), and MHABackend for the plain MHA method, which
// no plugin's catalog runs on CUDA.

// MHAName is the name MHABackend serves.
const MHAName = "mha_test"

// MHABackend serves MHAName: the MHA method (the keys of the new tokens
// alone) through devkernels' varlen prefill, which the plugins run for
// MHA_ONE_SHOT and MHA_CHUNKED_KV; the tests check the three methods
// agree.
type MHABackend struct{ build devkernels.Builder }

var mhaKernel = core.Kernel{Name: "flash_attn_varlen_func", Library: core.LibFlashAttention3, Method: core.MHA,
	DTypes: []string{"bf16"}, HeadDims: []int{192, 128}, PageSizes: []int{1}}

func (b *MHABackend) Describe(context.Context) (*core.Description, error) {
	return &core.Description{Name: MHAName, Version: "1.0.0", DeviceCode: true, Handlers: []core.HandlerInfo{{
		Name: MHAName, Reads: core.Reads{Facts: core.FactMode}, Methods: []core.Method{core.MHA}, Kernels: []core.Kernel{mhaKernel},
	}}}, nil
}

func (b *MHABackend) Dispatch(context.Context, *core.Request) (core.Method, error) {
	return core.MHA, nil
}

func (b *MHABackend) KernelModules(_ context.Context, dev core.DeviceInfo) ([]core.KernelModule, error) {
	return b.build.Modules(dev)
}

func (b *MHABackend) PlanKernel(_ context.Context, req *core.PlanRequest) (*core.Plan, error) {
	return devkernels.Plan(mhaKernel, req)
}

// Counted wraps a backend that plans device code and counts the module
// and plan requests that reach it: what a serving loop's registry asks.
type Counted struct {
	core.Backend
	Modules, Plans atomic.Int64
}

func (c *Counted) KernelModules(ctx context.Context, dev core.DeviceInfo) ([]core.KernelModule, error) {
	c.Modules.Add(1)
	return c.Backend.(core.KernelPlanner).KernelModules(ctx, dev)
}

func (c *Counted) PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error) {
	c.Plans.Add(1)
	return c.Backend.(core.KernelPlanner).PlanKernel(ctx, req)
}

// Backends are the backends the tests' registry links: fa3's counted.
type Backends struct {
	FA3 *Counted
	all []core.Backend
}

// NewBackends builds the CUDA plugins' backends, in process.
func NewBackends() (*Backends, error) {
	log := hclog.NewNullLogger()
	b := &Backends{}
	for _, f := range []func(hclog.Logger) (core.Backend, error){fa3.New, flashinfer.New, dsa.New} {
		be, err := f(log)
		if err != nil {
			return nil, fmt.Errorf("in-process backend: %w", err)
		}
		b.all = append(b.all, be)
	}
	b.FA3 = &Counted{Backend: b.all[0]}
	b.all[0] = b.FA3
	b.all = append(b.all, &MHABackend{})
	return b, nil
}

// Source returns the tests' registry over b's backends, which hands their
// modules and plans checked (registry.CheckModules, CheckPlan). The caller
// closes it.
func Source(ctx context.Context, b *Backends) (*registry.Registry, error) {
	return registry.New(ctx, registry.Config{PluginDirs: []string{}, Backends: b.all, Logger: hclog.NewNullLogger(), ExpectedNames: []string{}})
}

// RandomCase draws an MLA batch: heads, page size, batch size and query
// length from the given choices, lengths ragged in [qlen, maxLen] with keys
// totalling at most maxKeys, its queries whole or split (MLA.Split).
func RandomCase(rng *rand.Rand, name string, heads, pageSizes, batches []int, maxQ int, maxLen, maxKeys int64) devicecheck.MLA {
	c := devicecheck.MLA{Name: name, Heads: heads[rng.IntN(len(heads))], PageSize: pageSizes[rng.IntN(len(pageSizes))], Seed: rng.Uint64()}
	n := batches[rng.IntN(len(batches))]
	q := int64(1 + rng.IntN(maxQ))
	cap := max(maxKeys/int64(n), q)
	for range n {
		hi := min(maxLen, cap)
		l := q + rng.Int64N(max(hi-q+1, 1))
		if rng.IntN(4) == 0 {
			l = q + rng.Int64N(min(hi-q+1, 64)) // some short ones
		}
		c.SeqLens = append(c.SeqLens, l)
		c.QLens = append(c.QLens, q)
	}
	c.Split = rng.IntN(2) == 0
	return c
}

// Agreement is the relative difference between two methods' outputs on
// the same batch, over every element.
func Agreement(a, b []uint16) float64 {
	var num, den float64
	for i := range a {
		x, y := devicecheck.BF16(a[i]), devicecheck.BF16(b[i])
		num += (x - y) * (x - y)
		den += y * y
	}
	return math.Sqrt(num / den)
}

// Package rules holds the dispatch rules of the acme_mla backend, a made-up
// vendor backend: chunked-prefix MHA only from its own prefix threshold on,
// MLA otherwise; and the backend itself (New), which also hands the host
// its device code (package kernels).
package rules

import (
	"context"
	"errors"
	"fmt"

	"example.com/acme-backend/kernels"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/refkernels"
	"github.com/hashicorp/go-hclog"
)

// Version is the version of the acme_mla plugin.
const Version = "1.0.0"

// Vendor is who makes acme_mla (Description.Vendor).
const Vendor = "Acme (an example)"

// Name is the backend name acme_mla serves, and the plugin's family name:
// the binary is called attnplug-backend-acme_mla.
const Name = "acme_mla"

// ChunkThreshold is acme's own prefix threshold: an extend batch whose
// prefix lengths add up to at least this many tokens runs chunked-prefix
// MHA. Unlike the shared rules, acme ignores the layer's
// chunked_prefix_cache_threshold.
const ChunkThreshold int64 = 16384

// Decide is acme_mla's rule:
//
//  1. inside a piecewise CUDA graph: MLA;
//  2. an extend batch without speculation whose prefix sum is at least
//     ChunkThreshold: MHA_CHUNKED_KV;
//  3. anything else: MLA.
func Decide(req *core.Request) core.Method {
	if req.Runtime.PiecewiseCUDAGraph {
		return core.MLA
	}
	if req.Batch.Mode.IsExtendWithoutSpeculative() && req.Batch.PrefixSum() >= ChunkThreshold {
		return core.MHAChunkedKV
	}
	return core.MLA
}

// PCIVendorID is the PCI vendor ID of acme's accelerators (made up for
// this example), and PCIDeviceID the ID of the one acme_mla runs on.
const (
	PCIVendorID uint16 = 0xacce
	PCIDeviceID uint16 = 0x0001
)

// Hardware is what acme_mla's kernels run on: an acme accelerator, bound to
// the acme driver. Its platform, "acme", is acme's own: attnplug lists no
// such platform, so the devices say which hardware it is.
func Hardware() []core.Hardware {
	return []core.Hardware{{
		PlatformName: "acme",
		Devices:      []core.PCIDevice{{VendorID: PCIVendorID, DeviceIDs: []uint16{PCIDeviceID}, Drivers: []string{"acme"}}},
	}}
}

// DecodeKernel is acme_mla's one kernel: its absorbed-MLA decode and
// target verify, over a bf16 cache of pages of 1 or 64 tokens; the device
// code that runs it is kernels.Modules', and it can be captured in a CUDA
// graph (its plans for a batch size read the lengths on the device).
func DecodeKernel() core.Kernel {
	return core.Kernel{
		Name: "acme_mla_decode", Library: "acme", Method: core.MLA, DTypes: []string{"bf16"},
		HeadDims: []int{kernels.HeadDimQK, kernels.HeadDimV}, PageSizes: []int{1, 64}, CUDAGraph: true, Hardware: Hardware(),
	}
}

// Rules returns acme_mla's rules. Reads declares exactly what Decide reads
// (the host caches answers by it): the forward mode, the piecewise-graph
// flag, and the prefix sum against acme's own threshold. Methods is every
// method Decide can answer. Kernels, the catalog, covers MLA only: acme
// has no MHA_CHUNKED_KV kernel of its own, which the host then runs with
// its reference kernels.
func Rules() []core.Rule {
	return []core.Rule{{
		Name:   Name,
		Decide: Decide,
		Reads: core.Reads{Quantities: []core.Read{
			{Quantity: core.QuantityForwardMode},
			{Quantity: core.QuantityPiecewiseCUDAGraph},
			{Quantity: core.QuantityPrefixSum, At: []int64{ChunkThreshold}},
		}},
		Methods:  []core.Method{core.MLA, core.MHAChunkedKV},
		Hardware: Hardware(),
		Kernels:  []core.Kernel{DecodeKernel()},
	}}
}

// Backend is the acme_mla backend: acme's rules, its catalog kernel run on
// the CPU by the SDK's reference kernels (RunKernel, for attnplug conform
// and attnplug run), and its device code (KernelModules, PlanKernel: a
// core.KernelPlanner), which the host runs in its own process on its GPU.
// It is safe for concurrent use.
type Backend struct {
	*refkernels.Backend
}

// New returns the acme_mla backend; it is the plugin's wire.Factory. It
// runs its catalog's kernel (RunKernel) with the SDK's reference kernels
// (package refkernels: the float64-checked math of the kernel on the CPU,
// not acme's device kernel), so the binary stays static and passes
// attnplug conform's kernels check with no emulation of its own; and it
// says that it hands the host device code (RuleBackendOptions.DeviceCode),
// which the host asks for only then.
func New(logger hclog.Logger) (core.Backend, error) {
	rb, err := core.NewRuleBackendWith(core.RuleBackendOptions{
		Name: Name, Version: Version, Vendor: Vendor, Logger: logger,
		DeviceCode: true, // Backend is a core.KernelPlanner
	}, Rules()...)
	if err != nil {
		return nil, err
	}
	return &Backend{Backend: refkernels.New(rb)}, nil
}

// KernelModules returns acme's device code for dev: the PTX of
// acme_decode (kernels.Modules). The host calls it once per device. The
// error wraps core.ErrNoPlan for a device acme has no code for.
func (b *Backend) KernelModules(ctx context.Context, dev core.DeviceInfo) ([]core.KernelModule, error) {
	return kernels.Modules(dev, DecodeKernel())
}

// PlanKernel returns the launches that run the catalog kernel of
// req.Method on req's batch (kernels.Plan). The host calls it once per
// batch shape, and keeps the plan by what it reads. The error wraps
// core.ErrUnknownBackend for a name acme does not serve, core.ErrNoPlan
// (naming why) for what acme's device code does not run (MHA_CHUNKED_KV,
// which the host's reference kernels run; an FP8 cache; other head dims
// or page sizes), core.ErrInvalidRequest for a malformed request.
func (b *Backend) PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error) {
	d, err := b.Describe(ctx)
	if err != nil {
		return nil, err
	}
	k, err := refkernels.CatalogKernel(d, req.Backend, req.Method)
	if errors.Is(err, core.ErrNoKernel) {
		return nil, fmt.Errorf("%w: %s's catalog has no kernel for %s, which the host runs with its reference kernels", core.ErrNoPlan, req.Backend, req.Method)
	}
	if err != nil {
		return nil, err
	}
	return kernels.Plan(req, k)
}

package devkernels

import (
	"fmt"

	"github.com/attnplug/attnplug/core"
)

// Modules returns the device code for dev: every module this package
// builds, compiled for dev's architecture. It wraps core.ErrNoPlan when dev
// is not a CUDA device this package has code for.
func Modules(dev core.DeviceInfo) ([]core.KernelModule, error) {
	return nil, fmt.Errorf("%w: not built yet", core.ErrNoPlan)
}

// Plan returns the launches that run kernel k (an entry of a handler's
// catalog) on req's batch. It wraps core.ErrNoPlan for a kernel, method,
// dtype or shape without device code, and core.ErrInvalidRequest for a
// malformed request.
func Plan(k core.Kernel, req *core.PlanRequest) (*core.Plan, error) {
	return nil, fmt.Errorf("%w: not built yet", core.ErrNoPlan)
}

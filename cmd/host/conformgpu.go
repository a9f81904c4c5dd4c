package main

import (
	"context"
	"errors"

	"github.com/attnplug/attnplug/conformance"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devicehost"
)

// gpuLaunch is conform's Launch on this machine's GPU
// (devicehost.Env.RunPlan); close releases the GPU.
func gpuLaunch() (launch conformance.LaunchFunc, close func(), err error) {
	env, err := devicehost.OpenDevice()
	if err != nil {
		return nil, nil, err
	}
	launch = func(ctx context.Context, mods []core.KernelModule, req *core.PlanRequest, plan func(*core.PlanRequest) (*core.Plan, error)) error {
		err := env.RunPlan(ctx, mods, req, plan)
		if errors.Is(err, devicehost.ErrNotCovered) {
			return conformance.ErrLaunchNotCovered
		}
		return err
	}
	return launch, func() { env.Close() }, nil
}

package main

import (
	"context"
	"errors"
	"sync"

	"github.com/attnplug/attnplug/conformance"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devicecheck"
)

// gpuLaunch is conform's Launch on this machine's GPU: the verification
// layer (devicecheck.Env.RunPlan) with the plugin under test as its
// Source; close releases the GPU.
func gpuLaunch() (launch conformance.LaunchFunc, close func(), err error) {
	src := &plannerSource{}
	env, err := devicecheck.Open(src)
	if err != nil {
		return nil, nil, err
	}
	var mu sync.Mutex
	launch = func(ctx context.Context, kp core.KernelPlanner, req *core.PlanRequest) error {
		mu.Lock()
		defer mu.Unlock()
		src.kp = kp
		err := env.RunPlan(ctx, req)
		if errors.Is(err, devicecheck.ErrNotCovered) {
			return conformance.ErrLaunchNotCovered
		}
		return err
	}
	return launch, func() { env.Close() }, nil
}

// plannerSource is the devicehost.Source of conform's Env: the plugin
// under test as conform's checks see it (kp, set before each launch); it
// serves every backend name.
type plannerSource struct{ kp core.KernelPlanner }

func (s *plannerSource) KernelModules(ctx context.Context, _ string, dev core.DeviceInfo) ([]core.KernelModule, error) {
	return s.kp.KernelModules(ctx, dev)
}

func (s *plannerSource) PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error) {
	return s.kp.PlanKernel(ctx, req)
}

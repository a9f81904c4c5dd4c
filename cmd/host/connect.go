package main

import (
	"context"
	"fmt"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry"
)

// serverClient is a connection to a running attnplug serve.
type serverClient struct{}

func dialServer(ctx context.Context, addr string) (*serverClient, error) {
	return nil, fmt.Errorf("--connect %s: not available yet", addr)
}

func (c *serverClient) DispatchBatch(ctx context.Context, reqs []core.Request, out []registry.Result) error {
	return nil
}

func (c *serverClient) Close() error { return nil }

package main

import (
	"context"
	"os"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/plugins/fa3/rules"
	"github.com/attnplug/attnplug/wire"
	"github.com/hashicorp/go-hclog"
)

func main() { wire.Main(newNarrow) }

// narrow is the fa3 backend with the grid of its decode plans narrowed.
type narrow struct {
	core.Backend
	kp core.KernelPlanner
}

func newNarrow(logger hclog.Logger) (core.Backend, error) {
	b, err := rules.New(logger)
	if err != nil {
		return nil, err
	}
	return &narrow{Backend: b, kp: b.(core.KernelPlanner)}, nil
}

func (n *narrow) DispatchBatch(ctx context.Context, reqs []core.Request, out []core.Result) error {
	return n.Backend.(core.BatchBackend).DispatchBatch(ctx, reqs, out)
}

// KernelModules hands fa3's modules; with ATTNPLUG_NARROW=swap, the
// declared parameters "q" and "out" of the decode entries are swapped, a
// pair of pointers no signature check can tell apart.
func (n *narrow) KernelModules(ctx context.Context, dev core.DeviceInfo) ([]core.KernelModule, error) {
	mods, err := n.kp.KernelModules(ctx, dev)
	if err != nil || os.Getenv("ATTNPLUG_NARROW") != "swap" {
		return mods, err
	}
	out := make([]core.KernelModule, len(mods))
	for i, m := range mods {
		out[i] = m
		out[i].Entries = nil
		for _, e := range m.Entries {
			ps := append([]core.Param(nil), e.Params...)
			if strings.HasPrefix(e.Name, "mla_decode_") {
				for j := range ps {
					switch ps[j].Name {
					case "q":
						ps[j].Name = "out"
					case "out":
						ps[j].Name = "q"
					}
				}
			}
			out[i].Entries = append(out[i].Entries, core.Entry{Name: e.Name, Params: ps})
		}
	}
	return out, nil
}

// PlanKernel plans as fa3 does, then sizes the decode launch's head blocks
// for one query token of each request: heads rows, not q_len * heads.
func (n *narrow) PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error) {
	p, err := n.kp.PlanKernel(ctx, req)
	if err != nil || req.Method != core.MLA || os.Getenv("ATTNPLUG_NARROW") == "swap" {
		return p, err
	}
	for i := range p.Launches {
		l := &p.Launches[i]
		var hb, rows int64
		for _, a := range l.Args {
			if a.Param == "head_blocks" {
				hb = a.Int
			}
		}
		if hb == 0 {
			continue
		}
		per := int64(l.Grid[0]) / hb // item slots
		var maxQ int64
		for _, q := range req.Shape.QLens {
			maxQ = max(maxQ, q)
		}
		m := int64(16) // the rows of a block: the variant whose head blocks the plan has
		for m < 64 && (maxQ*int64(req.Dims.Heads)+m-1)/m != hb {
			m *= 2
		}
		rows = (int64(req.Dims.Heads) + m - 1) / m
		if rows >= hb {
			continue
		}
		l.Grid[0] = uint32(per * rows)
		for j := range l.Args {
			if l.Args[j].Param == "head_blocks" {
				l.Args[j].Int = rows
			}
		}
	}
	return p, nil
}

func (n *narrow) RunKernel(ctx context.Context, req *core.KernelRequest) (*core.KernelResult, error) {
	return n.Backend.(core.KernelRunner).RunKernel(ctx, req)
}

func (n *narrow) Configure(ctx context.Context, info core.HostInfo) error {
	return n.Backend.(core.Configurer).Configure(ctx, info)
}

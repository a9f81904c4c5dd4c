package pluginproc

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
)

// The kernel-catalog self-check. A plugin's catalog may cover a subset of
// the methods a name declares: the host runs the others with its own
// reference kernels (core.HandlerInfo.Catalog). When a plugin with a
// catalog first starts, its rules answer a set of sample requests, and a
// method answered that the name neither declares nor has a kernel for
// refuses the plugin (selfCheck): listed as broken, with the method and
// the name, and never used. A plugin without any catalog (older than
// catalogs) stays usable; the registry logs once that it runs no kernels.

// selfCheckState is the self-check of one plugin (Plugin.selfChecked).
type selfCheckState struct {
	mu      sync.Mutex
	done    bool                  // guarded by mu
	refused atomic.Pointer[error] // nil: passed, not applicable or not run yet
}

// selfCheckRefusal returns why the self-check refused p, or nil.
func (p *Plugin) selfCheckRefusal() error {
	if err := p.selfChecked.refused.Load(); err != nil {
		return *err
	}
	return nil
}

// finish records the self-check's outcome: refusal, or nil for a pass.
func (s *selfCheckState) finish(refusal error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	if refusal != nil {
		s.refused.Store(&refusal)
	}
}

// selfCheck runs once per plugin, after its first successful start, unless
// it ran when the plugin was described (its result is cached with the
// description): the sample requests of every name go through inst's
// rules, and a method answered that the name's catalog lacks refuses the
// plugin. It returns the refusal, now and at every later start. A pass is
// written to the description cache, so that later hosts skip the check.
func (p *Plugin) selfCheck(ctx context.Context, inst *instance) error {
	s := &p.selfChecked
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return p.selfCheckRefusal()
	}
	if !p.desc.HasKernels() {
		s.done = true
		p.logger.Info("plugin declares no kernel catalog: it decides methods but runs no kernels")
		return nil
	}
	refusal, err := runSelfCheck(ctx, p.cfg, p.desc, inst.backend)
	if err != nil {
		return err // the call failed: a failed start, checked again at the next
	}
	s.done = true
	if refusal != nil {
		s.refused.Store(&refusal)
		p.logger.Error("plugin refused by the kernel self-check", "error", refusal)
		return refusal
	}
	if !p.health.StaleDesc.Load() {
		if err := (descCache{dir: p.cfg.CacheDir}).put(p.cacheKey, p.desc, true); err != nil {
			p.logger.Debug("description cache not written", "error", err)
		}
	}
	return nil
}

// runSelfCheck returns the refusal of the plugin described by d, whose
// process b answers, or the error of a call that failed.
func runSelfCheck(ctx context.Context, cfg *Config, d *core.Description, b backend.Conn) (refusal, err error) {
	for _, h := range d.Handlers {
		if h.Deprecated != "" {
			// A deprecated alias shares its target's rules, and asking it
			// would log the deprecation; catalogCheck covers its catalog.
			continue
		}
		reqs := distinctRequests(h, selfCheckRequests(h.Name))
		out := make([]core.Result, len(reqs))
		cctx, cancel := context.WithTimeout(ctx, max(cfg.CallTimeout, cfg.StartTimeout))
		err := b.DispatchBatch(cctx, reqs, out)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("kernel self-check of %s: %w", h.Name, err)
		}
		for i, r := range out {
			if r.Err != nil {
				continue
			}
			if _, ok := h.Kernel(r.Method); !ok && !slices.Contains(h.Methods, r.Method) {
				return fmt.Errorf("%w: refused by the kernel self-check: %s answered %s, which it does not declare and its kernel catalog lacks, to %s",
					core.ErrProtocol, h.Name, r.Method, sampleString(&reqs[i])), nil
			}
		}
	}
	return nil, nil
}

// selfCheckRequests returns the self-check's requests for name: every mode on
// every platform, with and without each CUDA graph, prefix sums of 0 and at
// the threshold, sequence sums within and past the chunk capacity, each
// boolean fact alone, and the DSA prefill inputs (dsa_use_mha absent, false
// and true; compute capabilities 0, 90 and 100; short and long sequences).
func selfCheckRequests(name string) []core.Request {
	var out []core.Request
	add := func(r core.Request) {
		if r.Validate() == nil {
			out = append(out, r)
		}
	}
	platforms := []core.Platform{core.PlatformCUDA, core.PlatformHIP, core.PlatformNPU, core.PlatformXPU, core.PlatformCPU}
	toggles := []func(*core.Request){
		func(*core.Request) {},
		func(r *core.Request) { r.Runtime.PiecewiseCUDAGraph = true },
		func(r *core.Request) { r.Runtime.BreakableCUDAGraph = true },
		func(r *core.Request) { r.Runtime.DeterministicInference = true },
		func(r *core.Request) { r.Batch.MLAPrefillCP = true },
		func(r *core.Request) { r.Layer.DisableChunkedPrefixCache = true },
		func(r *core.Request) { r.Layer.FlashinferMLADisableRagged = true },
		func(r *core.Request) { r.Layer.ROCmFusedDecodeMLA = true },
		func(r *core.Request) { r.Layer.UseDSA = true },
		func(r *core.Request) { r.Layer.FusedQKVAProjWithMQA = true; r.Layer.IntelAMX = true },
		func(r *core.Request) { r.Runtime.DSAUseMHA, r.Runtime.DSAUseMHASet = true, true },
		func(r *core.Request) { r.Runtime.DSAUseMHASet = true },
		func(r *core.Request) { r.Runtime.ComputeCapability = 90 },
		func(r *core.Request) { r.Runtime.ComputeCapability = 100; r.Runtime.KVCacheDType = "fp8_e4m3" },
	}
	t := int64(core.DefaultChunkedPrefixCacheThreshold)
	for _, mode := range core.ForwardModes() {
		for _, pl := range platforms {
			for _, tg := range toggles {
				for _, prefix := range []int64{0, t} {
					for _, extra := range []int64{1, 1024, 4096} {
						for _, capDelta := range []int64{0, -1} {
							r := core.NewRequest(name, mode)
							r.Runtime.Platform = pl
							r.Batch.ExtendPrefixLens = []int64{prefix}
							r.Batch.SeqLens = []int64{prefix + extra}
							r.Batch.MaxChunkCapacity = prefix + extra + capDelta
							tg(&r)
							add(r)
						}
					}
				}
			}
		}
	}
	return out
}

// distinctRequests keeps one request of reqs per answer-cache key of h:
// the handler declared that its rules read nothing else, so the others
// have the same answers (the promise the answer cache keeps too). A
// handler whose reads cannot be keyed gets every request.
func distinctRequests(h core.HandlerInfo, reqs []core.Request) []core.Request {
	plan, err := h.Reads.Plan()
	if err != nil {
		return reqs
	}
	seen := map[core.Key]bool{}
	out := reqs[:0]
	for i := range reqs {
		k := plan.Key(&reqs[i])
		if !seen[k] {
			seen[k] = true
			out = append(out, reqs[i])
		}
	}
	return out
}

func sampleString(r *core.Request) string {
	return fmt.Sprintf("%s on %s, extend_prefix_lens %v, seq_lens %v, max_chunk_capacity %d, runtime %v, layer %v",
		r.Batch.Mode, r.Runtime.Platform, r.Batch.ExtendPrefixLens, r.Batch.SeqLens, r.Batch.MaxChunkCapacity, r.Runtime, r.Layer)
}

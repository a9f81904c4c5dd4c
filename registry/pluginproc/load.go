package pluginproc

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
	"github.com/hashicorp/go-hclog"
)

// Found is what Load found in the plugin directories.
type Found struct {
	// Plugins are the usable plugins, in directory order.
	Plugins []*Plugin
	// Broken are the binaries and directories that cannot be used, and
	// the binaries a family found first shadows.
	Broken []Info
	// Refused maps each name the lock pins to a binary it refused to why.
	Refused map[string]error
	// Unfound are the binaries the lock pins that are not there.
	Unfound []Info
}

// Load discovers the plugin binaries of cfg.Dirs and learns what each
// serves, from the description cache or by starting it once, concurrently.
// A plugin of kept whose binary did not change (same path, same SHA-256)
// and that may go on serving (Keepable) is returned as it is, running or
// not. lock, when set, refuses every binary it does not pin. Load fails
// only when ctx ends.
func Load(ctx context.Context, cfg *Config, lock *Lock, kept []*Plugin) (*Found, error) {
	found, broken := discover(cfg.Dirs, cfg.InsecurePluginDir)
	for _, b := range broken {
		cfg.Logger.Warn("plugin not usable", "path", b.Path, "reason", b.Reason)
	}
	keep := map[string]*Plugin{}
	for _, p := range kept {
		if p.Keepable() { // a plugin a reload retired, or broken, is never served again
			keep[p.path+"\x00"+p.sha256] = p
		}
	}
	type described struct {
		p   *Plugin
		err error
	}
	results := make([]described, len(found))
	var wg sync.WaitGroup
	for i, c := range found {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := describe(ctx, cfg, lock, c, keep)
			results[i] = described{p, err}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := &Found{Broken: broken, Refused: map[string]error{}}
	for i, res := range results {
		if res.err == nil {
			out.Plugins = append(out.Plugins, res.p)
			continue
		}
		info := Info{Name: found[i].family, Path: found[i].path, Status: StatusBroken, Reason: res.err.Error()}
		out.Broken = append(out.Broken, info)
		cfg.Logger.Warn("plugin not usable", "path", info.Path, "error", res.err)
		if lock == nil || !errors.Is(res.err, ErrNotPinned) {
			continue
		}
		if e, ok := lock.Entry(filepath.Base(found[i].path)); ok {
			for _, n := range e.Names {
				out.Refused[n] = res.err
			}
		}
	}
	if lock != nil {
		out.Unfound = lock.missing(found)
	}
	return out, nil
}

// describe learns what the binary of c serves: from the description
// cache, unless the entry fails the checks a fresh description passes
// (a damaged or hand-edited entry), in which case the binary is asked
// again and the entry replaced.
func describe(ctx context.Context, cfg *Config, lock *Lock, c candidate, kept map[string]*Plugin) (_ *Plugin, err error) {
	cache := descCache{dir: cfg.CacheDir}
	bin, err := cache.openBinary(c.path)
	if err != nil {
		return nil, err
	}
	sum := bin.sha256
	if p := kept[c.path+"\x00"+sum]; p != nil {
		bin.close() // the kept plugin runs its own descriptor of these bytes
		return p, nil
	}
	defer func() {
		if err != nil {
			bin.close()
		}
	}()
	if lock != nil {
		if err := lock.verify(c.path, sum); err != nil {
			return nil, err
		}
	}
	logger := cfg.Logger.Named(c.family)
	key := sum + "-" + envDigest()
	e, ok := cache.get(key)
	if ok {
		if err := checkDescription(c.family, &e.Description); err != nil {
			logger.Warn("cached description refused; asking the binary again", "path", c.path, "entry", cache.file(key), "error", err)
			ok = false
		}
	}
	var refusal error // the kernel self-check's, when it ran here
	if !ok {
		if e, refusal, err = describeFresh(ctx, cfg, cache, key, c, bin, logger); err != nil {
			return nil, err
		}
	}
	d := &e.Description
	p := &Plugin{name: d.Name, path: c.path, sha256: sum, exe: bin, cacheKey: key, desc: d, logger: logger, cfg: cfg}
	if e.SelfCheckPassed || refusal != nil {
		p.selfChecked.finish(refusal)
	}
	if cfg.Host != nil {
		p.unsupported = backend.UnsupportedOn(d, *cfg.Host)
	}
	return p, nil
}

// describeFresh asks the binary of c, which the cache does not describe
// under key, what it serves, unless it failed to start a moment ago, and
// caches the answer (and the self-check's refusal, when it ran).
func describeFresh(ctx context.Context, cfg *Config, cache descCache, key string, c candidate, bin *verifiedBinary, logger hclog.Logger) (e cachedDescription, refusal, err error) {
	e = cachedDescription{Key: key}
	now := time.Now()
	if f, recent := cache.failed(key, now); recent {
		// It failed to start a moment ago, here or in another host:
		// no run pays its start timeout again before the backoff.
		return e, nil, fmt.Errorf("start failed %d time(s) in a row, last at %s (not tried again before %s; a new build is tried at once): %s",
			f.Count, f.At.Format(time.RFC3339), f.RetryAt.Format(time.RFC3339), f.Error)
	}
	d, checked, err := describeBinary(ctx, cfg, c, bin, logger)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrNotPinned) {
			cache.fail(key, err, now)
		}
		return e, nil, err
	}
	cache.started(key)
	e.Description = *d
	if checked != nil {
		refusal = *checked
		e.SelfCheckPassed = refusal == nil
	}
	if err := cache.write(cache.file(key), e); err != nil {
		cfg.Logger.Debug("description cache not written", "error", err)
	} else {
		cache.prune(now)
	}
	return e, refusal, checkFamily(c.family, d)
}

// describeBinary starts the binary of c once and asks what it serves. The
// description must pass backend.Validate. With a description cache, the
// kernel self-check runs too, on the same process, so that its result is
// cached with the description and no later start pays for it; checked is
// then its refusal (nil: passed), and nil without a cache or a catalog.
func describeBinary(ctx context.Context, cfg *Config, c candidate, bin *verifiedBinary, logger hclog.Logger) (d *core.Description, checked *error, err error) {
	sctx, cancel := cfg.startContext(ctx)
	defer cancel()
	bare := *cfg
	bare.Host = nil // describing needs no hardware
	inst, err := spawn(sctx, &bare, bin, logger)
	if err != nil {
		return nil, nil, fmt.Errorf("start: %w", err)
	}
	defer inst.stop(cfg.StopGrace)
	if d, err = inst.backend.Describe(sctx); err != nil {
		return nil, nil, err
	}
	if err := backend.Validate(d); err != nil {
		return nil, nil, err
	}
	if cfg.CacheDir == "" || !d.HasKernels() || d.Name != c.family {
		return d, nil, nil
	}
	refusal, err := runSelfCheck(sctx, cfg, d, inst.backend)
	if err != nil {
		return d, nil, nil // checked at the first start instead
	}
	if refusal != nil {
		logger.Error("plugin refused by the kernel self-check", "error", refusal)
	}
	return d, &refusal, nil
}

// checkDescription runs every check of a description of the binary named
// for family.
func checkDescription(family string, d *core.Description) error {
	if err := backend.Validate(d); err != nil {
		return err
	}
	return checkFamily(family, d)
}

// checkFamily refuses a binary that calls itself otherwise than its file
// name says: a family is one binary, and a hot swap replaces a family.
func checkFamily(family string, d *core.Description) error {
	if d.Name != family {
		return fmt.Errorf("%w: binary is named for %q but the plugin calls itself %q", core.ErrProtocol, family, d.Name)
	}
	return nil
}

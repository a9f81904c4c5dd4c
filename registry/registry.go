package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
)

// Config configures a Registry. The zero value of every field but Logger
// has a sensible default, given in its comment.
type Config struct {
	// PluginDirs are searched in order for attnplug-backend-<name> binaries.
	PluginDirs []string
	// Logger is the registry's logger; plugin lines are logged through
	// Logger.Named(<plugin name>). Default: hclog's null logger.
	Logger hclog.Logger
	// Platform replaces an unset Runtime.Platform. Default: cpu.
	Platform core.Platform
	// CallTimeout bounds one call to a plugin. Default: 2s.
	CallTimeout time.Duration
	// StartTimeout bounds the start and handshake of a plugin. Default: 10s.
	StartTimeout time.Duration
	// RestartBackoff is the wait before the first restart of a failed
	// plugin; it doubles with every further failure. Default: 100ms.
	RestartBackoff time.Duration
	// MaxRestartBackoff caps the wait. Default: 30s.
	MaxRestartBackoff time.Duration
	// QuarantineAfter is how many failures in a row quarantine a plugin;
	// negative never does. Default: 8.
	QuarantineAfter int
	// CacheDir keeps plugin descriptions by binary hash; empty caches
	// nothing.
	CacheDir string
	// ExpectedNames are names that some plugin should serve; when none
	// does, their answers carry a ReasonPluginMissing fallback. Default:
	// ReferenceNames without "triton".
	ExpectedNames []string
	// Strict refuses, instead of answering by the triton rules, every
	// request that would fall back.
	Strict bool
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Platform == core.PlatformUnset {
		c.Platform = core.PlatformCPU
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 2 * time.Second
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 10 * time.Second
	}
	if c.RestartBackoff <= 0 {
		c.RestartBackoff = 100 * time.Millisecond
	}
	if c.MaxRestartBackoff <= 0 {
		c.MaxRestartBackoff = 30 * time.Second
	}
	if c.QuarantineAfter == 0 {
		c.QuarantineAfter = 8
	}
	if c.ExpectedNames == nil {
		for _, n := range ReferenceNames() {
			if n != core.TritonName {
				c.ExpectedNames = append(c.ExpectedNames, n)
			}
		}
	}
}

func (c *Config) pluginLogLevel() string {
	switch {
	case c.Logger.IsTrace():
		return "trace"
	case c.Logger.IsDebug():
		return "debug"
	}
	return "info"
}

// DefaultPluginDir is the plugin directory beside the running executable:
// <dir of executable>/plugins.
func DefaultPluginDir() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("default plugin dir: %w", err)
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	return filepath.Join(filepath.Dir(exe), "plugins"), nil
}

// Status is the state of a plugin in a listing.
type Status string

// The plugin states.
const (
	StatusReady       Status = "ready"       // described, not running
	StatusRunning     Status = "running"     // a process serves it
	StatusFailed      Status = "failed"      // its last start or call failed
	StatusQuarantined Status = "quarantined" // failed too often; not restarted
	StatusBroken      Status = "broken"      // cannot be used at all
	StatusShadowed    Status = "shadowed"    // the same name came first elsewhere
)

// PluginInfo is one entry of Registry.Plugins.
type PluginInfo struct {
	// Name is the plugin's family name.
	Name string `json:"name"`
	// Path is the binary's path.
	Path string `json:"path"`
	// Version is the plugin's version, from its description.
	Version string `json:"version,omitempty"`
	// ProtocolVersion is the protocol version it speaks.
	ProtocolVersion int `json:"protocol_version,omitempty"`
	// SHA256 is the binary's hash.
	SHA256 string `json:"sha256,omitempty"`
	// Names are the backend names it serves.
	Names []string `json:"names,omitempty"`
	// Aliases maps an alias among Names to the name whose rules it shares.
	Aliases map[string]string `json:"aliases,omitempty"`
	// Status is its state.
	Status Status `json:"status"`
	// Reason says why a plugin is broken, failed or shadowed.
	Reason string `json:"reason,omitempty"`
	// LastError is the last failure, even when it recovered since.
	LastError string `json:"last_error,omitempty"`
	// PID is the process ID while running.
	PID int `json:"pid,omitempty"`
	// Restarts counts starts after the first.
	Restarts int `json:"restarts"`
}

// route is what a name resolves to.
type route struct {
	plugin  *plugin
	handler core.HandlerInfo
}

// Registry resolves names to backends and answers requests. Build it with
// New and end it with Close.
type Registry struct {
	cfg     Config
	log     hclog.Logger
	triton  core.Triton
	plugins []*plugin
	broken  []PluginInfo
	routes  map[string]route
	missing map[string]bool

	fallbacks fallbackLog

	closeOnce sync.Once
}

// New discovers the plugins of cfg.PluginDirs and learns what each serves,
// from the description cache or by starting it once. A plugin that cannot
// be described is listed as broken and does not fail New; New fails only
// when ctx ends.
func New(ctx context.Context, cfg Config) (*Registry, error) {
	cfg.setDefaults()
	r := &Registry{
		cfg:     cfg,
		log:     cfg.Logger,
		routes:  map[string]route{},
		missing: map[string]bool{},
	}
	r.fallbacks.log = r.log
	found, broken := discover(cfg.PluginDirs)
	r.broken = broken
	for _, b := range broken {
		r.log.Warn("plugin not usable", "path", b.Path, "reason", b.Reason)
	}

	type described struct {
		p   *plugin
		err error
	}
	results := make([]described, len(found))
	var wg sync.WaitGroup
	for i, c := range found {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := r.describe(ctx, c)
			results[i] = described{p, err}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i, res := range results {
		if res.err != nil {
			info := PluginInfo{Name: found[i].family, Path: found[i].path, Status: StatusBroken, Reason: res.err.Error()}
			r.broken = append(r.broken, info)
			r.log.Warn("plugin not usable", "path", info.Path, "error", res.err)
			continue
		}
		r.addPlugin(res.p)
	}
	for _, n := range cfg.ExpectedNames {
		if _, ok := r.routes[n]; !ok {
			r.missing[n] = true
		}
	}
	return r, nil
}

// describe learns what the binary of c serves.
func (r *Registry) describe(ctx context.Context, c candidate) (*plugin, error) {
	sum, err := fileSHA256(c.path)
	if err != nil {
		return nil, err
	}
	logger := r.log.Named(c.family)
	cache := descCache{dir: r.cfg.CacheDir}
	d, ok := cache.get(sum)
	if !ok {
		sctx, cancel := context.WithTimeout(ctx, r.cfg.StartTimeout)
		defer cancel()
		inst, err := launch(sctx, &r.cfg, c.path, logger)
		if err != nil {
			return nil, fmt.Errorf("start: %w", err)
		}
		d, err = inst.backend.Describe(sctx)
		inst.client.Kill()
		if err != nil {
			return nil, err
		}
		if err := validateDescription(c.family, d); err != nil {
			return nil, err
		}
		if err := cache.put(sum, d); err != nil {
			r.log.Debug("description cache not written", "error", err)
		}
	}
	return &plugin{name: d.Name, path: c.path, sha256: sum, desc: d, logger: logger, cfg: &r.cfg}, nil
}

func validateDescription(family string, d *core.Description) error {
	if d.Name != family {
		return fmt.Errorf("%w: binary is named for %q but the plugin calls itself %q", core.ErrProtocol, family, d.Name)
	}
	if len(d.Handlers) == 0 {
		return fmt.Errorf("%w: plugin serves no names", core.ErrProtocol)
	}
	for _, h := range d.Handlers {
		if len(h.Methods) == 0 {
			return fmt.Errorf("%w: name %q declares no methods", core.ErrProtocol, h.Name)
		}
	}
	return nil
}

func (r *Registry) addPlugin(p *plugin) {
	for _, h := range p.desc.Handlers {
		if h.Name == core.TritonName {
			r.log.Warn("plugin claims the triton name; the in-process triton rules keep it", "plugin", p.name)
			continue
		}
		if prev, dup := r.routes[h.Name]; dup {
			r.log.Warn("backend name served twice; the first plugin keeps it",
				"backend", h.Name, "plugin", p.name, "kept", prev.plugin.name)
			continue
		}
		r.routes[h.Name] = route{plugin: p, handler: h}
	}
	r.plugins = append(r.plugins, p)
}

// Plugins lists every plugin found, usable or not, sorted by name.
func (r *Registry) Plugins() []PluginInfo {
	out := make([]PluginInfo, 0, len(r.plugins)+len(r.broken))
	for _, p := range r.plugins {
		pi := PluginInfo{
			Name: p.name, Path: p.path, Version: p.desc.Version,
			ProtocolVersion: p.desc.ProtocolVersion, SHA256: p.sha256,
		}
		for _, h := range p.desc.Handlers {
			if rt, ok := r.routes[h.Name]; ok && rt.plugin == p {
				pi.Names = append(pi.Names, h.Name)
				if h.AliasOf != "" {
					if pi.Aliases == nil {
						pi.Aliases = map[string]string{}
					}
					pi.Aliases[h.Name] = h.AliasOf
				}
			}
		}
		p.info(&pi)
		out = append(out, pi)
	}
	out = append(out, r.broken...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns every name a plugin serves, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.routes))
	for n := range r.routes {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Handler returns what the plugin serving name declared, and whether one
// does.
func (r *Registry) Handler(name string) (core.HandlerInfo, string, bool) {
	rt, ok := r.routes[name]
	if !ok {
		return core.HandlerInfo{}, "", false
	}
	return rt.handler, rt.plugin.name, true
}

// Platform returns the platform that replaces an unset one.
func (r *Registry) Platform() core.Platform { return r.cfg.Platform }

// Dispatch answers req. It fills an unset platform, validates the request
// (an invalid one returns an error wrapping core.ErrInvalidRequest), and
// asks the plugin serving req.Backend; when that plugin cannot answer, the
// triton rules do and the answer says why in Fallback, or, with
// Config.Strict, Dispatch returns an error wrapping core.ErrRefused. req
// is not modified.
func (r *Registry) Dispatch(ctx context.Context, req *core.Request) (core.Answer, error) {
	if req.Runtime.Platform == core.PlatformUnset {
		cp := *req
		cp.Runtime.Platform = r.cfg.Platform
		req = &cp
	}
	if err := req.Validate(); err != nil {
		return core.Answer{}, err
	}
	rt, ok := r.routes[req.Backend]
	if !ok {
		if r.missing[req.Backend] {
			return r.fallback(req, "", &failure{ReasonPluginMissing,
				fmt.Errorf("no plugin in %v serves %q", r.cfg.PluginDirs, req.Backend)})
		}
		return r.decideTriton(req, ""), nil
	}
	p := rt.plugin
	inst, err := p.acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return core.Answer{}, ctx.Err()
		}
		return r.fallback(req, p.name, err)
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	m, err := inst.backend.Dispatch(cctx, req)
	cancel()
	if err == nil && !slices.Contains(rt.handler.Methods, m) {
		err = fmt.Errorf("%w: answered %s, which %q does not declare", core.ErrProtocol, m, req.Backend)
	}
	if err != nil {
		if ctx.Err() != nil {
			return core.Answer{}, ctx.Err()
		}
		return r.callFailed(req, p, inst, err)
	}
	r.fallbacks.recovered(p.name)
	p.succeeded()
	return core.Answer{Method: m, Handler: req.Backend, Plugin: p.name}, nil
}

// callFailed handles a failed call to a running instance.
func (r *Registry) callFailed(req *core.Request, p *plugin, inst *instance, err error) (core.Answer, error) {
	if errors.Is(err, core.ErrInvalidRequest) {
		// The plugin refused this request; the plugin is fine.
		return r.fallback(req, p.name, &failure{ReasonRefused, fmt.Errorf("plugin %s refused the request: %w", p.name, err)})
	}
	reason := classify(err)
	p.fail(inst, reason, err)
	return r.fallback(req, p.name, &failure{reason, fmt.Errorf("plugin %s: %w", p.name, err)})
}

// decideTriton answers by the in-process triton rules.
func (r *Registry) decideTriton(req *core.Request, fallback string) core.Answer {
	return core.Answer{Method: core.TritonDecide(req), Handler: core.TritonName, Plugin: core.PluginCore, Fallback: fallback}
}

// fallback answers by the triton rules because of err, or refuses under
// Strict. Either way it is logged.
func (r *Registry) fallback(req *core.Request, plugin string, err error) (core.Answer, error) {
	var f *failure
	if !errors.As(err, &f) {
		f = &failure{ReasonCrashed, err}
	}
	msg := f.Error()
	r.fallbacks.record(req.Backend, plugin, f.reason, msg, r.cfg.Strict)
	if r.cfg.Strict {
		return core.Answer{}, fmt.Errorf("%w: %s (strict: no fallback to triton)", core.ErrRefused, msg)
	}
	return r.decideTriton(req, msg), nil
}

// Close ends every plugin process the registry started and waits for them.
// Later requests fall back with ReasonClosed. Close is idempotent.
func (r *Registry) Close() error {
	r.closeOnce.Do(func() {
		var wg sync.WaitGroup
		for _, p := range r.plugins {
			wg.Add(1)
			go func() { defer wg.Done(); p.stop() }()
		}
		wg.Wait()
		r.fallbacks.summary()
	})
	return nil
}

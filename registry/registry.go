package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
	"github.com/hashicorp/go-hclog"
)

// InProcessKernels runs kernel k of a catalog on req's tensors in the
// calling process (backendkit.Run is one).
type InProcessKernels func(ctx context.Context, k core.Kernel, req *core.KernelRequest, host *core.HostInfo) (*core.KernelResult, error)

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
	// StopGrace is how long Close (and a reload, for the process it
	// replaces) lets a plugin process exit in good order before its
	// process group gets SIGKILL: a plugin that hangs or is stopped
	// (SIGSTOP) cannot hold the host. Default: wire.DefaultStopGrace (2s).
	StopGrace time.Duration
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
	// request that would fall back, and every request for a name that no
	// running plugin serves (other than triton): there is no silent
	// fallback of any kind.
	Strict bool
	// Host, when set, is the hardware the host detected: a plugin none of
	// whose names runs there is never started (its names fall back with
	// ReasonUnsupportedHardware), and each plugin started is told it and
	// may refuse. Nil matches no hardware: deciding a method needs none.
	Host *core.HostInfo
	// Kernels runs a catalog kernel's math in this process: for the
	// triton rules, and when a plugin cannot run its kernel (RunKernel's
	// fallback). Hosts that run kernels set it to backendkit.Run, so that
	// the dispatch path links no kernel code; nil: RunKernel runs nothing
	// in process and returns an error wrapping core.ErrNoKernel.
	Kernels InProcessKernels
	// Backends are backends in the host's process, served as a plugin's
	// are: each name they describe routes to them, with the same answer
	// cache, hardware match and fallback; a call that fails or panics
	// falls back to the triton rules for that request. They are called in
	// the caller's goroutine under the caller's context, which they must
	// honour (core.Backend): no registry deadline can stop them. A
	// name that a plugin also serves is the plugin's (a plugin directory
	// replaces a linked backend without a rebuild), and logged. The triton
	// rules are always in process, as the fallback: a backend here may not
	// claim "triton". New fails when one cannot describe itself.
	Backends []core.Backend
	// Lock, when set, pins the plugin binaries: a binary that is not in it,
	// or whose SHA-256 differs, is refused, and go-plugin checks the hash
	// again at every start.
	Lock *Lock
	// NoAnswerCache makes every request that a plugin serves a call to the
	// plugin; by default answers are cached by the facts each handler
	// declares it reads.
	NoAnswerCache bool
	// InsecurePluginDir turns off the refusal of plugin directories and
	// binaries that other users can write.
	InsecurePluginDir bool
	// QuietDeprecated does not warn of requests for deprecated names (a
	// tool that asks every name on purpose sets it); by default the first
	// request for each is logged at Warn.
	QuietDeprecated bool
	// SocketDir is where each registry makes the private directory of its
	// plugins' Unix sockets, <SocketDir>/<pid>-<random>, removed at Close;
	// the directories of hosts that are gone (killed with SIGKILL) are
	// removed when the next registry makes its own. It is made with mode
	// 0700 and refused unless the caller owns it and only the caller can
	// use it. Default: $XDG_RUNTIME_DIR/attnplug, else
	// <os.TempDir()>/attnplug-<uid>.
	SocketDir string

	sockets *socketDir // made by New
	// life ends at Close: starts in progress end with it (made by New).
	life    context.Context
	endLife context.CancelFunc
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
	if c.StopGrace <= 0 {
		c.StopGrace = wire.DefaultStopGrace
	}
	if c.QuarantineAfter == 0 {
		c.QuarantineAfter = 8
	}
	if c.SocketDir == "" {
		c.SocketDir = defaultSocketBase()
	}
	c.sockets = &socketDir{base: c.SocketDir, log: c.Logger}
	if c.ExpectedNames == nil {
		for _, n := range ReferenceNames() {
			if n != core.TritonName {
				c.ExpectedNames = append(c.ExpectedNames, n)
			}
		}
	}
}

// startContext bounds a plugin's start: by StartTimeout, ctx, and the
// registry's life (Close ends a start in progress).
func (c *Config) startContext(ctx context.Context) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
	if c.life == nil {
		return sctx, cancel
	}
	stop := context.AfterFunc(c.life, cancel)
	return sctx, func() { stop(); cancel() }
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
	// Vendor is who makes the plugin, from its description; empty when it
	// does not say.
	Vendor string `json:"vendor,omitempty"`
	// ProtocolVersion is the protocol version it speaks.
	ProtocolVersion int `json:"protocol_version,omitempty"`
	// SHA256 is the binary's hash.
	SHA256 string `json:"sha256,omitempty"`
	// Names are the backend names it serves.
	Names []string `json:"names,omitempty"`
	// Aliases maps an alias among Names to the name whose rules it shares.
	Aliases map[string]string `json:"aliases,omitempty"`
	// DeviceCode reports that the plugin hands the host device code and
	// launch plans (Registry.KernelModules, Registry.PlanKernel).
	DeviceCode bool `json:"device_code,omitempty"`
	// Status is its state.
	Status Status `json:"status"`
	// Reason says why a plugin is broken, failed or shadowed; for a plugin
	// that keeps serving, why a reload refused the binary now on disk.
	Reason string `json:"reason,omitempty"`
	// LastError is the last failure, even when it recovered since.
	LastError string `json:"last_error,omitempty"`
	// PID is the process ID while running.
	PID int `json:"pid,omitempty"`
	// Restarts counts starts after the first.
	Restarts int `json:"restarts"`
}

// Registry resolves names to backends and answers requests. Build it with
// New and end it with Close.
type Registry struct {
	cfg   Config
	log   hclog.Logger
	table atomic.Pointer[routeTable]

	// triton is the fallback backend, the triton rules in process: it
	// answers the default route and every fallback.
	triton *inProcess
	// linked are the backends of Config.Backends.
	linked []*inProcess

	fallbacks fallbackLog
	unknown   sync.Map // names answered by triton that were logged once
	nUnknown  atomic.Int32
	// deprecated holds the deprecated names whose use was logged.
	deprecated sync.Map
	// served maps every name a plugin served to the plugin's family.
	served sync.Map

	reloadMu  sync.Mutex
	lock      atomic.Pointer[Lock] // the lock in force, nil for none; replaced by Reload, under reloadMu
	closeOnce sync.Once
	closed    atomic.Bool
}

// routeTable is what the registry serves at one time; a reload replaces it
// whole.
type routeTable struct {
	plugins []*plugin
	broken  []PluginInfo
	// unfound are the binaries the lock file pins that are not there.
	unfound []PluginInfo
	routes  map[string]*route
	// deflt is the route of every name not in routes: the triton rules.
	deflt *route
	// gen is the table's generation (Registry.Generation); replaced is
	// closed when a reload stores the next table.
	gen      uint64
	replaced chan struct{}
}

// route returns the route of name.
func (t *routeTable) route(name string) *route {
	if rt := t.routes[name]; rt != nil {
		return rt
	}
	return t.deflt
}

// New discovers the plugins of cfg.PluginDirs and learns what each serves,
// from the description cache or by starting it once. A plugin that cannot
// be described is listed as broken and does not fail New; New fails only
// when ctx ends or cfg.Lock cannot be honoured.
func New(ctx context.Context, cfg Config) (*Registry, error) {
	cfg.setDefaults()
	r := &Registry{cfg: cfg, log: cfg.Logger}
	r.lock.Store(cfg.Lock)
	r.fallbacks.log = r.log
	triton, err := newInProcess(ctx, core.Triton{}, &r.cfg)
	if err != nil {
		return nil, err
	}
	r.triton = triton
	for _, b := range cfg.Backends {
		ip, err := newInProcess(ctx, b, &r.cfg)
		if err != nil {
			return nil, err
		}
		r.linked = append(r.linked, ip)
	}
	t, err := r.load(ctx, nil)
	if err != nil {
		return nil, err
	}
	r.table.Store(t)
	r.cfg.life, r.cfg.endLife = context.WithCancel(context.Background())
	return r, nil
}

// load discovers and describes the plugins and builds a route table. A
// plugin of prev whose binary did not change is kept as it is, running or
// not.
func (r *Registry) load(ctx context.Context, prev *routeTable) (*routeTable, error) {
	t := &routeTable{routes: map[string]*route{}, gen: 1, replaced: make(chan struct{}), deflt: r.defaultRoute()}
	if prev != nil {
		t.gen = prev.gen + 1
	}
	found, broken := discover(r.cfg.PluginDirs, r.cfg.InsecurePluginDir)
	t.broken = broken
	for _, b := range broken {
		r.log.Warn("plugin not usable", "path", b.Path, "reason", b.Reason)
	}
	kept := map[string]*plugin{}
	if prev != nil {
		for _, p := range prev.plugins {
			if p.keepable() { // a plugin a reload retired, or broken, is never served again
				kept[p.path+"\x00"+p.sha256] = p
			}
		}
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
			p, err := r.describe(ctx, c, kept)
			results[i] = described{p, err}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	refused := map[string]error{} // names pinned to binaries the lock file refused
	for i, res := range results {
		if res.err != nil {
			info := PluginInfo{Name: found[i].family, Path: found[i].path, Status: StatusBroken, Reason: res.err.Error()}
			t.broken = append(t.broken, info)
			r.log.Warn("plugin not usable", "path", info.Path, "error", res.err)
			if e, ok := r.pinned(found[i].path); ok && errors.Is(res.err, ErrNotPinned) {
				for _, n := range e.Names {
					refused[n] = res.err
				}
			}
			continue
		}
		r.addPlugin(t, res.p)
	}
	r.addLinked(t.routes)
	// The names of a binary the lock refused fall back as broken, rather
	// than go silently to the triton rules.
	for n, why := range refused {
		if _, ok := t.routes[n]; !ok && n != core.TritonName {
			t.routes[n] = r.missingRoute(n, why, true)
		}
	}
	if l := r.lock.Load(); l != nil {
		for _, m := range l.missing(found) {
			// Listed as broken, but nothing was found: its names are
			// missing, unless a binary that was found but refused may
			// serve them.
			t.unfound = append(t.unfound, m)
			for _, n := range m.Names {
				if _, ok := t.routes[n]; !ok {
					why, named := brokenWhy(n, t.broken)
					if !named {
						why = fmt.Errorf("%s %s", m.Path, m.Reason)
					}
					t.routes[n] = r.missingRoute(n, why, named)
				}
			}
		}
	}
	for _, n := range r.cfg.ExpectedNames {
		if _, ok := t.routes[n]; !ok {
			why, named := brokenWhy(n, t.broken)
			t.routes[n] = r.missingRoute(n, why, named)
		}
	}
	return t, nil
}

// defaultRoute is the route of every name no backend serves: the triton
// rules in process, with no answer cache (a name never seen may have to be
// refused, or its fallback logged: see usable).
func (r *Registry) defaultRoute() *route {
	rt := newRoute(r.triton.desc.Handlers[0], r.triton, false)
	rt.unknown = true
	return rt
}

// missingRoute is the route of name, which a plugin should serve but none
// does: its requests fall back with ReasonPluginMissing, saying why (what
// was refused that may serve it) when why is not nil.
//
// When broken, a binary that may serve name was found but refused (by the
// lock file, or as truncated, unreadable, writable by others, not
// starting): the reason is then ReasonPluginBroken, as docs/dispatch.md
// says, and the message is why. Otherwise why, when not nil, adds to the
// message (a binary the lock pins but that is not there).
func (r *Registry) missingRoute(name string, why error, broken bool) *route {
	f := &failure{reason: ReasonPluginMissing, err: fmt.Errorf("no plugin in %s serves %q (missing)", strings.Join(r.cfg.PluginDirs, ":"), name)}
	switch {
	case why != nil && !broken:
		f.err = fmt.Errorf("%w: %w", f.err, why)
	case why != nil:
		f = &failure{reason: ReasonPluginBroken, err: fmt.Errorf("no usable plugin in %s serves %q: %w", strings.Join(r.cfg.PluginDirs, ":"), name, why)}
	}
	rt := newRoute(r.triton.desc.Handlers[0], r.triton, false)
	rt.name, rt.down = name, f
	return rt
}

// brokenWhy says which plugin binaries or directories that were refused
// may serve name: the binary named for it, or that served it (named: the
// name's plugin is broken), when there is one; else every one, up to a
// few (they may serve it: named is false, and the name is missing). It
// returns nil when none was refused.
func brokenWhy(name string, broken []PluginInfo) (why error, named bool) {
	var all []string
	for _, b := range broken {
		if b.Status != StatusBroken {
			continue
		}
		why := b.Reason
		if !strings.Contains(why, b.Path) {
			why = b.Path + ": " + why
		}
		if b.Name == name || slices.Contains(b.Names, name) {
			return fmt.Errorf("found but not usable: %s", why), true
		}
		all = append(all, why)
	}
	const shown = 3
	switch {
	case len(all) > shown:
		return fmt.Errorf("found but not usable: %s; and %d more (attnplug plugins lists them)", strings.Join(all[:shown], "; "), len(all)-shown), false
	case len(all) > 0:
		return fmt.Errorf("found but not usable: %s", strings.Join(all, "; ")), false
	}
	return nil, false
}

// pinned returns the lock entry of the binary at path, if a lock is in use
// and pins it.
func (r *Registry) pinned(path string) (LockEntry, bool) {
	l := r.lock.Load()
	if l == nil {
		return LockEntry{}, false
	}
	return l.Entry(filepath.Base(path))
}

// describe learns what the binary of c serves: from the description
// cache, unless the entry fails the checks a fresh description passes
// (a damaged or hand-edited entry), in which case the binary is asked
// again and the entry replaced.
func (r *Registry) describe(ctx context.Context, c candidate, kept map[string]*plugin) (_ *plugin, err error) {
	cache := descCache{dir: r.cfg.CacheDir}
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
	if l := r.lock.Load(); l != nil {
		if err := l.verify(c.path, sum); err != nil {
			return nil, err
		}
	}
	logger := r.log.Named(c.family)
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
		e = cachedDescription{Key: key}
		now := time.Now()
		if f, recent := cache.failed(key, now); recent {
			// It failed to start a moment ago, here or in another host:
			// no run pays its start timeout again before the backoff.
			return nil, fmt.Errorf("start failed %d time(s) in a row, last at %s (not tried again before %s; a new build is tried at once): %s",
				f.Count, f.At.Format(time.RFC3339), f.RetryAt.Format(time.RFC3339), f.Error)
		}
		d, checked, err := r.describeBinary(ctx, c, bin, logger)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, ErrNotPinned) {
				cache.fail(key, err, now)
			}
			return nil, err
		}
		cache.started(key)
		e.Description = *d
		if checked != nil {
			refusal = *checked
			e.SelfCheckPassed = refusal == nil
		}
		if err := cache.write(cache.file(key), e); err != nil {
			r.log.Debug("description cache not written", "error", err)
		} else {
			cache.prune(now)
		}
		if err := checkFamily(c.family, d); err != nil {
			return nil, err
		}
	}
	d := &e.Description
	p := &plugin{pluginBinary: pluginBinary{name: d.Name, path: c.path, sha256: sum, exe: bin, cacheKey: key, desc: d}, logger: logger, cfg: &r.cfg}
	if e.SelfCheckPassed || refusal != nil {
		p.selfChecked.finish(refusal)
	}
	if r.cfg.Host != nil {
		p.unsupported = unsupportedReason(d, *r.cfg.Host)
	}
	return p, nil
}

// describeBinary starts the binary of c once and asks what it serves. The
// description must pass validateDescription. With a description cache,
// the kernel self-check runs too, on the same process, so that its result
// is cached with the description and no later start pays for it; checked
// is then its refusal (nil: passed), and nil without a cache or a catalog.
func (r *Registry) describeBinary(ctx context.Context, c candidate, bin *verifiedBinary, logger hclog.Logger) (d *core.Description, checked *error, err error) {
	sctx, cancel := r.cfg.startContext(ctx)
	defer cancel()
	cfg := r.cfg
	cfg.Host = nil // describing needs no hardware
	inst, err := spawn(sctx, &cfg, bin, logger)
	if err != nil {
		return nil, nil, fmt.Errorf("start: %w", err)
	}
	defer inst.stop(cfg.StopGrace)
	if d, err = inst.backend.Describe(sctx); err != nil {
		return nil, nil, err
	}
	if err := validateDescription(d); err != nil {
		return nil, nil, err
	}
	if r.cfg.CacheDir == "" || !d.HasKernels() || d.Name != c.family {
		return d, nil, nil
	}
	refusal, err := runSelfCheck(sctx, &cfg, d, inst.backend)
	if err != nil {
		return d, nil, nil // checked at the first start instead
	}
	if refusal != nil {
		logger.Error("plugin refused by the kernel self-check", "error", refusal)
	}
	return d, &refusal, nil
}

// unsupportedReason says why none of d's names runs on host; empty when
// one does.
func unsupportedReason(d *core.Description, host core.HostInfo) string {
	var why []string
	for _, h := range d.Handlers {
		ok, reason := core.SupportsAny(h.Hardware, host)
		if ok {
			return ""
		}
		why = append(why, h.Name+": "+reason)
	}
	return strings.Join(why, "; ")
}

// checkDescription runs every check of a description of the binary named
// for family.
func checkDescription(family string, d *core.Description) error {
	if err := validateDescription(d); err != nil {
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

// validateDescription refuses a description that cannot be served: no
// names, a name without methods or with an unknown one. A kernel catalog
// may cover a subset of a name's methods (the host runs the others).
func validateDescription(d *core.Description) error {
	if !wire.ValidFamily(d.Name) {
		return fmt.Errorf("%w: plugin name %q: want letters, digits, '_' or '-'", core.ErrProtocol, d.Name)
	}
	if len(d.Handlers) == 0 {
		return fmt.Errorf("%w: plugin serves no names", core.ErrProtocol)
	}
	for _, h := range d.Handlers {
		if h.Name == "" {
			return fmt.Errorf("%w: a handler with an empty name", core.ErrProtocol)
		}
		if len(h.Methods) == 0 {
			return fmt.Errorf("%w: name %q declares no methods", core.ErrProtocol, h.Name)
		}
		for _, m := range h.Methods {
			if !m.Valid() {
				return fmt.Errorf("%w: name %q declares an unknown method %d", core.ErrProtocol, h.Name, int(m))
			}
		}
	}
	return nil
}

func (r *Registry) addPlugin(t *routeTable, p *plugin) {
	for _, h := range p.desc.Handlers {
		if h.Name == core.TritonName {
			r.log.Warn("plugin claims the triton name; the in-process triton rules keep it", "plugin", p.name)
			continue
		}
		if prev, dup := t.routes[h.Name]; dup {
			r.log.Warn("backend name served twice; the first plugin keeps it",
				"backend", h.Name, "plugin", p.name, "kept", prev.be.family())
			continue
		}
		t.routes[h.Name] = newRoute(h, p, !r.cfg.NoAnswerCache)
		r.served.Store(h.Name, p.name)
	}
	t.plugins = append(t.plugins, p)
}

// addLinked routes the names of the host's in-process backends
// (Config.Backends) that no plugin serves; a plugin's is kept, and logged.
func (r *Registry) addLinked(routes map[string]*route) {
	for _, b := range r.linked {
		for _, h := range b.desc.Handlers {
			switch prev := routes[h.Name]; {
			case h.Name == core.TritonName:
				r.log.Warn("in-process backend claims the triton name; the triton rules keep it", "backend", b.family())
			case prev != nil && prev.down == nil:
				r.log.Info("backend name served by a plugin and in process; the plugin serves it",
					"backend", h.Name, "plugin", prev.be.family(), "in_process", b.family())
			default:
				routes[h.Name] = newRoute(h, b, !r.cfg.NoAnswerCache)
			}
		}
	}
}

// Plugins lists every plugin found, usable or not, sorted by name.
func (r *Registry) Plugins() []PluginInfo {
	t := r.table.Load()
	out := make([]PluginInfo, 0, len(t.plugins)+len(t.broken)+len(t.unfound))
	for _, p := range t.plugins {
		pi := PluginInfo{
			Name: p.name, Path: p.path, Version: p.desc.Version, Vendor: p.desc.Vendor,
			ProtocolVersion: p.desc.ProtocolVersion, SHA256: p.sha256, DeviceCode: p.desc.DeviceCode,
		}
		for _, h := range p.desc.Handlers {
			if rt, ok := t.routes[h.Name]; ok && rt.be == backend(p) {
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
	out = append(out, t.broken...)
	out = append(out, t.unfound...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns every name a plugin serves, sorted.
func (r *Registry) Names() []string {
	t := r.table.Load()
	out := make([]string, 0, len(t.routes))
	for n, rt := range t.routes {
		if rt.down == nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Handler returns what the plugin serving name declared, and whether one
// does.
func (r *Registry) Handler(name string) (core.HandlerInfo, string, bool) {
	rt, ok := r.table.Load().routes[name]
	if !ok || rt.down != nil {
		return core.HandlerInfo{}, "", false
	}
	return rt.handler, rt.be.family(), true
}

// Platform returns the platform that replaces an unset one.
func (r *Registry) Platform() core.Platform { return r.cfg.Platform }

// Start starts, concurrently, the processes of every usable plugin that is
// not running yet, and returns when all are ready or failed, with how long
// each start took. A host calls it to pay the start-up cost before the
// first request; plugins otherwise start on their first request.
func (r *Registry) Start(ctx context.Context) (map[string]time.Duration, error) {
	t := r.table.Load()
	var mu sync.Mutex
	took := map[string]time.Duration{}
	var errs []error
	var wg sync.WaitGroup
	for _, p := range t.plugins {
		if p.unsupportedWhy() != "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			_, err := p.acquire(ctx, new(time.Time))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			took[p.name] = time.Since(t0)
		}()
	}
	wg.Wait()
	return took, errors.Join(errs...)
}

// Close ends every plugin process the registry started and waits for them.
// Later requests fall back with ReasonClosed. Close is idempotent.
func (r *Registry) Close() error {
	r.closeOnce.Do(func() {
		// A reload in progress finishes first, so that every process it
		// started is in the table Close ends.
		r.reloadMu.Lock()
		defer r.reloadMu.Unlock()
		r.closed.Store(true)
		r.cfg.endLife() // starts in progress end now
		t := r.table.Load()
		var wg sync.WaitGroup
		for _, p := range t.plugins {
			wg.Add(1)
			go func() { defer wg.Done(); p.stop() }()
		}
		wg.Wait()
		r.cfg.sockets.remove()
		r.fallbacks.summary()
	})
	return nil
}

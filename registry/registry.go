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
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
	"github.com/attnplug/attnplug/registry/pluginproc"
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
	// nothing. It is made with mode 0700 when absent; one that another
	// user owns or may write is not used (a warning says why).
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
	// PluginMemoryLimit bounds the memory of each plugin process, in
	// bytes. On Linux the registry limits its data segment (RLIMIT_DATA:
	// the memory it writes, Go's heap and every malloc, not the address
	// space it only reserves) as soon as it runs; a Go plugin also gets a
	// GOMEMLIMIT of three quarters of it, so that its collector works to
	// stay below. A plugin that needs more fails to allocate (a Go plugin
	// exits "out of memory") and is restarted as after any crash.
	// Default: DefaultPluginMemoryLimit; negative: no limit.
	PluginMemoryLimit int64
}

// DefaultPluginMemoryLimit is the default of Config.PluginMemoryLimit:
// 4 GiB, some 50 times what the in-tree plugins use at most (a plan at
// core's bounds: 85 MiB resident), and room for a vendor plugin that
// compiles its device code (NVRTC) in its process.
const DefaultPluginMemoryLimit = 4 << 30

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
		c.SocketDir = pluginproc.DefaultSocketBase()
	}
	if c.PluginMemoryLimit == 0 {
		c.PluginMemoryLimit = DefaultPluginMemoryLimit
	}
	if c.ExpectedNames == nil {
		for _, n := range ReferenceNames() {
			if n != core.TritonName {
				c.ExpectedNames = append(c.ExpectedNames, n)
			}
		}
	}
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

// PluginDirs splits list, ':'-separated, into the plugin directories it
// names, each of which must exist: a typo is an error, not an empty
// registry.
func PluginDirs(list string) ([]string, error) {
	dirs := SplitDirs(list)
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%q names no directory", list)
	}
	for _, d := range dirs {
		st, err := os.Stat(d)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("plugin directory %s does not exist", d)
		case err != nil:
			return nil, fmt.Errorf("plugin directory %s: %v", d, err)
		case !st.IsDir():
			return nil, fmt.Errorf("%s is not a directory", d)
		}
	}
	return dirs, nil
}

// DefaultCacheDir is the directory of the description cache
// (Config.CacheDir): $ATTNPLUG_CACHE_DIR, else attnplug/ in the user's
// cache directory; empty when there is none.
func DefaultCacheDir() string {
	if d := os.Getenv("ATTNPLUG_CACHE_DIR"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "attnplug")
}

// ReadLockIfPresent reads the lock file at path, as ReadLock does, but
// returns nil and no error when required is false and there is no file.
func ReadLockIfPresent(path string, required bool) (*Lock, error) {
	if !required {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
	}
	return ReadLock(path)
}

// Registry resolves names to backends and answers requests. Build it with
// New and end it with Close.
type Registry struct {
	cfg   Config
	log   hclog.Logger
	table atomic.Pointer[routeTable]

	// proc is what the plugins share: settings, sockets, life.
	proc *pluginproc.Config
	// fallbackRoute is the route of the fallback backend, the triton
	// rules in process (core.Triton): the default route and the routes of
	// missing names are copies of it, and every fallback asks it.
	fallbackRoute *route
	// linked are the backends of Config.Backends.
	linked []*backend.InProcess
	// devices holds the device code learnt from each backend
	// (*deviceState by backend.Backend; device.go).
	devices sync.Map

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

// New discovers the plugins of cfg.PluginDirs and learns what each serves,
// from the description cache or by starting it once. A plugin that cannot
// be described is listed as broken and does not fail New; New fails only
// when ctx ends or cfg.Lock cannot be honoured.
func New(ctx context.Context, cfg Config) (*Registry, error) {
	cfg.setDefaults()
	r := &Registry{cfg: cfg, log: cfg.Logger}
	r.lock.Store(cfg.Lock)
	r.fallbacks.log = r.log
	r.proc = &pluginproc.Config{
		Dirs: cfg.PluginDirs, Logger: cfg.Logger, CallTimeout: cfg.CallTimeout, StartTimeout: cfg.StartTimeout,
		RestartBackoff: cfg.RestartBackoff, MaxRestartBackoff: cfg.MaxRestartBackoff, StopGrace: cfg.StopGrace,
		QuarantineAfter: cfg.QuarantineAfter, CacheDir: cfg.CacheDir, Host: cfg.Host, Lock: cfg.Lock,
		InsecurePluginDir: cfg.InsecurePluginDir, SocketDir: cfg.SocketDir, MemoryLimit: cfg.PluginMemoryLimit,
	}
	r.proc.Open()
	triton, err := r.newInProcess(ctx, core.Triton{})
	if err != nil {
		return nil, err
	}
	r.fallbackRoute = newRoute(triton.Description().Handlers[0], triton, !cfg.NoAnswerCache)
	for _, b := range cfg.Backends {
		ip, err := r.newInProcess(ctx, b)
		if err != nil {
			return nil, err
		}
		r.linked = append(r.linked, ip)
	}
	t, err := r.load(ctx, nil)
	if err != nil {
		r.proc.End()
		r.proc.Shut()
		return nil, err
	}
	r.table.Store(t)
	return r, nil
}

// Plugins lists every plugin found, usable or not, sorted by name.
func (r *Registry) Plugins() []PluginInfo {
	t := r.table.Load()
	out := make([]PluginInfo, 0, len(t.plugins)+len(t.broken)+len(t.unfound))
	for _, p := range t.plugins {
		pi := p.Info()
		for _, h := range p.Description().Handlers {
			if rt, ok := t.routes[h.Name]; ok && rt.be == backend.Backend(p) {
				pi.Names = append(pi.Names, h.Name)
				if h.AliasOf != "" {
					if pi.Aliases == nil {
						pi.Aliases = map[string]string{}
					}
					pi.Aliases[h.Name] = h.AliasOf
				}
			}
		}
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
		if rt.serves() {
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
	if !ok || !rt.serves() {
		return core.HandlerInfo{}, "", false
	}
	return rt.handler, rt.family, true
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
		if p.Unsupported() != "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			err := p.Start(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			took[p.Family()] = time.Since(t0)
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
		r.proc.End() // starts in progress end now
		t := r.table.Load()
		var wg sync.WaitGroup
		for _, p := range t.plugins {
			wg.Add(1)
			go func() { defer wg.Done(); p.Stop() }()
		}
		wg.Wait()
		r.proc.Shut()
		r.fallbacks.summary()
	})
	return nil
}

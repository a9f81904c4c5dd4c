package pluginproc

import (
	"context"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
)

// Config is what the plugins of one registry share: the registry's
// settings, the fields of registry.Config of the same names (which say
// what each means and its default; registry.New copies them here,
// defaulted), and the socket directory and life that Open makes and End
// ends.
// The two stay separate types: registry.Config is the public API, and
// a caller configures a registry without naming pluginproc.
type Config struct {
	Dirs              []string
	Logger            hclog.Logger
	CallTimeout       time.Duration
	StartTimeout      time.Duration
	RestartBackoff    time.Duration
	MaxRestartBackoff time.Duration
	StopGrace         time.Duration
	QuarantineAfter   int
	CacheDir          string
	// Host, when set, is told to every process started, which may refuse
	// it; a plugin none of whose names runs there is never started.
	Host *core.HostInfo
	// Lock, when set, has go-plugin check each binary's hash at every
	// start; its Path names the lock in errors.
	Lock *Lock
	// InsecurePluginDir turns off the ownership and mode checks of
	// discovery.
	InsecurePluginDir bool
	// SocketDir is the base of the private socket directory.
	SocketDir string
	// MemoryLimit, when positive, bounds each plugin process's memory, in
	// bytes (spawn).
	MemoryLimit int64

	sockets *socketDir
	// life ends at End: starts in progress end with it.
	life    context.Context
	endLife context.CancelFunc
}

// Open makes the private socket directory (on first use) and the life of
// the plugins' starts, and turns the description cache off when its
// directory cannot be trusted (usableCacheDir). Call it once, before the
// first start.
func (c *Config) Open() {
	c.CacheDir = usableCacheDir(c.CacheDir, c.Logger)
	c.sockets = &socketDir{base: c.SocketDir, log: c.Logger}
	c.life, c.endLife = context.WithCancel(context.Background())
}

// End ends the starts in progress; call Shut once every plugin ended.
func (c *Config) End() {
	if c.endLife != nil {
		c.endLife()
	}
}

// Shut removes the socket directory and whatever sockets are left in it.
func (c *Config) Shut() {
	if c.sockets != nil {
		c.sockets.remove()
	}
}

// startContext bounds a plugin's start: by StartTimeout, ctx, and the
// registry's life (End ends a start in progress).
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

// DefaultSocketBase is where the socket directories go by default:
// $XDG_RUNTIME_DIR/attnplug, else <os.TempDir()>/attnplug-<uid>.
func DefaultSocketBase() string { return defaultSocketBase() }

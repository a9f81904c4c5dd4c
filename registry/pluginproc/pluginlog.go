package pluginproc

import (
	"fmt"
	"sync/atomic"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
	"github.com/hashicorp/go-hclog"
)

// Messages of go-plugin's client that pluginLogger rewrites.
const (
	msgNotGraceful = "plugin failed to exit gracefully"
	msgExited      = "plugin process exited"
)

// pluginLogger is the logger go-plugin's client of one plugin process
// logs to. It drops the "timestamp" and "@module" go-plugin adds to each
// line the plugin logged (the host's own time and the logger's name
// already start the line); it logs at Debug the plugin's warning of a
// deprecated name (the registry warns of it, once per process) and, while
// the process has not completed the handshake, go-plugin's complaints
// about how it ended: a binary that never started did not fail to exit
// gracefully, and the registry logs why it is not usable.
//
// go-plugin names the process by what it executed, which is the
// descriptor of the verified binary (wire.LaunchConfig.File): the lines
// name the binary's path instead. The end of a process the registry
// killed on purpose (stopping) is logged at Debug: the registry says why
// it killed it.
type pluginLogger struct {
	hclog.Logger
	started  *atomic.Bool
	stopping *atomic.Bool
	path     string
}

func newPluginLogger(l hclog.Logger, path string) pluginLogger {
	return pluginLogger{Logger: l, started: new(atomic.Bool), stopping: new(atomic.Bool), path: path}
}

// Log logs msg at level, rewritten as the type's comment says.
func (l pluginLogger) Log(level hclog.Level, msg string, args ...any) {
	quiet := msg == core.MsgDeprecatedName ||
		!l.started.Load() && (msg == msgNotGraceful || msg == msgExited) ||
		l.stopping.Load() && msg == msgExited
	if level > hclog.Debug && quiet {
		level = hclog.Debug
	}
	args = dropKeys(args)
	for i := 1; i < len(args); i += 2 {
		if v, ok := args[i].(string); ok && v == execPath {
			args = append([]any(nil), args...)
			args[i] = l.path
		}
	}
	l.Logger.Log(level, msg, args...)
}

// execPath is what go-plugin calls a process started from its binary's
// descriptor.
var execPath = fmt.Sprintf("/proc/self/fd/%d", wire.ExecFD)

// Trace logs at Trace through Log.
func (l pluginLogger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }

// Debug logs at Debug through Log.
func (l pluginLogger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }

// Info logs at Info through Log.
func (l pluginLogger) Info(msg string, args ...any) { l.Log(hclog.Info, msg, args...) }

// Warn logs at Warn through Log.
func (l pluginLogger) Warn(msg string, args ...any) { l.Log(hclog.Warn, msg, args...) }

// Error logs at Error through Log.
func (l pluginLogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

// With returns a pluginLogger with args added.
func (l pluginLogger) With(args ...any) hclog.Logger {
	return pluginLogger{Logger: l.Logger.With(args...), started: l.started, stopping: l.stopping, path: l.path}
}

// Named returns a pluginLogger named after l's name and name.
func (l pluginLogger) Named(name string) hclog.Logger {
	return pluginLogger{Logger: l.Logger.Named(name), started: l.started, stopping: l.stopping, path: l.path}
}

// ResetNamed returns a pluginLogger named name.
func (l pluginLogger) ResetNamed(name string) hclog.Logger {
	return pluginLogger{Logger: l.Logger.ResetNamed(name), started: l.started, stopping: l.stopping, path: l.path}
}

// dropKeys returns key-value args without the "timestamp" and "@module"
// pairs.
func dropKeys(args []any) []any {
	var out []any
	for i := 0; i < len(args); i += 2 {
		if k, ok := args[i].(string); ok && (k == "timestamp" || k == "@module") && i+1 < len(args) {
			if out == nil {
				out = append(make([]any, 0, len(args)), args[:i]...)
			}
			continue
		}
		if out != nil {
			out = append(out, args[i:min(i+2, len(args))]...)
		}
	}
	if out == nil {
		return args
	}
	return out
}

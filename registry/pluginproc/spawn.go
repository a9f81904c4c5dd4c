package pluginproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/attnplug/attnplug/wire"
	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
)

// spawn starts the verified plugin binary bin with the host's launcher
// (wire.Launch), from its descriptor, limits its memory
// (Config.MemoryLimit), and returns the connected instance, configured
// with the host's hardware; on any error the process is killed.
func spawn(ctx context.Context, cfg *Config, bin *verifiedBinary, logger hclog.Logger) (*instance, error) {
	path, sum := bin.path, bin.sha256
	file, err := bin.file()
	if err != nil {
		return nil, err
	}
	env, private := pluginEnv(cfg)
	plog := newPluginLogger(logger, path)
	lc := wire.LaunchConfig{
		Path: path, File: file, Env: env, Logger: plog, StartTimeout: cfg.StartTimeout,
		// A socket in the registry's private directory (mode 0700) is
		// reachable by the host's user alone, who could read the plugin's
		// memory anyway: mutual TLS then adds nothing but time.
		PrivateSocket: private,
	}
	if cfg.Lock != nil {
		secure, err := secureConfig(sum)
		if err != nil {
			return nil, err
		}
		lc.SecureConfig = secure
	}
	proc, err := wire.Launch(ctx, lc)
	if err != nil {
		return nil, notPinned(err, cfg, path, sum, file)
	}
	plog.started.Store(true)
	if cfg.MemoryLimit > 0 {
		// Set once the process runs (no Go code runs between fork and
		// exec): it has only started the Go runtime and answered the
		// handshake, a few MiB, and is asked nothing before.
		if err := limitMemory(proc.PID(), cfg.MemoryLimit); err != nil {
			logger.Warn("plugin memory not limited", "error", err)
		}
	}
	inst := &instance{proc: proc, backend: proc.Client(), pid: proc.PID(), stopping: plog.stopping}
	if cfg.Host != nil {
		if err := inst.backend.Configure(ctx, *cfg.Host); err != nil {
			inst.stop(cfg.StopGrace)
			return nil, err
		}
	}
	return inst, nil
}

// pluginEnv is a plugin's environment: the plugin log level (unless the
// host's environment sets one), the host's environment, the private
// directory of its socket (socketDir) instead of any
// $PLUGIN_UNIX_SOCKET_DIR of the host, and, with a memory limit, a
// GOMEMLIMIT of three quarters of it instead of the host's, so that a Go
// plugin's collector works to stay below the limit. private reports that
// the socket goes to the private directory.
func pluginEnv(cfg *Config) (env []string, private bool) {
	env = []string{"ATTNPLUG_PLUGIN_LOG_LEVEL=" + cfg.pluginLogLevel()}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, goplugin.EnvUnixSocketDir+"=") && !(cfg.MemoryLimit > 0 && strings.HasPrefix(kv, "GOMEMLIMIT=")) {
			env = append(env, kv)
		}
	}
	if cfg.MemoryLimit > 0 {
		env = append(env, fmt.Sprintf("GOMEMLIMIT=%d", cfg.MemoryLimit/4*3))
	}
	if cfg.sockets != nil {
		if dir, err := cfg.sockets.dir(); err == nil {
			env = append(env, goplugin.EnvUnixSocketDir+"="+dir)
			private = true
		}
	}
	return env, private
}

// notPinned explains a binary that no longer matches its lock pin: the
// launcher refuses it with go-plugin's bare checksum error. Other errors
// are returned as they are.
func notPinned(err error, cfg *Config, path, sum string, file *os.File) error {
	if !errors.Is(err, goplugin.ErrChecksumsDoNotMatch) {
		return err
	}
	actual, herr := FileSHA256(path)
	if herr != nil {
		actual = "unreadable (" + herr.Error() + ")"
	}
	if file != nil {
		if s, herr := hashFD(file); herr == nil {
			actual = s
		}
	}
	lockPath := ""
	if cfg.Lock != nil {
		lockPath = cfg.Lock.Path
	}
	return fmt.Errorf("%w: %w: %s changed since it was verified: sha256 %s, but %s pins %s", ErrNotPinned, err, path, actual, lockPath, sum)
}

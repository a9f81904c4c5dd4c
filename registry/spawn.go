package registry

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

// spawn starts the plugin binary at path, whose SHA-256 is sum, with the
// host's launcher (wire.Launch), and returns the connected instance,
// configured with the host's hardware; on any error the process is killed.
func spawn(ctx context.Context, cfg *Config, path, sum string, logger hclog.Logger) (*instance, error) {
	env, private := pluginEnv(cfg)
	plog := newPluginLogger(logger)
	lc := wire.LaunchConfig{
		Path: path, Env: env, Logger: plog, StartTimeout: cfg.StartTimeout,
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
		return nil, notPinned(err, cfg, path, sum)
	}
	plog.started.Store(true)
	inst := &instance{proc: proc, backend: proc.Client(), pid: proc.PID()}
	if cfg.Host != nil {
		if err := inst.backend.Configure(ctx, *cfg.Host); err != nil {
			inst.kill()
			return nil, err
		}
	}
	return inst, nil
}

// pluginEnv is a plugin's environment: the plugin log level (unless the
// host's environment sets one), the host's environment, and the private
// directory of its socket (socketDir) instead of any
// $PLUGIN_UNIX_SOCKET_DIR of the host. private reports that the socket
// goes to the private directory.
func pluginEnv(cfg *Config) (env []string, private bool) {
	env = []string{"ATTNPLUG_PLUGIN_LOG_LEVEL=" + cfg.pluginLogLevel()}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, goplugin.EnvUnixSocketDir+"=") {
			env = append(env, kv)
		}
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
func notPinned(err error, cfg *Config, path, sum string) error {
	if !errors.Is(err, goplugin.ErrChecksumsDoNotMatch) {
		return err
	}
	actual, herr := FileSHA256(path)
	if herr != nil {
		actual = "unreadable (" + herr.Error() + ")"
	}
	lockPath := ""
	if cfg.Lock != nil {
		lockPath = cfg.Lock.Path
	}
	return fmt.Errorf("%w: %w: %s changed since it was verified: sha256 %s, but %s pins %s", ErrNotPinned, err, path, actual, lockPath, sum)
}

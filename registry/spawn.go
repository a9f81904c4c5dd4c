package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
)

// spawn starts the plugin binary at path, whose SHA-256 is sum, and
// returns the connected instance; on any error the process is killed.
func spawn(ctx context.Context, cfg *Config, path, sum string, logger hclog.Logger) (*instance, error) {
	cmd := exec.Command(path)
	cmd.SysProcAttr = procAttr()
	// The parent-death pipe: the plugin holds the read end and exits when
	// it reads EOF, which happens when the host is gone however it ended.
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("parent-death pipe: %w", err)
	}
	cmd.ExtraFiles = []*os.File{pr}
	var private bool
	cmd.Env, private = pluginEnv(cfg)
	plog := newPluginLogger(logger)
	cc := &goplugin.ClientConfig{
		HandshakeConfig:  wire.Handshake(),
		VersionedPlugins: wire.VersionedPlugins(nil),
		Cmd:              cmd,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		Logger:           plog,
		StartTimeout:     cfg.StartTimeout,
		GRPCDialOptions:  wire.DialOptions(),
		Stderr:           &stderrTail{},
		SkipHostEnv:      true, // pluginEnv has the host's, less what it sets
		// A socket in the registry's private directory (mode 0700) is
		// reachable by the host's user alone, who could read the plugin's
		// memory anyway: mutual TLS then adds nothing but ~40 ms a start
		// (go-plugin's P-521 keys). A socket anywhere else gets it.
		AutoMTLS: !private,
	}
	if cfg.Lock != nil {
		secure, err := secureConfig(sum)
		if err != nil {
			pr.Close()
			pw.Close()
			return nil, err
		}
		cc.SecureConfig = secure
	}
	client := goplugin.NewClient(cc)
	inst := &instance{client: client, pipe: pw}
	fail := func(err error) (*instance, error) {
		inst.kill()
		return nil, err
	}
	type result struct {
		raw any
		err error
	}
	done := make(chan result, 1)
	go func() {
		rpc, err := client.Client()
		pr.Close() // the child has its copy now
		if err != nil {
			done <- result{err: err}
			return
		}
		plog.started.Store(true)
		raw, err := rpc.Dispense(wire.PluginName)
		done <- result{raw: raw, err: err}
	}()
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		inst.kill()
		<-done
		return nil, ctx.Err()
	}
	if res.err != nil {
		if cmd.Process != nil {
			// The process never started as a plugin: end its process group
			// too, so that no child it forked keeps the pipes open that
			// go-plugin waits on.
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		inst.kill() // waits for go-plugin's stderr reader: the tail is whole
		return nil, startError(res.err, cfg, path, sum, cc.Stderr.(*stderrTail).lastLines())
	}
	b, ok := res.raw.(conn)
	if !ok {
		return fail(fmt.Errorf("%w: dispensed %T, not a backend", core.ErrProtocol, res.raw))
	}
	inst.backend = b
	if rc := client.ReattachConfig(); rc != nil {
		inst.pid = rc.Pid
	}
	if cfg.Host != nil {
		if err := b.Configure(ctx, *cfg.Host); err != nil {
			return fail(err)
		}
	}
	return inst, nil
}

// pluginEnv is a plugin's environment: the plugin log level (unless the
// host's environment sets one), the host's environment, the parent-death
// pipe, and the private directory of its socket (socketDir) instead of
// any $PLUGIN_UNIX_SOCKET_DIR of the host. private reports that the socket
// goes to the private directory.
func pluginEnv(cfg *Config) (env []string, private bool) {
	env = []string{"ATTNPLUG_PLUGIN_LOG_LEVEL=" + cfg.pluginLogLevel()}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, goplugin.EnvUnixSocketDir+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, wire.EnvParentPipe+"=3")
	if cfg.sockets != nil {
		if dir, err := cfg.sockets.dir(); err == nil {
			env = append(env, goplugin.EnvUnixSocketDir+"="+dir)
			private = true
		}
	}
	return env, private
}

// startError makes go-plugin's start errors say what happened, in one
// line: go-plugin's handshake errors run over many lines of generic advice.
// stderr is the end of what the plugin wrote on stderr, if anything.
func startError(err error, cfg *Config, path, sum, stderr string) error {
	if errors.Is(err, goplugin.ErrChecksumsDoNotMatch) {
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
	msg := err.Error()
	if first, _, multi := strings.Cut(msg, "\n"); multi {
		const unrecognized = "Unrecognized remote plugin message: "
		switch {
		case first == unrecognized:
			msg = "no go-plugin handshake: the plugin wrote nothing on stdout before it exited " +
				"(it crashed at start, expects another magic cookie than attnplug's, or is built for another system)"
		case strings.HasPrefix(first, unrecognized):
			msg = fmt.Sprintf("no go-plugin handshake: the plugin's first line on stdout is %q, "+
				"not the handshake (a plugin must write nothing else on stdout)", strings.TrimPrefix(first, unrecognized))
		default:
			msg = first
		}
	}
	if stderr != "" {
		msg += "; it wrote on stderr: " + stderr
	}
	if msg == err.Error() {
		return err
	}
	return &startFailure{msg: msg, err: err}
}

// startFailure is a start error with a message of its own.
type startFailure struct {
	msg string
	err error
}

func (e *startFailure) Error() string { return e.msg }
func (e *startFailure) Unwrap() error { return e.err }

// stderrTail keeps the end of what a plugin wrote on stderr, to explain a
// failed start.
type stderrTail struct {
	mu sync.Mutex
	b  []byte
}

const stderrTailBytes = 4096

func (t *stderrTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2*stderrTailBytes {
		t.b = append(t.b[:0], t.b[len(t.b)-stderrTailBytes:]...)
	}
	return len(p), nil
}

// lastLines returns the last three non-empty lines written, joined by
// " / ", at most 400 bytes.
func (t *stderrTail) lastLines() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var keep []string
	lines := strings.Split(string(t.b), "\n")
	for i := len(lines) - 1; i >= 0 && len(keep) < 3; i-- {
		if line := strings.TrimSpace(lines[i]); line != "" {
			keep = append([]string{line}, keep...)
		}
	}
	out := strings.Join(keep, " / ")
	if len(out) > 400 {
		out = "..." + out[len(out)-400:]
	}
	return out
}

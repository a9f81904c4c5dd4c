package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

// LaunchConfig says how to start a plugin binary. Launch starts it the way
// every attnplug host does; what differs from one host to another is here.
type LaunchConfig struct {
	// Path is the plugin binary.
	Path string
	// Env is the plugin's whole environment: the host's own is not added
	// (a caller passes os.Environ() for it). Launch adds EnvParentPipe and
	// go-plugin adds its handshake variables.
	Env []string
	// Logger receives go-plugin's log of the process, the lines the plugin
	// logs on stderr included. Default: none.
	Logger hclog.Logger
	// StartTimeout bounds the start and the handshake. Default: 10s.
	StartTimeout time.Duration
	// SecureConfig, when set, has go-plugin check the binary's hash before
	// it runs it; a binary that does not match fails with an error wrapping
	// plugin.ErrChecksumsDoNotMatch, and nothing is run.
	SecureConfig *plugin.SecureConfig
	// PrivateSocket says that the plugin's socket lies in a directory only
	// the host's user can reach ($PLUGIN_UNIX_SOCKET_DIR in Env, mode
	// 0700): mutual TLS then adds nothing but time (go-plugin's P-521 keys,
	// ~40 ms a start), and is left off. Otherwise it is on.
	PrivateSocket bool
	// Stdout receives what the plugin writes on stdout after the
	// handshake, which no plugin should; nil discards it.
	Stdout io.Writer
	// Stderr receives the plugin's stderr as it comes, besides Logger and
	// the tail that explains a failed start; nil: none.
	Stderr io.Writer
}

// DefaultStartTimeout is LaunchConfig.StartTimeout's default.
const DefaultStartTimeout = 10 * time.Second

// Process is a plugin process that Launch started and connected to.
type Process struct {
	client *plugin.Client
	conn   *Client
	pid    int
	pipe   *os.File // the host's end of the parent-death pipe
	cancel context.CancelFunc
	once   sync.Once
}

// Launch starts the plugin binary cfg.Path as a host does and returns the
// connected process: go-plugin's handshake over gRPC alone, the protocol
// versions of this package, the host's message-size limit (DialOptions),
// the parent-death pipe (EnvParentPipe, descriptor 3: the plugin exits
// when the host is gone, however it ended), a process group of its own
// (on Linux also a SIGKILL when the host's thread ends), and ctx over the
// start: when ctx ends first the process is killed and ctx's error
// returned.
//
// A failed start is one line, with the end of what the plugin wrote on
// stderr: go-plugin's own errors run over many lines of generic advice.
// The process and any child it forked are killed.
func Launch(ctx context.Context, cfg LaunchConfig) (*Process, error) {
	// go-plugin's Kill waits for a start in progress to end, which takes up
	// to StartTimeout for a binary that never shakes hands: ending ctx
	// cancels kill instead, and exec kills the process group at once.
	kill, cancelKill := context.WithCancel(context.Background())
	cmd := exec.CommandContext(kill, cfg.Path)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.SysProcAttr = procAttr()
	pr, pw, err := os.Pipe()
	if err != nil {
		cancelKill()
		return nil, fmt.Errorf("parent-death pipe: %w", err)
	}
	cmd.ExtraFiles = []*os.File{pr}
	cmd.Env = append(append([]string(nil), cfg.Env...), EnvParentPipe+"=3")
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	tail := &stderrTail{}
	var stderr io.Writer = tail
	if cfg.Stderr != nil {
		stderr = io.MultiWriter(tail, cfg.Stderr)
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake(),
		VersionedPlugins: VersionedPlugins(nil),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           logger,
		StartTimeout:     timeout,
		GRPCDialOptions:  DialOptions(),
		Stderr:           stderr,
		SyncStdout:       cfg.Stdout,
		SkipHostEnv:      true, // cfg.Env is the whole environment
		AutoMTLS:         !cfg.PrivateSocket,
		SecureConfig:     cfg.SecureConfig,
	})
	p := &Process{client: client, pipe: pw, cancel: cancelKill}
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
		raw, err := rpc.Dispense(PluginName)
		done <- result{raw: raw, err: err}
	}()
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		cancelKill()
		<-done
		p.Kill()
		return nil, ctx.Err()
	}
	if res.err != nil {
		if cmd.Process != nil {
			// The process never started as a plugin: end its process group
			// too, so that no child it forked keeps the pipes open that
			// go-plugin waits on.
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		p.Kill() // waits for go-plugin's stderr reader: the tail is whole
		if errors.Is(res.err, plugin.ErrChecksumsDoNotMatch) {
			return nil, res.err
		}
		return nil, startError(res.err, tail.lastLines())
	}
	conn, ok := res.raw.(*Client)
	if !ok {
		p.Kill()
		return nil, fmt.Errorf("%w: dispensed %T, not a backend", core.ErrProtocol, res.raw)
	}
	p.conn = conn
	if rc := client.ReattachConfig(); rc != nil {
		p.pid = rc.Pid
	}
	return p, nil
}

// Client is the connection to the plugin: a core.BatchBackend,
// core.Configurer, core.KernelRunner and core.KernelPlanner.
func (p *Process) Client() *Client { return p.conn }

// PID is the plugin's process id.
func (p *Process) PID() int { return p.pid }

// ProtocolVersion is the protocol version negotiated in the handshake.
func (p *Process) ProtocolVersion() int { return p.client.NegotiatedVersion() }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool { return p.client.Exited() }

// Kill ends the process at once (go-plugin closes the connection and waits
// a moment for a clean exit first) and closes the parent-death pipe. It
// may be called more than once, and from any goroutine.
func (p *Process) Kill() {
	p.client.Kill()
	p.once.Do(func() {
		p.cancel()
		p.pipe.Close()
	})
}

// startError makes go-plugin's start errors say what happened, in one
// line: go-plugin's handshake errors run over many lines of generic advice.
// stderr is the end of what the plugin wrote on stderr, if anything.
func startError(err error, stderr string) error {
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

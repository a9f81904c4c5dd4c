package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
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
	// go-plugin adds its handshake variables. When it names no directory
	// of the plugin's socket ($PLUGIN_UNIX_SOCKET_DIR), Launch makes one
	// (mode 0700, in the temporary directory) and removes it with what is
	// left in it when the process ends (Stop, Kill, a failed start):
	// go-plugin's default, the temporary directory itself, kept the socket
	// of every plugin killed with SIGKILL.
	Env []string
	// Logger receives go-plugin's log of the process, the lines the plugin
	// logs on stderr included. Default: none.
	Logger hclog.Logger
	// StartTimeout bounds the start and the handshake. Default: 10s.
	StartTimeout time.Duration
	// SecureConfig, when set, checks the binary's hash before it runs; a
	// binary that does not match fails with an error wrapping
	// plugin.ErrChecksumsDoNotMatch, and nothing is run. With File, the
	// bytes of File are checked, else go-plugin checks the file at Path.
	SecureConfig *plugin.SecureConfig
	// File, when set, is an open descriptor of the binary at Path: on
	// Linux the process runs exactly its bytes (execve of /proc/self/fd,
	// the plugin holding the binary as descriptor ExecFD), so that a file
	// put at Path since the descriptor was opened (a refused hot swap, a
	// binary replaced without a reload) is never what runs. Path still
	// names the process (argv[0]) and the errors. Elsewhere Path is run.
	File *os.File
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

// ExecFD is the descriptor of its own binary that a plugin started from
// LaunchConfig.File holds (EnvParentPipe's descriptor 3 comes before it).
const ExecFD = 4

// checkFile checks the SHA-256 of f's bytes against secure's checksum, as
// go-plugin checks a path.
func checkFile(f *os.File, secure *plugin.SecureConfig) error {
	if secure.Hash == nil || len(secure.Checksum) == 0 {
		return plugin.ErrSecureConfigNoChecksum
	}
	h := secure.Hash
	h.Reset()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62)); err != nil {
		return fmt.Errorf("hash: %w", err)
	}
	if sum := h.Sum(nil); !bytes.Equal(sum, secure.Checksum) {
		return plugin.ErrChecksumsDoNotMatch
	}
	return nil
}

// DefaultStartTimeout is LaunchConfig.StartTimeout's default.
const DefaultStartTimeout = 10 * time.Second

// Process is a plugin process that Launch started and connected to.
type Process struct {
	client  *plugin.Client
	conn    *Client
	pid     int
	pipe    *os.File // the host's end of the parent-death pipe
	cancel  context.CancelFunc
	once    sync.Once
	sockDir string // the socket directory Launch made, removed at the end; "" when the caller gave one
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
	secure := cfg.SecureConfig
	if cfg.File != nil && execByFD && secure != nil {
		// go-plugin would hash the file at Path, which may be another.
		if err := checkFile(cfg.File, secure); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Path, err)
		}
		secure = nil
	}
	sockDir, err := socketDir(&cfg)
	if err != nil {
		return nil, err
	}
	kill, cancelKill := context.WithCancel(context.Background())
	cmd, pr, pw, err := launchCommand(kill, cfg)
	if err != nil {
		cancelKill()
		if sockDir != "" {
			os.RemoveAll(sockDir)
		}
		return nil, err
	}
	tail := &stderrTail{}
	client := plugin.NewClient(clientConfig(cfg, cmd, secure, tail))
	p := &Process{client: client, pipe: pw, cancel: cancelKill, sockDir: sockDir}
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
		// go-plugin's start ends once the process is gone and its pipes
		// closed, which a descendant that left the process group can put
		// off for as long as it lives: wait for it a moment at most, and
		// let the rest of the cleanup finish in the background.
		select {
		case <-done:
			p.Kill()
		case <-time.After(killWait):
			go func() { <-done; p.Kill() }()
		}
		return nil, ctx.Err()
	}
	if res.err != nil {
		if cmd.Process != nil {
			// The process never started as a plugin: end its process group
			// too, so that no child it forked keeps the pipes open that
			// go-plugin waits on.
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		// Kill waits for go-plugin's stderr reader, so that the tail is
		// whole, unless a descendant outside the process group holds the
		// pipe: then for a moment only, so that the start timeout bounds
		// the whole start.
		p.stop(0, failedStartWait)
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

// socketDir makes the directory of the plugin's socket when cfg.Env names
// none, and names it in cfg.Env; it returns the directory made, or "".
func socketDir(cfg *LaunchConfig) (string, error) {
	for _, kv := range cfg.Env {
		if strings.HasPrefix(kv, plugin.EnvUnixSocketDir+"=") {
			return "", nil
		}
	}
	dir, err := os.MkdirTemp("", "attnplug-")
	if err != nil {
		return "", fmt.Errorf("%s: the directory of its socket: %w", cfg.Path, err)
	}
	cfg.Env = append(slices.Clip(cfg.Env), plugin.EnvUnixSocketDir+"="+dir)
	return dir, nil
}

// launchCommand is the command that starts the plugin of cfg, killed with
// its process group when kill ends, with the parent-death pipe on
// descriptor 3: it returns the pipe's ends, the child's (pr) and the
// host's (pw).
func launchCommand(kill context.Context, cfg LaunchConfig) (cmd *exec.Cmd, pr, pw *os.File, err error) {
	cmd = exec.CommandContext(kill, cfg.Path)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.SysProcAttr = procAttr()
	pr, pw, err = os.Pipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parent-death pipe: %w", err)
	}
	cmd.ExtraFiles = []*os.File{pr}
	if cfg.File != nil && execByFD {
		cmd.ExtraFiles = append(cmd.ExtraFiles, cfg.File) // ExecFD in the child
		cmd.Path = fmt.Sprintf("/proc/self/fd/%d", ExecFD)
	}
	cmd.Env = append(append([]string(nil), cfg.Env...), EnvParentPipe+"=3")
	return cmd, pr, pw, nil
}

// clientConfig is go-plugin's configuration of a start of cmd: gRPC
// only, the handshake and protocol versions of this package, the host's
// message-size limit, stderr kept in tail too.
func clientConfig(cfg LaunchConfig, cmd *exec.Cmd, secure *plugin.SecureConfig, tail *stderrTail) *plugin.ClientConfig {
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	var stderr io.Writer = tail
	if cfg.Stderr != nil {
		stderr = io.MultiWriter(tail, cfg.Stderr)
	}
	return &plugin.ClientConfig{
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
		SecureConfig:     secure,
	}
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

// Kill ends the process at once: Stop with no grace.
func (p *Process) Kill() { p.Stop(0) }

// Stop ends the process within a bounded time, whatever state it is in
// (hung, stopped by SIGSTOP, a child of it holding its pipes): go-plugin
// asks the plugin to shut down and, once grace has passed without its
// exit, the process group gets SIGKILL and the parent-death pipe closes.
// Stop returns when the process is gone, or killWait after the SIGKILL
// at the latest (go-plugin's goroutines then finish in the background):
// it never blocks for longer than grace plus killWait. It may be called
// more than once, and from any goroutine.
func (p *Process) Stop(grace time.Duration) { p.stop(grace, killWait) }

// stop is Stop, waiting at most wait after the SIGKILL.
func (p *Process) stop(grace, wait time.Duration) {
	done := make(chan struct{})
	go func() {
		// go-plugin's Kill sends a Shutdown RPC that has no deadline of
		// its own: it returns once the process is gone.
		p.client.Kill()
		close(done)
	}()
	if grace > 0 {
		t := time.NewTimer(grace)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	p.once.Do(func() {
		p.cancel() // exec's Cancel: SIGKILL to the process group
		p.pipe.Close()
	})
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	if p.sockDir != "" {
		os.RemoveAll(p.sockDir) // a process still alive has its listener already
	}
}

// killWait bounds how long Stop waits after the SIGKILL: a process group
// is gone at once, but a descendant that left it may keep the pipes that
// go-plugin reads open for as long as it lives.
const killWait = 2 * time.Second

// failedStartWait is killWait for a process that failed to start.
const failedStartWait = 250 * time.Millisecond

// DefaultStopGrace is how long a host lets a plugin exit on its own when
// it ends it in good order (Process.Stop), before the SIGKILL.
const DefaultStopGrace = 2 * time.Second

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

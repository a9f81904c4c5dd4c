package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
)

// instance is one running plugin process.
type instance struct {
	client  *goplugin.Client
	backend batchClient
	pid     int
	pipe    *os.File // write end of the parent-death pipe

	// calls are held shared by every call in flight; retire takes it
	// exclusively, so that the process ends only after they finish.
	calls   sync.RWMutex
	retired bool // guarded by calls
}

// batchClient is what the registry needs of a plugin connection
// (wire.Client): every ability, since over the wire each method exists and
// the description says which the plugin has.
type batchClient interface {
	core.BatchBackend
	core.Configurer
	core.KernelRunner
	core.KernelPlanner
}

// enter admits a call; false means the instance was retired.
func (i *instance) enter() bool {
	i.calls.RLock()
	if i.retired {
		i.calls.RUnlock()
		return false
	}
	return true
}

func (i *instance) leave() { i.calls.RUnlock() }

// retire waits for the calls in flight, then ends the process.
func (i *instance) retire() {
	i.calls.Lock()
	i.retired = true
	i.calls.Unlock()
	i.kill()
}

// kill ends the process at once.
func (i *instance) kill() {
	i.client.Kill()
	if i.pipe != nil {
		i.pipe.Close()
	}
}

// plugin is a discovered plugin binary and the process the registry runs
// for it, if any.
type plugin struct {
	name   string // the family name, from the description
	path   string
	sha256 string
	desc   *core.Description
	logger hclog.Logger
	cfg    *Config

	cacheKey string // the description cache's key: sha256 and environment
	running  atomic.Pointer[instance]
	// staleDesc is set when the running process describes itself otherwise
	// than the description the routes were built from (a cached one): its
	// answers are then never cached.
	staleDesc atomic.Bool
	// degraded is set from a failure until the next good answer, and once
	// the plugin ended: its cached answers are not served meanwhile.
	degraded atomic.Bool
	// retiring counts the instances retired after a failure whose process
	// has not ended yet; stop waits for them.
	retiring sync.WaitGroup

	// selfChecked is the kernel-catalog self-check (selfcheck.go).
	selfChecked selfCheckState

	// device is the device code learnt from the binary (device.go).
	device deviceState

	// refusedHost is set when the plugin refused the host's hardware.
	refusedHost atomic.Pointer[string]

	// rejected says why the last reload refused the binary now at path;
	// this plugin, the previous binary, keeps serving. Nil when none was.
	rejected atomic.Pointer[string]

	// unsupported says why none of the plugin's names runs on the host's
	// hardware (Config.Host); such a plugin is never started.
	unsupported string

	mu          sync.Mutex
	starting    chan struct{} // closed when the start in progress ends
	closed      bool
	failures    int // consecutive failures
	starts      int
	retryAt     time.Time
	lastErr     error
	lastReason  Reason
	quarantined bool
}

// failure is an error of a plugin with the reason a fallback reports.
type failure struct {
	reason Reason
	err    error
}

func (f *failure) Error() string { return string(f.reason) + ": " + f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

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
	b, ok := res.raw.(batchClient)
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

// acquire returns the running instance, starting the process when none
// runs and the plugin may be started now.
func (p *plugin) acquire(ctx context.Context) (*instance, error) {
	if inst := p.running.Load(); inst != nil {
		return inst, nil
	}
	for {
		p.mu.Lock()
		if inst := p.running.Load(); inst != nil {
			p.mu.Unlock()
			return inst, nil
		}
		switch {
		case p.closed:
			p.mu.Unlock()
			return nil, &failure{ReasonClosed, fmt.Errorf("plugin %s: %w: registry closed", p.name, core.ErrUnavailable)}
		case p.selfCheckRefusal() != nil:
			err := p.selfCheckRefusal()
			p.mu.Unlock()
			return nil, &failure{ReasonStartFailed, fmt.Errorf("plugin %s: %w", p.name, err)}
		case p.quarantined:
			err := p.lastErr
			p.mu.Unlock()
			return nil, &failure{ReasonQuarantined, fmt.Errorf("plugin %s quarantined after %d failures, last: %w", p.name, p.cfg.QuarantineAfter, err)}
		case time.Now().Before(p.retryAt):
			err, at := p.lastErr, p.retryAt
			p.mu.Unlock()
			return nil, &failure{ReasonBackoff, fmt.Errorf("plugin %s restarts in %s after: %w", p.name, time.Until(at).Round(time.Millisecond), err)}
		}
		if wait := p.starting; wait != nil {
			p.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		wait := make(chan struct{})
		p.starting = wait
		p.mu.Unlock()

		sctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
		inst, err := spawn(sctx, p.cfg, p.path, p.sha256, p.logger)
		cancel()
		if err == nil {
			err = p.check(ctx, inst)
		}
		if err == nil {
			err = p.selfCheck(ctx, inst) // selfcheck.go: the kernel catalog
		}

		p.mu.Lock()
		p.starting = nil
		close(wait)
		if p.closed {
			if inst != nil {
				inst.kill()
			}
			p.mu.Unlock()
			return nil, &failure{ReasonClosed, fmt.Errorf("plugin %s: %w: registry closed", p.name, core.ErrUnavailable)}
		}
		if err != nil {
			if inst != nil {
				inst.kill()
			}
			if ctx.Err() != nil {
				p.mu.Unlock()
				return nil, ctx.Err()
			}
			if errors.Is(err, core.ErrRefused) {
				// The plugin refused this host's hardware (Configure): it
				// is not restarted, and its names fall back.
				why := err.Error()
				p.refusedHost.Store(&why)
				p.lastErr = err
				p.mu.Unlock()
				p.logger.Warn("plugin refused this host's hardware", "error", err)
				return nil, &failure{ReasonUnsupportedHardware, fmt.Errorf("plugin %s: %w", p.name, err)}
			}
			p.failLocked(ReasonStartFailed, err)
			p.mu.Unlock()
			return nil, &failure{ReasonStartFailed, fmt.Errorf("plugin %s (%s): start: %w", p.name, p.path, err)}
		}
		p.starts++
		p.running.Store(inst)
		p.mu.Unlock()
		p.logger.Debug("plugin started", "pid", inst.pid, "path", p.path)
		return inst, nil
	}
}

// check verifies that a freshly started process is the plugin that was
// discovered: same family and the same names.
func (p *plugin) check(ctx context.Context, inst *instance) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	d, err := inst.backend.Describe(ctx)
	if err != nil {
		return err
	}
	if d.Name != p.desc.Name {
		return fmt.Errorf("%w: plugin now calls itself %q, was %q", core.ErrProtocol, d.Name, p.desc.Name)
	}
	if !reflect.DeepEqual(d.Handlers, p.desc.Handlers) && !p.staleDesc.Load() {
		// The description came from the cache, and this process says
		// otherwise: trust the process for the cache's next reader, and
		// cache no answer of this run, whose routes follow the old one.
		p.staleDesc.Store(true)
		p.logger.Warn("plugin describes itself otherwise than its cached description; its answers are not cached in this run", "path", p.path)
		if err := (descCache{dir: p.cfg.CacheDir}).put(p.cacheKey, d, false); err != nil {
			p.logger.Debug("description cache not written", "error", err)
		}
	}
	return nil
}

// failLocked records a failure of the running instance or of a start: the
// process is killed, and the next start waits for the backoff. p.mu is
// held.
func (p *plugin) failLocked(reason Reason, err error) {
	p.failures++
	p.degraded.Store(true)
	p.lastErr, p.lastReason = err, reason
	backoff := p.cfg.RestartBackoff << min(p.failures-1, 16)
	if backoff > p.cfg.MaxRestartBackoff || backoff <= 0 {
		backoff = p.cfg.MaxRestartBackoff
	}
	p.retryAt = time.Now().Add(backoff)
	if p.cfg.QuarantineAfter > 0 && p.failures >= p.cfg.QuarantineAfter {
		p.quarantined = true
		p.logger.Error("plugin quarantined", "failures", p.failures, "error", err)
	} else {
		p.logger.Warn("plugin failed; restarting after backoff", "reason", string(reason), "backoff", backoff, "error", err)
	}
}

// fail retires inst after a failed call. Only the first caller to report
// a given instance counts it.
func (p *plugin) fail(inst *instance, reason Reason, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running.CompareAndSwap(inst, nil) {
		return
	}
	p.retiring.Add(1)
	go func() {
		defer p.retiring.Done()
		inst.retire()
	}()
	p.failLocked(reason, err)
}

// succeeded resets the failure count after a good answer.
func (p *plugin) succeeded() {
	if !p.degraded.Load() {
		return
	}
	p.mu.Lock()
	if !p.closed {
		p.degraded.Store(false)
	}
	if p.failures > 0 {
		p.logger.Info("plugin recovered", "after_failures", p.failures)
		p.failures = 0
	}
	p.mu.Unlock()
}

// stop kills the running instance, if any, and refuses further starts.
func (p *plugin) stop() { p.end(false) }

// retireAll refuses new starts and ends the running process once its
// calls in flight have finished.
func (p *plugin) retireAll() { p.end(true) }

// end refuses new starts and ends the running process: at once, or, when
// graceful, after the calls in flight on it. It waits for every process of
// the plugin to be gone.
func (p *plugin) end(graceful bool) {
	p.mu.Lock()
	p.closed = true
	p.degraded.Store(true)
	inst := p.running.Swap(nil)
	wait := p.starting
	p.mu.Unlock()
	finish := func(i *instance) {
		if graceful {
			i.retire()
		} else {
			i.kill()
		}
	}
	if wait != nil {
		<-wait
		if late := p.running.Swap(nil); late != nil {
			finish(late)
		}
	}
	if inst != nil {
		finish(inst)
	}
	p.retiring.Wait()
}

// ended reports that the plugin was stopped or retired: it starts no
// process again.
func (p *plugin) ended() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// info fills the run-time fields of a listing entry.
func (p *plugin) info(pi *PluginInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		if why := p.rejected.Load(); why != nil && pi.Reason == "" {
			pi.Reason = "a reload refused the binary now at " + p.path + " (" + *why + "); the binary read before keeps serving"
		}
	}()
	pi.Restarts = max(p.starts-1, 0)
	if p.lastErr != nil {
		pi.LastError = p.lastErr.Error()
	}
	switch inst := p.running.Load(); {
	case p.selfCheckRefusal() != nil:
		pi.Status, pi.Reason = StatusBroken, p.selfCheckRefusal().Error()
	case inst != nil:
		pi.Status, pi.PID = StatusRunning, inst.pid
	case p.quarantined:
		pi.Status, pi.Reason = StatusQuarantined, pi.LastError
	case p.lastErr != nil:
		pi.Status, pi.Reason = StatusFailed, pi.LastError
	default:
		pi.Status = StatusReady
	}
}

// classify names the reason of a failed call.
func classify(err error) Reason {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, core.ErrProtocol), errors.Is(err, core.ErrUnknownBackend):
		return ReasonProtocol
	}
	return ReasonCrashed
}

// unsupportedWhy says why the plugin does not run on this host: its
// declared hardware is absent, or it refused the host; "" when it runs.
func (p *plugin) unsupportedWhy() string {
	if p.unsupported != "" {
		return p.unsupported
	}
	if why := p.refusedHost.Load(); why != nil {
		return *why
	}
	return ""
}

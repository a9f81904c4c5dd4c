package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
	"github.com/hashicorp/go-hclog"
)

// binary is the binary layer of a run (Run): the plugin binary and the one
// process that serves the whole suite, around the backend layer, which
// asks the process's connection. Its checks are what only a plugin binary
// can do wrong.
type binary struct {
	s      *suite
	proc   *wire.Process // the plugin process, once the handshake is done
	stdout *tail         // what reached stdout after the handshake
	stderr *tail         // the plugin's own stderr
	log    *tail         // go-plugin's log of the process
}

// checks are the binary layer's checks, in the order they run: before
// the backend layer (run by hand, handshake) and after it (the protocol
// version, which reads the description and is listed before it, stdout,
// process).
func (b *binary) checks() (before, after []check) {
	return []check{
			{name: CheckRunByHand, run: b.runByHand},
			{name: CheckHandshake, asks: true, run: b.handshake},
		}, []check{
			{name: CheckProtocolVersion, listedBefore: CheckDescription, run: b.protocolVersion},
			{name: CheckStdout, run: b.stdoutCheck},
			{name: CheckProcess, run: b.process},
		}
}

// run is the binary layer around the backend layer: run by hand and the
// handshake first, then the backend layer over the connection, then what
// the process did during the suite.
func (b *binary) run(ctx context.Context) {
	s := b.s
	before, after := b.checks()
	for _, ch := range before {
		if !s.run(ctx, ch) {
			if ch.name == CheckHandshake {
				s.skipRest(CheckNames(), CheckHandshake, "the handshake failed")
				return
			}
		}
	}
	usable := s.runBackend(ctx)
	for _, ch := range after {
		if !usable && ch.listedBefore == "" {
			s.skipRest(CheckNames(), CheckDescription, "no usable description")
			return
		}
		s.run(ctx, ch)
	}
}

// close kills the process.
func (b *binary) close() {
	if b.proc != nil {
		b.proc.Kill()
	}
}

// exited reports whether the process has exited, after err broke a call:
// a connection that broke gives the process a moment to be reaped first.
func (b *binary) exited(err error) bool {
	if b.proc == nil {
		return false
	}
	if errors.Is(err, core.ErrUnavailable) || errors.Is(err, context.Canceled) {
		for i := 0; i < 30 && !b.proc.Exited(); i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return b.proc.Exited()
}

// environ is the caller's environment without the magic cookie, plus
// opts.Env.
func (b *binary) environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, wire.MagicCookieKey+"=") {
			env = append(env, kv)
		}
	}
	return append(env, b.s.opts.Env...)
}

// runByHand starts the binary without the cookie, as a person would. The
// process runs in a group of its own, which is killed, whatever is left of
// it, once the process exits or StartTimeout passes; what the group's
// other processes keep of its pipes is waited for a moment at most.
func (b *binary) runByHand(ctx context.Context, c *Check) {
	s := b.s
	ctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.opts.Binary)
	cmd.Env = b.environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = runByHandPipeWait
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what it forked and left running
	}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		c.problem("did not exit within %s (it must print what it is and exit)", s.opts.StartTimeout)
	case errors.Is(err, exec.ErrWaitDelay):
		c.problem("exited, but a process it started kept its stdout or stderr open (it must exit and leave nothing running)")
	case err == nil:
		c.problem("exited with status 0; it must exit non-zero when the host did not start it")
	case !errors.As(err, &ee):
		c.problem("could not run: %v", err)
	}
	if stdout.Len() > 0 {
		c.problem("wrote %d bytes to stdout (only go-plugin's handshake line may ever go there): %q", stdout.Len(), firstLine(stdout.String()))
	}
	if c.Status == Fail {
		c.Detail = "the binary misbehaves when run by hand"
		return
	}
	c.Detail = fmt.Sprintf("exit status %d, nothing on stdout", ee.ExitCode())
	if line := firstLine(stderr.String()); line != "" {
		c.Detail += "; stderr: " + line
	}
}

// handshake starts the plugin with the host's launcher.
func (b *binary) handshake(ctx context.Context, c *Check) {
	s := b.s
	b.stderr, b.log = newTail(), newTail()
	proc, err := wire.Launch(ctx, wire.LaunchConfig{
		Path: s.opts.Binary,
		Env:  append(b.environ(), "ATTNPLUG_PLUGIN_LOG_LEVEL=warn", wire.EnvCheckRequests+"=1"),
		Logger: hclog.New(&hclog.LoggerOptions{
			Name: "plugin", Level: hclog.Debug, Output: b.log,
		}),
		StartTimeout: s.opts.StartTimeout,
		Stdout:       b.stdout,
		Stderr:       b.stderr,
	})
	switch {
	case err != nil && ctx.Err() != nil:
		c.problem("interrupted: %v", ctx.Err())
		return
	case err != nil:
		c.Detail = handshakeError(err)
		c.Status = Fail
		if text := oneLine(b.stderr.String()); text != "" {
			c.problem("plugin stderr: %s", text)
		}
		return
	}
	b.proc = proc
	s.connect(proc.Client())
	s.report.PID = proc.PID()
	v := proc.ProtocolVersion()
	s.report.ProtocolVersion = v
	c.Detail = fmt.Sprintf("go-plugin handshake over gRPC with mutual TLS; protocol version %d negotiated (host speaks %s)", v, hostVersions())
}

// runByHandPipeWait bounds how long the run by hand waits for its pipes
// once the process exited or was killed: a process it started that left
// its group may hold them.
const runByHandPipeWait = time.Second

var pluginVersionRE = regexp.MustCompile(`Plugin version: (\d+)`)

// handshakeError explains a failed start, naming both protocol versions
// when they do not match.
func handshakeError(err error) string {
	msg := err.Error()
	if m := pluginVersionRE.FindStringSubmatch(msg); m != nil && strings.Contains(msg, "incompatible API version") {
		return fmt.Sprintf("protocol version mismatch: the plugin speaks protocol version %s, this host speaks %s (go-plugin: %s)", m[1], hostVersions(), firstLine(msg))
	}
	return "go-plugin could not start the plugin: " + oneLine(msg)
}

// oneLine joins the non-empty lines of s with spaces, cut to 300 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// hostVersions lists the protocol versions this host speaks.
func hostVersions() string {
	var vs []int
	for v := range wire.VersionedPlugins(nil) {
		vs = append(vs, v)
	}
	sort.Ints(vs)
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ", ")
}

func (b *binary) protocolVersion(_ context.Context, c *Check) {
	s := b.s
	v := b.proc.ProtocolVersion()
	if _, ok := wire.VersionedPlugins(nil)[v]; !ok {
		c.problem("negotiated protocol version %d, which this host does not speak (%s)", v, hostVersions())
	}
	if s.desc == nil {
		c.Status, c.Detail = Skip, "not run: no description"
		return
	}
	if s.desc.ProtocolVersion != v {
		c.problem("the description says protocol version %d, but version %d was negotiated", s.desc.ProtocolVersion, v)
	}
	if c.Status == Fail {
		c.Detail = "protocol versions disagree"
		return
	}
	c.Detail = fmt.Sprintf("handshake and description agree on protocol version %d", v)
}

// stdoutCheck fails when the plugin wrote to stdout after the handshake:
// go-plugin owns stdout.
func (b *binary) stdoutCheck(_ context.Context, c *Check) {
	if b.proc == nil {
		c.Status, c.Detail = Skip, "not run: no process"
		return
	}
	if n := b.stdout.Total(); n > 0 {
		c.problem("wrote %d bytes to stdout after the handshake: %q; go-plugin owns stdout (log to stderr, through the logger wire.Main gives)", n, firstLine(b.stdout.String()))
		c.Detail = "the plugin writes to stdout"
		return
	}
	c.Detail = "nothing written to stdout after the handshake"
}

// process checks that the process that shook hands served the suite.
func (b *binary) process(_ context.Context, c *Check) {
	switch {
	case b.proc == nil:
		c.Status, c.Detail = Skip, "not run: no process"
	case b.proc.Exited():
		c.Status, c.Detail = Fail, "the plugin process exited during the suite"+b.exitNote()
	case b.s.dead != nil:
		c.Status, c.Detail = Fail, b.s.dead.Error()
	default:
		c.Detail = fmt.Sprintf("pid %d served the whole suite without a restart", b.proc.PID())
	}
}

var exitRE = regexp.MustCompile(`plugin process exited:.*?error="?([^"\n]+)`)

// exitNote says how the process ended, from go-plugin's log, and the last
// line it wrote to stderr.
func (b *binary) exitNote() string {
	var note string
	if m := exitRE.FindStringSubmatch(b.log.String()); m != nil {
		note = " (" + m[1] + ")"
	}
	if line := b.stderr.lastLine(); line != "" {
		note += "; last stderr line: " + line
	}
	return note
}

// tail keeps the last bytes written to it, and counts them all.
type tail struct {
	mu    sync.Mutex
	buf   []byte
	total int64
}

const tailMax = 16 << 10

func newTail() *tail { return &tail{} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += int64(len(p))
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailMax {
		t.buf = t.buf[len(t.buf)-tailMax:]
	}
	return len(p), nil
}

// Total is how many bytes were written.
func (t *tail) Total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// lastLine is the last non-empty line written.
func (t *tail) lastLine() string {
	lines := strings.Split(strings.TrimSpace(t.String()), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// plural is "1 name", "2 names".

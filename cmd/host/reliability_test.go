package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/attnplug/attnplug/internal/reference"
	"github.com/attnplug/attnplug/internal/testbin"
	"github.com/attnplug/attnplug/registry"
)

// The tests of this file show what docs/reliability.md claims, with the
// real host and plugin binaries.

var (
	faultOnce sync.Once
	faultBin  string
	faultErr  error
)

// faultPlugin returns the fault-injection plugin binary, built once beside
// the package's other test binaries.
func faultPlugin(t *testing.T) string {
	t.Helper()
	faultOnce.Do(func() {
		faultBin, faultErr = testbin.BuildFault(filepath.Join(filepath.Dir(bins.Dir), "fault"))
	})
	if faultErr != nil {
		t.Fatal(faultErr)
	}
	return faultBin
}

// addFault copies the fault plugin into tree's plugin directory.
func addFault(t *testing.T, tree *testbin.Bins) string {
	t.Helper()
	data, err := os.ReadFile(faultPlugin(t))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(tree.PluginDir, "attnplug-backend-fault")
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// faultScript adds a plugin named family that runs the fault plugin with
// spec, so that one plugin directory can hold several faults.
func faultScript(t *testing.T, tree *testbin.Bins, family, spec string) {
	t.Helper()
	if err := testbin.FaultScript(tree.PluginDir, faultPlugin(t), family, spec); err != nil {
		t.Fatal(err)
	}
}

// hostCmd is a host process whose stdin and stdout the test drives.
type hostCmd struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *syncBuf
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// await waits until the log holds more than n copies of line, or ctx
// ends, and reports whether it does. The log comes through a pipe: a
// line the process wrote before an event the test saw may land after it.
func (s *syncBuf) await(ctx context.Context, line string, n int) bool {
	for strings.Count(s.String(), line) <= n {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

func startHost(t *testing.T, tree *testbin.Bins, env []string, args ...string) *hostCmd {
	t.Helper()
	cmd := exec.CommandContext(testContext(t), tree.Host, args...)
	cmd.Env = append(os.Environ(), "ATTNPLUG_CACHE_DIR="+warmCacheDir(t), "ATTNPLUG_PLUGIN_DIR=")
	cmd.Env = append(cmd.Env, env...)
	h := &hostCmd{cmd: cmd, stderr: &syncBuf{}}
	var err error
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	h.stdout = bufio.NewReaderSize(out, 1<<20)
	cmd.Stderr = h.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return h
}

func (h *hostCmd) wait() int {
	err := h.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// pluginPIDs are the live processes under tree.Dir but the host.
func pluginPIDs(tree *testbin.Bins, host int) []int {
	return slices.DeleteFunc(testbin.ProcessesUnder(tree.Dir), func(pid int) bool { return pid == host })
}

// TestReliabilityKillPluginsMidStream SIGKILLs every plugin process five
// times during a 30 000-line dispatch stream: every line still gets its
// plugin's answer, in order, with no fallback and the same method as a run
// that nobody disturbed (a crashed call is retried on the restarted
// process, new keys wait for the restart, cached answers stay valid).
func TestReliabilityKillPluginsMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("long: streams 30 000 lines twice, SIGKILLing every plugin five times (make test runs it)")
	}
	const n = 30_000
	rng := rand.New(rand.NewPCG(3, 5))
	lines := make([][]byte, n)
	for i := range lines {
		lines[i] = reference.Generate(rng)
	}
	want := cleanAnswers(t, lines)
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := startHost(t, tree, nil, "dispatch", "--platform", "cuda")
	go h.feed(lines)
	kills := map[int]bool{3_000: true, 9_000: true, 15_000: true, 21_000: true, 27_000: true}
	killed, fallbacks, wrong := 0, 0, 0
	sc := bufio.NewScanner(h.stdout)
	sc.Buffer(nil, 1<<20)
	got := 0
	for sc.Scan() {
		if kills[got] {
			for _, pid := range pluginPIDs(tree, h.cmd.Process.Pid) {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed++
				}
			}
		}
		var a answer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("answer %d: %v: %s", got+1, err, sc.Text())
		}
		if a.Fallback != "" {
			if fallbacks++; fallbacks <= 3 {
				t.Errorf("answer %d: fallback %q", got+1, a.Fallback)
			}
		}
		if a != want[got] {
			if wrong++; wrong <= 3 {
				t.Errorf("answer %d: %+v, want %+v as undisturbed", got+1, a, want[got])
			}
		}
		got++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if code := h.wait(); code != 0 {
		t.Errorf("exit status %d; stderr:\n%s", code, h.stderr)
	}
	if got != n {
		t.Fatalf("%d answers for %d lines", got, n)
	}
	if killed == 0 {
		t.Fatal("no plugin process was killed")
	}
	if fallbacks != 0 || wrong != 0 {
		t.Errorf("%d fallbacks and %d answers unlike the undisturbed run's, want 0 and 0", fallbacks, wrong)
	}
	t.Logf("%d answers, %d plugin processes killed", got, killed)
}

// TestOrphansNoneOneSecondAfterHostKill9 SIGKILLs the host while every
// plugin runs, one of them hung in a call: none survives a second.
func TestOrphansNoneOneSecondAfterHostKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("long: waits a second after SIGKILL for orphans (make test runs it)")
	}
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addFault(t, tree)
	h := startHost(t, tree, []string{"ATTNPLUG_FAULT=hang_after=1"}, "dispatch", "--timeout", "1m")
	var in strings.Builder
	for name := range served {
		in.WriteString(`{"backend":"` + name + `","forward_mode":"DECODE"}` + "\n")
	}
	if _, err := io.WriteString(h.stdin, in.String()); err != nil {
		t.Fatal(err)
	}
	for range served {
		if _, err := h.stdout.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	// The fault plugin never answers this one.
	io.WriteString(h.stdin, `{"backend":"fault","forward_mode":"DECODE"}`+"\n")
	ctx := testContext(t)
	for len(pluginPIDs(tree, h.cmd.Process.Pid)) != len(tree.Plugins)+1 {
		select {
		case <-ctx.Done():
			t.Fatalf("plugins running: %v, want %d", pluginPIDs(tree, h.cmd.Process.Pid), len(tree.Plugins)+1)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The bound: no plugin process outlives the host's SIGKILL by
	// more than a second.
	gone, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	h.wait()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for left := testbin.ProcessesUnder(tree.Dir); len(left) > 0; left = testbin.ProcessesUnder(tree.Dir) {
		select {
		case <-gone.Done():
			t.Fatalf("plugin processes alive 1s after the host was killed: %v", left)
		case <-tick.C:
		}
	}
}

// vmKB reads a field such as VmHWM of /proc/<pid>/status, in kB.
func vmKB(t *testing.T, pid int, field string) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestHostileInputGetsErrorsInBoundedMemory sends lines meant to break a
// decoder: each gets an error naming the field or the problem, the good
// line after it is answered, and the host's memory stays bounded.
func TestHostileInputGetsErrorsInBoundedMemory(t *testing.T) {
	const good = `{"backend":"fa3","forward_mode":"DECODE"}`
	head := `{"backend":"fa3","forward_mode":"EXTEND",`
	million := head + `"seq_lens":[` + strings.Repeat("1,", 999_999) + `1]}`
	cases := []struct {
		name string
		line string // "" for the 100 MB line, written in pieces
		want string
	}{
		{"100 MB line", "", "line too long: longer than the limit of 4194304 bytes"},
		{"million seq_lens", million, "seq_lens: has more than 65536 entries"},
		{"deep nesting", strings.Repeat("[", 100_000), "request: invalid JSON at byte 1"},
		{"deep nesting in a field", head + `"seq_lens":` + strings.Repeat("[", 100_000), "seq_lens[0]: want an integer, got an array"},
		{"deep objects", head + `"layer":` + strings.Repeat(`{"a":`, 100_000), `layer."a": unknown field`},
		{"backend number", `{"backend":7,"forward_mode":"DECODE"}`, "backend: want a string, got a number"},
		{"seq_lens string", head + `"seq_lens":"long"}`, "seq_lens: want an array of integers, got a string"},
		{"bool string", `{"backend":"fa3","forward_mode":"DECODE","layer":{"use_dsa":"yes"}}`, "layer.use_dsa: want true or false, got a string"},
		{"float", head + `"seq_lens":[1.5]}`, "seq_lens[0]: 1.5 is not an integer"},
		{"NaN", head + `"max_chunk_capacity":NaN}`, "max_chunk_capacity: want an integer"},
		{"Infinity", head + `"seq_lens":[Infinity]}`, "seq_lens[0]: want an integer"},
		{"-Infinity", head + `"seq_lens":[-Infinity]}`, `seq_lens[0]: want an integer, got "-Infinity"`},
		{"1e400", head + `"max_chunk_capacity":1e400}`, "max_chunk_capacity: 1e400 is out of the int64 range"},
		{"2^63", head + `"seq_lens":[9223372036854775808]}`, "seq_lens[0]: 9223372036854775808 is out of the int64 range"},
		{"2^64", head + `"seq_lens":[18446744073709551616]}`, "seq_lens[0]: 18446744073709551616 is out of the int64 range"},
		{"below -2^63", head + `"max_chunk_capacity":-9223372036854775809}`, "max_chunk_capacity: -9223372036854775809 is out of the int64 range"},
		{"past 2^40", head + `"seq_lens":[1099511627777]}`, "seq_lens[0]: length 1099511627777 is past the limit"},
		{"long backend", `{"backend":"` + strings.Repeat("x", 300) + `","forward_mode":"DECODE"}`, "backend: name of 300 bytes is longer than 256"},
		{"invalid UTF-8", "{\"backend\":\"fa\xff3\",\"forward_mode\":\"DECODE\"}", "backend: invalid UTF-8 at byte 15"},
	}
	tree, err := bins.CopyTree(t.TempDir(), "flashinfer", "aiter", "ascend", "dsa", "intel_xpu")
	if err != nil {
		t.Fatal(err)
	}
	h := startHost(t, tree, nil, "dispatch")
	pid := h.cmd.Process.Pid
	go func() {
		w := bufio.NewWriterSize(h.stdin, 1<<20)
		for _, c := range cases {
			if c.line == "" {
				piece := []byte(head + `"seq_lens":[` + strings.Repeat("1,", 1<<19))
				for written := 0; written < 100<<20; written += len(piece) {
					w.Write(piece)
				}
				w.WriteString("1]}")
			} else {
				w.WriteString(c.line)
			}
			w.WriteString("\n" + good + "\n")
		}
		w.Flush()
		// stdin stays open until the memory is read.
	}()
	peakRSS := 0
	for i, c := range cases {
		for k, want := range []string{c.want, "MLA"} {
			line, err := h.stdout.ReadString('\n')
			if err != nil {
				t.Fatalf("%s: %v; stderr:\n%s", c.name, err, h.stderr)
			}
			var a answer
			if err := json.Unmarshal([]byte(line), &a); err != nil {
				t.Fatalf("%s: answer is not JSON: %v", c.name, err)
			}
			if k == 0 {
				prefix := fmt.Sprintf("line %d: ", 2*i+1)
				if !strings.HasPrefix(a.Error, prefix) || !strings.Contains(a.Error, want) {
					t.Errorf("%s: got %s, want an error %q... naming %q", c.name, strings.TrimSpace(line), prefix, want)
				}
			} else if a.Method != want || a.Plugin != "fa3" {
				t.Errorf("good line after %s: %s", c.name, line)
			}
		}
		peakRSS = max(peakRSS, vmKB(t, pid, "VmRSS"))
	}
	hwm := vmKB(t, pid, "VmHWM")
	h.stdin.Close()
	if code := h.wait(); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	t.Logf("host peak RSS (VmHWM) %d MiB", hwm/1024)
	if hwm > 200<<10 {
		t.Errorf("host peak RSS %d MiB, want < 200 MiB", hwm/1024)
	}
}

// TestReliabilityBadHandshakePlugins puts plugins that fail the handshake
// in the plugin directory: each is listed broken with the reason, and the
// other plugins still answer.
func TestReliabilityBadHandshakePlugins(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir(), "flashinfer", "aiter", "ascend", "dsa", "intel_xpu")
	if err != nil {
		t.Fatal(err)
	}
	faultScript(t, tree, "cookie", "bad_cookie")
	faultScript(t, tree, "proto", "protocol=2")
	faultScript(t, tree, "noise", "stdout_noise")
	faultScript(t, tree, "crash", "crash_at_start")
	res := host(t, tree, "", "plugins", "--json")
	if res.code != 0 {
		t.Fatalf("exit status %d: %s", res.code, res.stderr)
	}
	var list []struct{ Name, Status, Reason string }
	if err := json.Unmarshal([]byte(res.stdout), &list); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, p := range list {
		if p.Status == "broken" {
			reasons[p.Name] = p.Reason
		}
	}
	for family, wants := range map[string][]string{
		"cookie": {"no go-plugin handshake", "magic cookie", "This binary is a plugin"},
		"proto":  {"Plugin version: 2", "Client versions: [1]"},
		"noise":  {"no go-plugin handshake", `"this line is not a go-plugin handshake"`, "stdout"},
		"crash":  {"no go-plugin handshake", "fault: crashing at start, as asked"},
	} {
		for _, want := range wants {
			if !strings.Contains(reasons[family], want) {
				t.Errorf("%s: reason %q lacks %q", family, reasons[family], want)
			}
		}
		if strings.Contains(reasons[family], "\n") {
			t.Errorf("%s: reason runs over several lines: %q", family, reasons[family])
		}
	}
	res = host(t, tree, `{"backend":"fa3","forward_mode":"DECODE"}`+"\n", "dispatch")
	if got := parseAnswers(t, res.stdout); res.code != 0 || len(got) != 1 || got[0].Plugin != "fa3" {
		t.Errorf("dispatch beside broken plugins: exit %d, %s", res.code, res.stdout)
	}
}

// TestInsecurePluginDir: a plugin directory or binary that other users can
// write is refused with the reason, unless --insecure-plugin-dir.
func TestInsecurePluginDir(t *testing.T) {
	const req = `{"backend":"fa3","forward_mode":"DECODE"}` + "\n"
	for _, tc := range []struct {
		name  string
		setup func(tree *testbin.Bins) error
		want  string
	}{
		{"world-writable dir", func(tree *testbin.Bins) error { return os.Chmod(tree.PluginDir, 0o777) }, "is world-writable (mode -rwxrwxrwx)"},
		{"world-writable binary", func(tree *testbin.Bins) error { return os.Chmod(tree.Plugin("fa3"), 0o777) }, "plugin binary " + "%s" + " is world-writable"},
		{"group-writable dir of another user", func(tree *testbin.Bins) error {
			if err := os.Chmod(tree.PluginDir, 0o775); err != nil {
				return err
			}
			return os.Chown(tree.PluginDir, os.Getuid()+4242, -1)
		}, "is group-writable and owned by uid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := bins.CopyTree(t.TempDir(), "flashinfer", "aiter", "ascend", "dsa", "intel_xpu")
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.setup(tree); err != nil {
				t.Skipf("cannot set up: %v", err)
			}
			want := tc.want
			if strings.Contains(want, "%s") {
				want = fmt.Sprintf(want, tree.Plugin("fa3"))
			}
			res := host(t, tree, "", "plugins")
			if !strings.Contains(res.stdout, want) || !strings.Contains(res.stdout, "--insecure-plugin-dir") {
				t.Errorf("plugins lacks %q and the flag:\n%s", want, res.stdout)
			}
			res = host(t, tree, req, "dispatch")
			// A refused binary named for fa3 is fa3's broken plugin; a
			// refused directory leaves fa3 missing, saying why.
			reason := map[bool]string{true: "plugin_broken", false: "plugin_missing"}[strings.Contains(tc.name, "binary")]
			if got := parseAnswers(t, res.stdout); len(got) != 1 || !strings.HasPrefix(got[0].Fallback, reason) {
				t.Errorf("fa3 from a refused plugin dir: %s", res.stdout)
			}
			res = host(t, tree, req, "dispatch", "--insecure-plugin-dir")
			if got := parseAnswers(t, res.stdout); len(got) != 1 || got[0].Plugin != "fa3" || got[0].Fallback != "" {
				t.Errorf("fa3 with --insecure-plugin-dir: %s %s", res.stdout, res.stderr)
			}
		})
	}
	// Group-writable and owned by the caller is fine.
	tree, err := bins.CopyTree(t.TempDir(), "flashinfer", "aiter", "ascend", "dsa", "intel_xpu")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tree.PluginDir, 0o775); err != nil {
		t.Fatal(err)
	}
	res := host(t, tree, req, "dispatch")
	if got := parseAnswers(t, res.stdout); len(got) != 1 || got[0].Plugin != "fa3" {
		t.Errorf("group-writable dir of the caller: %s %s", res.stdout, res.stderr)
	}
}

// TestLockCommandPinsAndRefusesTampering runs attnplug lock, then tampers
// with a pinned binary and adds an unpinned one.
func TestLockCommandPinsAndRefusesTampering(t *testing.T) {
	if testing.Short() {
		t.Skip("long: pins, tampers with and re-reads every plugin binary (make test runs it)")
	}
	tree, err := bins.CopyTree(t.TempDir(), "flashinfer", "ascend", "dsa", "intel_xpu")
	if err != nil {
		t.Fatal(err)
	}
	fault := addFault(t, tree)
	res := host(t, tree, "", "lock")
	lockPath := filepath.Join(tree.PluginDir, "attnplug.lock")
	if res.code != 0 || !strings.Contains(res.stdout, "pinned attnplug-backend-fa3") || !strings.Contains(res.stdout, "wrote "+lockPath+": 3 plugins pinned") {
		t.Fatalf("lock: exit %d:\n%s%s", res.code, res.stdout, res.stderr)
	}
	var lock struct {
		Format  int
		Plugins []struct{ File, SHA256, Version string }
	}
	data, err := os.ReadFile(lockPath)
	if err != nil || json.Unmarshal(data, &lock) != nil || lock.Format != 1 || len(lock.Plugins) != 3 {
		t.Fatalf("lock file: %v:\n%s", err, data)
	}
	res = host(t, tree, "", "plugins")
	for _, family := range []string{"fa3", "aiter", "fault"} {
		if !regexpLine(res.stdout, family, "ready", "pinned") {
			t.Errorf("plugins: %s not ready and pinned:\n%s", family, res.stdout)
		}
	}

	f, err := os.OpenFile(fault, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0})
	f.Close()
	pinned := lock.Plugins[2].SHA256
	actual, err := registry.FileSHA256(fault)
	if err != nil {
		t.Fatal(err)
	}
	data, err = os.ReadFile(bins.Plugin("dsa"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tree.Plugin("dsa"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(tree.Plugin("aiter")); err != nil {
		t.Fatal(err)
	}

	res = host(t, tree, "", "plugins")
	if !regexpLine(res.stdout, "fault", "broken", "mismatch") || !regexpLine(res.stdout, "dsa", "broken", "not pinned") || !regexpLine(res.stdout, "aiter", "broken", "missing") {
		t.Errorf("plugins after tampering:\n%s", res.stdout)
	}
	for _, want := range []string{"refused by the lock file", fault, pinned, actual, tree.Plugin("dsa") + " is not pinned in " + lockPath} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("plugins lacks %q:\n%s", want, res.stdout)
		}
	}

	in := `{"backend":"fault","forward_mode":"DECODE"}` + "\n" + `{"backend":"dsa","forward_mode":"DECODE"}` + "\n" + `{"backend":"fa3","forward_mode":"DECODE"}` + "\n"
	res = host(t, tree, in, "dispatch")
	got := parseAnswers(t, res.stdout)
	if res.code != 0 || len(got) != 3 {
		t.Fatalf("dispatch: exit %d:\n%s%s", res.code, res.stdout, res.stderr)
	}
	for i, name := range []string{"fault", "dsa"} {
		if got[i].Handler != "triton" || !strings.HasPrefix(got[i].Fallback, "plugin_broken") {
			t.Errorf("%s from a refused binary: %+v, want a plugin_broken fallback", name, got[i])
		}
	}
	if got[2].Plugin != "fa3" {
		t.Errorf("fa3 under the lock: %+v", got[2])
	}
	if !strings.Contains(res.stderr, actual) {
		t.Errorf("the refusal is not logged with the hash:\n%s", res.stderr)
	}
	res = host(t, tree, in, "dispatch", "--strict")
	if got := parseAnswers(t, res.stdout); res.code != 1 || len(got) != 3 || !strings.HasPrefix(got[0].Error, "line 1: refused: plugin_broken") {
		t.Errorf("strict: exit %d:\n%s", res.code, res.stdout)
	}

	// --lock names another file; one that does not exist is an error.
	res = host(t, tree, "", "plugins", "--lock", filepath.Join(t.TempDir(), "none.lock"))
	if res.code != 1 || !strings.Contains(res.stderr, "none.lock") {
		t.Errorf("absent --lock: exit %d: %s", res.code, res.stderr)
	}
	other := filepath.Join(t.TempDir(), "other.lock")
	if res := host(t, tree, "", "lock", "--lock", other); res.code != 0 {
		t.Fatalf("lock --lock: exit %d: %s", res.code, res.stderr)
	}
	res = host(t, tree, "", "plugins", "--lock", other)
	if !regexpLine(res.stdout, "fault", "ready", "pinned") || !regexpLine(res.stdout, "dsa", "ready", "pinned") {
		t.Errorf("plugins under the new lock:\n%s", res.stdout)
	}
}

// regexpLine reports whether a line of a plugins table starts with family
// and shows status and lock in their columns.
func regexpLine(table, family, status, lock string) bool {
	for _, line := range strings.Split(table, "\n") {
		fields := strings.Split(strings.Join(strings.Fields(line), " "), " ")
		if len(fields) < 4 || fields[0] != family || fields[2] != status {
			continue
		}
		rest := strings.Join(fields[3:], " ")
		if strings.HasPrefix(rest, lock+" ") {
			return true
		}
	}
	return false
}

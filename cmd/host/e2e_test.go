package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/attnplug/attnplug/internal/reference"
	"github.com/attnplug/attnplug/internal/testbin"
)

// served is which plugin family the tests expect to answer each name.
var served = testbin.Served()

type answer struct {
	Method   string `json:"method"`
	Handler  string `json:"handler"`
	Plugin   string `json:"plugin"`
	Fallback string `json:"fallback"`
	Error    string `json:"error"`
}

type result struct {
	stdout, stderr string
	code           int
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// host runs the built attnplug binary of tree with args and stdin.
func host(t *testing.T, tree *testbin.Bins, stdin string, args ...string) result {
	t.Helper()
	return hostEnv(t, tree, nil, stdin, args...)
}

// maxHostOutput is the most stdout a test keeps of one run: a command
// that writes more is cut off (and dies of the closed pipe), and the test
// says so instead of filling the memory.
const maxHostOutput = 64 << 20

// hostEnv is host with env added to the environment.
func hostEnv(t *testing.T, tree *testbin.Bins, env []string, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(testContext(t), tree.Host, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(append(os.Environ(), "ATTNPLUG_CACHE_DIR="+warmCacheDir(t), "ATTNPLUG_PLUGIN_DIR="), env...)
	var out capped
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if out.full {
		t.Fatalf("attnplug %s wrote more than %d bytes on stdout; stderr:\n%s", strings.Join(args, " "), maxHostOutput, errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

// capped is a buffer that refuses to grow past maxHostOutput.
type capped struct {
	bytes.Buffer
	full bool
}

func (c *capped) Write(p []byte) (int, error) {
	if c.Len()+len(p) > maxHostOutput {
		c.full = true
		return 0, errors.New("output past the test's limit")
	}
	return c.Buffer.Write(p)
}

func parseAnswers(t *testing.T, out string) []answer {
	t.Helper()
	var as []answer
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var a answer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("answer %d is not JSON: %v: %s", len(as)+1, err, sc.Text())
		}
		as = append(as, a)
	}
	return as
}

// TestDispatchMatchesGolden sends the golden file's requests through the
// real host and plugins and compares every answer with the one sglang's
// code gave: it runs on every make test, with or without the reference.
func TestDispatchMatchesGolden(t *testing.T) {
	g, err := reference.LoadGolden(".")
	if err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	want := make([]reference.Answer, len(g.Cases))
	for i, c := range g.Cases {
		in.Write(c.Request)
		in.WriteByte('\n')
		want[i] = reference.Answer{Method: c.Method, Handler: c.Handler}
	}
	checkDispatch(t, in.Bytes(), want, g.Header.DefaultPlatform)
}

// TestDispatchMatchesReference sends requests generated afresh through the
// real host and plugins and compares every answer with sglang's own code,
// run live; it skips, saying why, where python3 or the reference is
// missing.
func TestDispatchMatchesReference(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs sglang's code live; TestDispatchMatchesGolden compares with its recorded answers (make test runs it)")
	}
	o, err := reference.Find(".", t.TempDir())
	if errors.Is(err, reference.ErrNotAvailable) {
		t.Skipf("not compared with sglang's code run live (TestDispatchMatchesGolden compares with its answers): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	rng := rand.New(rand.NewPCG(7, 11))
	var in bytes.Buffer
	for i := 0; i < n; i++ {
		in.Write(reference.Generate(rng))
		in.WriteByte('\n')
	}
	want, err := o.Evaluate(testContext(t), in.Bytes(), "cuda")
	if err != nil {
		t.Fatal(err)
	}
	checkDispatch(t, in.Bytes(), want, "cuda")
}

// checkDispatch sends the request lines in through attnplug dispatch with
// the platform given and compares every answer with want, and the plugin
// with the one that serves the name.
func checkDispatch(t *testing.T, in []byte, want []reference.Answer, platform string) {
	t.Helper()
	res := host(t, bins, string(in), "dispatch", "--platform", platform)
	if res.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", res.code, res.stderr)
	}
	got := parseAnswers(t, res.stdout)
	if len(got) != len(want) {
		t.Fatalf("%d answers for %d requests", len(got), len(want))
	}
	bad := 0
	for i := range got {
		g, w := got[i], want[i]
		plugin := served[g.Handler]
		if g.Handler == "triton" {
			plugin = "core"
		}
		if g.Method != w.Method || g.Handler != w.Handler || g.Plugin != plugin || g.Fallback != "" || g.Error != "" {
			bad++
			if bad <= 10 {
				t.Errorf("line %d: got %+v, want %s by %s from plugin %s", i+1, g, w.Method, w.Handler, plugin)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d answers differ", bad, len(want))
	}
}

func TestDispatchRefusesBadLinesAndGoesOn(t *testing.T) {
	in := strings.Join([]string{
		`{"backend":"fa3","forward_mode":"DECODE"}`,
		`{"backend":"fa3","forward_mode":"PREFILL"}`,
		`not json`,
		` 	`,
		`{"backend":"fa3","forward_mode":"EXTEND","extend_prefix_lens":[5],"seq_lens":[4]}`,
		`{"backend":"fa3","forward_mode":"EXTEND","seq_lens":[-1]}`,
		`{"backend":"fa3","forward_mode":"EXTEND","extend_prefix_lens":[1,2],"seq_lens":[4]}`,
		`{"backend":"fa3","forward_mode":"EXTEND","seq_lens":[9223372036854775808]}`,
		`{"backend":"fa4","forward_mode":"DECODE"}`,
		`{"backend":"fa3","forward_mode":"EXTEND","max_chunk_capacity":-1}`,
		`{"backend":"fa3","forward_mode":"EXTEND","layer":{"chunked_prefix_cache_threshold":-5}}`,
	}, "\n") + "\n"
	// A byte order mark and blank lines (line 4, and after the last) are
	// skipped; the line numbers still count them.
	res := host(t, bins, "\xef\xbb\xbf"+in+"\n \n", "dispatch")
	if res.code != 1 {
		t.Errorf("exit status %d, want 1", res.code)
	}
	got := parseAnswers(t, res.stdout)
	want := []string{
		"MLA",
		`line 2: forward_mode: unknown mode "PREFILL" (want one of EXTEND, DECODE, MIXED, IDLE, TARGET_VERIFY, DRAFT_EXTEND_V2, PREBUILT, SPLIT_PREFILL, DLLM_EXTEND)`,
		"line 3: request: invalid JSON",
		"line 5: extend_prefix_lens[0]: prefix 5 is longer than seq_lens[0] = 4",
		"line 6: seq_lens[0]: negative length -1",
		"line 7: extend_prefix_lens: has 2 entries but seq_lens has 1",
		"line 8: seq_lens[0]: 9223372036854775808 is out of the int64 range",
		"MHA_CHUNKED_KV",
		"line 10: max_chunk_capacity: -1 is negative",
		"line 11: layer.chunked_prefix_cache_threshold: -5 is negative",
	}
	if len(got) != len(want) {
		t.Fatalf("%d answers, want %d:\n%s", len(got), len(want), res.stdout)
	}
	for i, w := range want {
		g := got[i].Method
		if got[i].Error != "" {
			g = got[i].Error
		}
		if !strings.HasPrefix(g, w) {
			t.Errorf("line %d: got %q, want it to start with %q", i+1, g, w)
		}
	}
}

func TestDispatchStreams(t *testing.T) {
	cmd := exec.CommandContext(testContext(t), bins.Host, "dispatch")
	cmd.Env = append(os.Environ(), "ATTNPLUG_CACHE_DIR="+warmCacheDir(t))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	for i, name := range []string{"fa3", "aiter", "triton"} {
		if _, err := io.WriteString(stdin, `{"backend":"`+name+`","forward_mode":"DECODE"}`+"\n"); err != nil {
			t.Fatal(err)
		}
		// The answer must come while stdin is still open.
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("answer %d: %v", i+1, err)
		}
		if !strings.Contains(line, `"method":"MLA"`) {
			t.Errorf("answer %d: %s", i+1, line)
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestDeletedPluginFallsBackOrIsRefusedUnderStrict(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir(), "fa3")
	if err != nil {
		t.Fatal(err)
	}
	in := `{"backend":"fa3","forward_mode":"EXTEND","extend_prefix_lens":[0],"seq_lens":[100],"max_chunk_capacity":1000}` + "\n" +
		`{"backend":"flashinfer","forward_mode":"EXTEND","extend_prefix_lens":[0],"seq_lens":[100],"max_chunk_capacity":1000}` + "\n"
	res := host(t, tree, in, "dispatch")
	if res.code != 0 {
		t.Fatalf("exit status %d: %s", res.code, res.stderr)
	}
	got := parseAnswers(t, res.stdout)
	if len(got) != 2 {
		t.Fatalf("answers: %s", res.stdout)
	}
	if got[0].Method != "MHA" || got[0].Handler != "triton" || got[0].Plugin != "core" || !strings.HasPrefix(got[0].Fallback, "plugin_missing") {
		t.Errorf("fa3 without its plugin: %+v", got[0])
	}
	if got[1].Method != "MHA_ONE_SHOT" || got[1].Plugin != "flashinfer" || got[1].Fallback != "" {
		t.Errorf("flashinfer: %+v", got[1])
	}
	if !strings.Contains(res.stderr, "[WARN]") || !strings.Contains(res.stderr, "plugin_missing") {
		t.Errorf("no warning on stderr:\n%s", res.stderr)
	}

	res = host(t, tree, in, "dispatch", "--strict")
	if res.code != 1 {
		t.Errorf("strict: exit status %d, want 1", res.code)
	}
	got = parseAnswers(t, res.stdout)
	if len(got) != 2 || !strings.HasPrefix(got[0].Error, "line 1: refused: plugin_missing") || got[1].Method != "MHA_ONE_SHOT" {
		t.Errorf("strict answers: %s", res.stdout)
	}
}

// TestNoPluginOutlivesTheHost ends the host by every path and checks that
// none of its plugin processes is left.
func TestNoPluginOutlivesTheHost(t *testing.T) {
	if testing.Short() {
		t.Skip("long: ends the host and its plugins by every path, waiting for each (make test runs it)")
	}
	var all strings.Builder
	for name := range served {
		all.WriteString(`{"backend":"` + name + `","forward_mode":"DECODE"}` + "\n")
	}
	for _, tc := range []struct {
		name   string
		signal syscall.Signal // 0: end of input
	}{
		{"end of input", 0},
		{"SIGINT", syscall.SIGINT},
		{"SIGTERM", syscall.SIGTERM},
		{"SIGKILL", syscall.SIGKILL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := bins.CopyTree(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.CommandContext(testContext(t), tree.Host, "dispatch")
			cmd.Env = append(os.Environ(), "ATTNPLUG_CACHE_DIR="+warmCacheDir(t))
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			io.WriteString(stdin, all.String())
			r := bufio.NewReader(stdout)
			for range served {
				if _, err := r.ReadString('\n'); err != nil {
					t.Fatal(err)
				}
			}
			if got := len(testbin.ProcessesUnder(tree.Dir)) - 1; got != len(tree.Plugins) {
				t.Fatalf("%d plugin processes while serving, want %d", got, len(tree.Plugins))
			}
			if tc.signal == 0 {
				stdin.Close()
			} else {
				cmd.Process.Signal(tc.signal)
			}
			cmd.Wait()
			ctx := testContext(t)
			for {
				left := testbin.ProcessesUnder(tree.Dir)
				if len(left) == 0 {
					return
				}
				select {
				case <-ctx.Done():
					t.Fatalf("processes left after the host ended: %v", left)
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	}
}

func TestPluginsCommandListsBrokenOnes(t *testing.T) {
	if testing.Short() {
		t.Skip("long: starts broken plugins and waits for each to fail (make test runs it)")
	}
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tree.PluginDir+"/attnplug-backend-broken", []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	res := host(t, tree, "", "plugins")
	if res.code != 0 {
		t.Fatalf("exit status %d: %s", res.code, res.stderr)
	}
	for _, want := range []string{"PLUGIN", "fa3", "fa3,fa4", "nsa(=dsa)", "broken", "reason:", "0.1.0"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("plugins output lacks %q:\n%s", want, res.stdout)
		}
	}
	res = host(t, tree, "", "plugins", "--json")
	var list []map[string]any
	if err := json.Unmarshal([]byte(res.stdout), &list); err != nil || len(list) != len(tree.Plugins)+1 {
		t.Errorf("plugins --json: %v, %d entries:\n%s", err, len(list), res.stdout)
	}
}

func TestDemo(t *testing.T) {
	res := host(t, bins, "", "demo")
	if res.code != 0 {
		t.Fatalf("exit status %d: %s", res.code, res.stderr)
	}
	for _, want := range []string{"BACKEND", "fresh prefill", "fa4", "MHA_CHUNKED_KV", "MHA_ONE_SHOT", "MLA_NPU", "torch_native", "core (triton rules)"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, res.stdout)
		}
	}
	if strings.Contains(res.stdout, "refused") {
		t.Errorf("demo refused answers without --strict:\n%s", res.stdout)
	}
	// --strict refuses the names nobody serves (FA3, torch_native): the
	// table says so, and, as dispatch, the exit status is 1.
	res = host(t, bins, "", "demo", "--strict")
	if res.code != 1 || !hasRow(res.stdout, "FA3", "refused") || !strings.Contains(res.stdout, "\nrefused:\n  FA3: refused: backend_unknown") {
		t.Errorf("demo --strict: exit %d, want 1 and the refused answers:\n%s\n%s", res.code, res.stdout, res.stderr)
	}
}

func TestUsageErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs the host once per usage error of every command (make test runs it)")
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Commands:"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"dispatch", "--no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"dispatch", "extra"}, 2, "unexpected argument"},
		{[]string{"dispatch", "--log-level", "loud"}, 2, "unknown level"},
		{[]string{"dispatch", "--platform", "tpu"}, 2, `unknown platform "tpu"`},
		{[]string{"help"}, 0, "dispatch"},
		{[]string{"dispatch", "-h"}, 0, "-strict"},
		{[]string{"detect", "--backend", "bogus"}, 2, `prefill backend "bogus" (from flag): unknown attention backend`},
		{[]string{"detect", "--attention", "foo"}, 2, `attention "foo": unknown attention kind`},
		{[]string{"detect", "--root", "/nonexistent"}, 2, "--root: stat /nonexistent: no such file or directory"},
		{[]string{"doctor", "--root", "/nonexistent"}, 2, "--root: stat /nonexistent: no such file or directory"},
		{[]string{"detect", "--tp-size", "0"}, 2, "0 is not a positive size"},
		{[]string{"serve", "--backend", "bogus"}, 2, "unknown attention backend"},
		{[]string{"serve", "--attention", "foo"}, 2, "unknown attention kind"},
		{[]string{"serve", "--listen", "tcp://127.0.0.1:99999"}, 2, "invalid port"},
		{[]string{"serve", "--listen", "unix://"}, 2, "names no socket path"},
		{[]string{"serve", "--metrics-listen", "bad:addr:x"}, 2, "too many colons"},
		{[]string{"serve", "--metrics-listen", "/tmp/m.sock"}, 2, "want host:port (a TCP address)"},
		{[]string{"serve", "extra"}, 2, "unexpected argument"},
		{[]string{"conform", "/nonexistent"}, 2, "conform: plugin binary: stat /nonexistent: no such file or directory"},
		{[]string{"conform", "/"}, 2, "conform: plugin binary / is not a regular file"},
		{[]string{"conform"}, 2, "want one plugin binary, got 0 arguments"},
		{[]string{"conform", "--probes", "99999999999", "/"}, 2, "conform: --probes: 99999999999 is out of range (want 0 to 4096)"},
		{[]string{"dispatch", "--connect", "nohost"}, 2, "missing port in address"},
		{[]string{"run", "--top-k", "-5"}, 2, "--top-k=-5 is negative"},
		{[]string{"run", "--max-kv-tokens", "0"}, 2, "--max-kv-tokens=0 must be positive"},
		{[]string{"bench", "--passes", "99999999999"}, 2, "--passes: 99999999999 is out of range (want 1 to 100000)"},
		{[]string{"bench", "--rpc-passes", "0"}, 2, "--rpc-passes: 0 is out of range (want 1 to 100000)"},
		{[]string{"bench", "--min-time", "-1s"}, 2, "--min-time: -1s is out of range (want 0 to 1h0m0s)"},
		{[]string{"bench", "--stream", "-5"}, 2, "--stream: -5 is out of range (want 0 to 1000000; 0 skips the stream)"},
		{[]string{"version", "extra"}, 2, "unexpected argument"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			res := host(t, bins, "", tc.args...)
			if res.code != tc.code || !strings.Contains(res.stdout+res.stderr, tc.want) {
				t.Errorf("exit %d, want %d; output lacks %q:\n%s%s", res.code, tc.code, tc.want, res.stdout, res.stderr)
			}
		})
	}
}

func TestPluginRunByHandSaysWhatItIs(t *testing.T) {
	cmd := exec.CommandContext(testContext(t), bins.Plugin("dsa"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("exit: %v, want status 1", err)
	}
	if out.Len() != 0 {
		t.Errorf("wrote to stdout: %q", out.String())
	}
	for _, want := range []string{`plugin "dsa"`, "dsa, nsa", "protocol version 1", "started by the attnplug host"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
}

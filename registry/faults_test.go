package registry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/testbin"
	"github.com/attnplug/attnplug/registry"
	"github.com/attnplug/attnplug/registry/backend"
)

// The tests of this file run the fault-injection plugin
// (internal/testplugins/fault) as a real process and check what the
// registry does when it crashes, hangs, sleeps or breaks the protocol.

// testPlugins are the test plugins (internal/testplugins) built so far,
// by name, beside the package's other test binaries.
var testPlugins struct {
	sync.Mutex
	bin map[string]string
}

// testPluginDir returns a fresh plugin directory holding only the test
// plugin name, built once.
func testPluginDir(t *testing.T, name string) string {
	t.Helper()
	testPlugins.Lock()
	bin, ok := testPlugins.bin[name]
	if !ok {
		var err error
		if bin, err = testbin.BuildTestPlugin(filepath.Join(filepath.Dir(bins.Dir), name), name); err != nil {
			testPlugins.Unlock()
			t.Fatal(err)
		}
		if testPlugins.bin == nil {
			testPlugins.bin = map[string]string{}
		}
		testPlugins.bin[name] = bin
	}
	testPlugins.Unlock()
	dir := t.TempDir()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "attnplug-backend-"+name), data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// faultDir returns a fresh plugin directory holding only the fault plugin.
func faultDir(t *testing.T) string { return testPluginDir(t, "fault") }

// openFault opens a registry over a directory holding the fault plugin.
// The plugin is described without faults; every process started after
// that misbehaves as spec says. Answers are not cached, so that every
// request is a call.
func openFault(t *testing.T, spec string, cfg registry.Config) (*registry.Registry, *syncBuffer, string) {
	t.Helper()
	dir := faultDir(t)
	t.Setenv("ATTNPLUG_FAULT", "")
	cfg.PluginDirs = []string{dir}
	cfg.NoAnswerCache = true
	r, logs := open(t, cfg)
	t.Setenv("ATTNPLUG_FAULT", spec)
	t.Cleanup(func() {
		r.Close()
		if left := testbin.ProcessesUnder(dir); len(left) > 0 {
			t.Errorf("fault plugin processes left after Close: %v", left)
		}
	})
	return r, logs, dir
}

// faultReq is a request for the fault plugin; i varies the lengths.
func faultReq(i int) *core.Request {
	r := core.NewRequest("fault", core.ModeDecode)
	r.Batch.ExtendPrefixLens = []int64{int64(i)}
	r.Batch.SeqLens = []int64{int64(i) + 1}
	return &r
}

// ask dispatches req and returns the reason it fell back (or, under
// strict, was refused); "" when the fault plugin answered. Every other
// outcome fails the test.
func ask(t *testing.T, ctx context.Context, r *registry.Registry, strict bool, req *core.Request) (registry.Reason, string) {
	t.Helper()
	a, err := r.Dispatch(ctx, req)
	if strict {
		if err != nil {
			if !errors.Is(err, core.ErrRefused) {
				t.Fatalf("strict: got %v, want an error wrapping ErrRefused", err)
			}
			msg := strings.TrimPrefix(err.Error(), core.ErrRefused.Error()+": ")
			reason, _, _ := strings.Cut(msg, ":")
			return registry.Reason(reason), err.Error()
		}
		if a.Fallback != "" {
			t.Fatalf("strict: fell back: %+v", a)
		}
	} else if err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	if a.Fallback == "" {
		if a.Plugin != "fault" || a.Handler != "fault" || a.Method != core.MLA {
			t.Fatalf("got %+v, want MLA from the fault plugin", a)
		}
		return "", ""
	}
	if a.Handler != core.TritonName || a.Plugin != core.PluginCore || a.Method != core.TritonDecide(req) {
		t.Fatalf("fallback %+v, want the triton rules' answer", a)
	}
	reason, _, _ := strings.Cut(a.Fallback, ":")
	return registry.Reason(reason), a.Fallback
}

// eachMode runs f once falling back and once under Strict.
func eachMode(t *testing.T, f func(t *testing.T, strict bool)) {
	for _, strict := range []bool{false, true} {
		name := "fallback"
		if strict {
			name = "strict"
		}
		t.Run(name, func(t *testing.T) { f(t, strict) })
	}
}

func faultInfo(t *testing.T, r *registry.Registry) registry.PluginInfo {
	t.Helper()
	for _, p := range r.Plugins() {
		if p.Name == "fault" {
			return p
		}
	}
	t.Fatal("fault plugin not listed")
	return registry.PluginInfo{}
}

// poll waits a little between the attempts of a polling loop; the loop's
// context bounds it.
func poll(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
		t.Fatalf("gave up waiting for %s: %v", what, ctx.Err())
	case <-time.After(2 * time.Millisecond):
	}
}

func pollContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestFaultCrashAtStartBacksOffThenQuarantines(t *testing.T) {
	eachMode(t, func(t *testing.T, strict bool) {
		const backoff = 20 * time.Millisecond
		r, logs, _ := openFault(t, "crash_at_start", registry.Config{
			Strict: strict, RestartBackoff: backoff, MaxRestartBackoff: time.Second, QuarantineAfter: 3,
		})
		ctx := pollContext(t, 20*time.Second)
		var starts []time.Time
		var last string
		for i := 0; ; i++ {
			reason, msg := ask(t, ctx, r, strict, faultReq(i))
			switch reason {
			case registry.ReasonStartFailed:
				starts = append(starts, time.Now())
				last = msg
			case registry.ReasonBackoff:
			case registry.ReasonQuarantined:
			default:
				t.Fatalf("request %d: reason %q (%s), want a start failure, a backoff or quarantine", i, reason, msg)
			}
			if reason == registry.ReasonQuarantined {
				break
			}
			poll(t, ctx, "quarantine")
		}
		if len(starts) != 3 {
			t.Fatalf("%d failed starts before quarantine, want QuarantineAfter = 3", len(starts))
		}
		for k := 1; k < len(starts); k++ {
			if gap, want := starts[k].Sub(starts[k-1]), backoff<<(k-1); gap < want {
				t.Errorf("restart %d came %s after the failure, want a backoff of at least %s", k, gap, want)
			}
		}
		if !strings.Contains(last, "crashing at start") {
			t.Errorf("start failure %q does not carry the plugin's stderr", last)
		}
		p := faultInfo(t, r)
		if p.Status != registry.StatusQuarantined || !strings.Contains(p.Reason, "no go-plugin handshake") {
			t.Errorf("listing %+v, want quarantined with the start error", p)
		}
		if !strings.Contains(logs.String(), "plugin quarantined") {
			t.Errorf("quarantine not logged:\n%s", logs)
		}
		// A quarantined plugin stays so: no more starts.
		for i := 0; i < 3; i++ {
			if reason, _ := ask(t, ctx, r, strict, faultReq(i)); reason != registry.ReasonQuarantined {
				t.Errorf("after quarantine: %q", reason)
			}
		}
	})
}

// TestFaultCrashMidStreamIsRetriedOnTheRestart: the request whose call
// crashed the plugin is sent once more, to the restarted process, and
// answered; a request that crashes every process it reaches (crash_after=1)
// falls back after its one retry, with plugin_crashed.
func TestFaultCrashMidStreamIsRetriedOnTheRestart(t *testing.T) {
	eachMode(t, func(t *testing.T, strict bool) {
		r, _, dir := openFault(t, "crash_after=3", registry.Config{Strict: strict, RestartBackoff: 10 * time.Millisecond})
		ctx := pollContext(t, 20*time.Second)
		for i := 1; i <= 2; i++ {
			if reason, msg := ask(t, ctx, r, strict, faultReq(i)); reason != "" {
				t.Fatalf("request %d before the crash: %s", i, msg)
			}
		}
		pid := faultInfo(t, r).PID
		for i := 3; i <= 4; i++ {
			if reason, msg := ask(t, ctx, r, strict, faultReq(i)); reason != "" {
				t.Fatalf("request %d (the crash, then after it): %s; want an answer of the restarted plugin", i, msg)
			}
		}
		p := faultInfo(t, r)
		if p.Restarts != 1 || p.PID == pid || p.PID == 0 || p.Status != registry.StatusRunning || p.LastError == "" {
			t.Errorf("listing after the restart %+v, want one restart, a new PID (was %d) and the last error", p, pid)
		}
		if n := len(testbin.ProcessesUnder(dir)); n != 1 {
			t.Errorf("%d fault processes, want 1", n)
		}
	})
	eachMode(t, func(t *testing.T, strict bool) {
		r, _, _ := openFault(t, "crash_after=1", registry.Config{Strict: strict, RestartBackoff: 10 * time.Millisecond, QuarantineAfter: -1})
		ctx := pollContext(t, 20*time.Second)
		if reason, msg := ask(t, ctx, r, strict, faultReq(1)); reason != registry.ReasonCrashed {
			t.Fatalf("a request that crashes every process: reason %q (%s), want %s", reason, msg, registry.ReasonCrashed)
		}
		if p := faultInfo(t, r); p.Restarts != 1 {
			t.Errorf("listing %+v, want one restart (the retry)", p)
		}
	})
}

func TestFaultHangTimesOutAndIsKilled(t *testing.T) {
	eachMode(t, func(t *testing.T, strict bool) {
		const deadline = 200 * time.Millisecond
		r, _, dir := openFault(t, "hang_after=2", registry.Config{Strict: strict, CallTimeout: deadline, RestartBackoff: 10 * time.Millisecond})
		ctx := pollContext(t, 20*time.Second)
		if reason, msg := ask(t, ctx, r, strict, faultReq(1)); reason != "" {
			t.Fatalf("first request: %s", msg)
		}
		pid := faultInfo(t, r).PID
		reason, msg := ask(t, ctx, r, strict, faultReq(2))
		if reason != registry.ReasonTimeout {
			t.Fatalf("hung call: reason %q (%s), want %s", reason, msg, registry.ReasonTimeout)
		}
		// The hung process is killed ...
		for slices.Contains(testbin.ProcessesUnder(dir), pid) {
			poll(t, ctx, "the hung plugin to be killed")
		}
		// ... and a new one answers.
		for i := 3; ; i++ {
			reason, msg := ask(t, ctx, r, strict, faultReq(i))
			if reason == "" {
				break
			}
			if reason != registry.ReasonBackoff {
				t.Fatalf("request %d after the timeout: %s", i, msg)
			}
			poll(t, ctx, "the restart")
		}
		if p := faultInfo(t, r); p.PID == pid || p.Restarts != 1 || p.LastError == "" {
			t.Errorf("listing after the restart %+v, want a new process and the timeout as last error", p)
		}
	})
}

func TestFaultSleepBelowTheDeadlineIsAnswered(t *testing.T) {
	eachMode(t, func(t *testing.T, strict bool) {
		r, _, _ := openFault(t, "sleep=100ms", registry.Config{Strict: strict, CallTimeout: 2 * time.Second})
		ctx := pollContext(t, 20*time.Second)
		for i := 0; i < 3; i++ {
			if reason, msg := ask(t, ctx, r, strict, faultReq(i)); reason != "" {
				t.Fatalf("request %d: %s", i, msg)
			}
		}
		if p := faultInfo(t, r); p.LastError != "" || p.Restarts != 0 {
			t.Errorf("a slow plugin was counted as failed: %+v", p)
		}
	})
}

func TestFaultProtocolErrors(t *testing.T) {
	for _, spec := range []string{"garbage", "undeclared"} {
		t.Run(spec, func(t *testing.T) {
			eachMode(t, func(t *testing.T, strict bool) {
				r, _, _ := openFault(t, spec, registry.Config{Strict: strict, RestartBackoff: time.Millisecond})
				ctx := pollContext(t, 20*time.Second)
				reason, msg := ask(t, ctx, r, strict, faultReq(1))
				if reason != registry.ReasonProtocol {
					t.Fatalf("reason %q (%s), want %s", reason, msg, registry.ReasonProtocol)
				}
				if spec == "undeclared" && !strings.Contains(msg, "MHA_NPU") {
					t.Errorf("fallback %q does not name the undeclared method", msg)
				}
				// A plugin that breaks the protocol is failed and restarted.
				if p := faultInfo(t, r); p.LastError == "" || p.Status == registry.StatusRunning {
					t.Errorf("listing %+v, want the plugin failed", p)
				}
			})
		})
	}
}

func TestFaultRefusedRequestDoesNotFailThePlugin(t *testing.T) {
	eachMode(t, func(t *testing.T, strict bool) {
		r, _, _ := openFault(t, "refuse", registry.Config{Strict: strict})
		ctx := pollContext(t, 20*time.Second)
		var pid int
		for i := 0; i < 4; i++ {
			reason, msg := ask(t, ctx, r, strict, faultReq(i))
			if reason != registry.ReasonRefused || !strings.Contains(msg, "refuses every request") {
				t.Fatalf("request %d: reason %q (%s), want %s with the plugin's message", i, reason, msg, registry.ReasonRefused)
			}
			p := faultInfo(t, r)
			if i == 0 {
				pid = p.PID
			}
			if p.Status != registry.StatusRunning || p.PID != pid || p.Restarts != 0 || p.LastError != "" {
				t.Fatalf("after refusal %d: %+v, want the same process running, not failed", i, p)
			}
		}
	})
}

func TestFaultCrashMidBatchFallsBackEveryRequest(t *testing.T) {
	eachMode(t, func(t *testing.T, strict bool) {
		r, _, _ := openFault(t, "crash_after=3", registry.Config{Strict: strict, RestartBackoff: 10 * time.Millisecond})
		ctx := pollContext(t, 20*time.Second)
		var reqs []core.Request
		for i := 0; i < 6; i++ {
			reqs = append(reqs, *faultReq(i))
		}
		reqs = append(reqs, core.NewRequest("triton", core.ModeExtend), core.NewRequest("FA3", core.ModeDecode))
		bad := *faultReq(99)
		bad.Batch.SeqLens = []int64{-1}
		reqs = append(reqs, bad)
		out := make([]registry.BatchAnswer, len(reqs))
		if err := r.DispatchBatch(ctx, slices.Clone(reqs), out); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 6; i++ {
			res := out[i]
			if strict {
				if !errors.Is(res.Err, core.ErrRefused) || !strings.Contains(res.Err.Error(), string(registry.ReasonCrashed)) {
					t.Errorf("request %d: %+v, want refused with %s", i, res, registry.ReasonCrashed)
				}
				continue
			}
			if res.Err != nil || !strings.HasPrefix(res.Answer.Fallback, string(registry.ReasonCrashed)) || res.Answer.Handler != core.TritonName {
				t.Errorf("request %d: %+v, want a %s fallback", i, res, registry.ReasonCrashed)
			}
		}
		if res := out[6]; res.Err != nil || res.Answer.Handler != core.TritonName || res.Answer.Fallback != "" {
			t.Errorf("request 6 (triton): %+v, want the triton rules without a fallback", res)
		}
		// A name nobody serves: the triton rules, as in sglang, but no
		// silent fallback under strict.
		switch res := out[7]; {
		case strict && !errors.Is(res.Err, core.ErrRefused):
			t.Errorf("request 7 (FA3): %+v, want refused", res)
		case !strict && (res.Err != nil || res.Answer.Handler != core.TritonName || res.Answer.Fallback != ""):
			t.Errorf("request 7 (FA3): %+v, want the triton rules without a fallback", res)
		}
		if res := out[8]; !errors.Is(res.Err, core.ErrInvalidRequest) {
			t.Errorf("invalid request: %+v, want ErrInvalidRequest", res)
		}
		// After the restart, a batch the plugin can answer is answered.
		small := []core.Request{*faultReq(1), *faultReq(2)}
		for {
			out := make([]registry.BatchAnswer, len(small))
			if err := r.DispatchBatch(ctx, slices.Clone(small), out); err != nil {
				t.Fatal(err)
			}
			if out[0].Err == nil && out[0].Answer.Plugin == "fault" {
				if out[1].Err != nil || out[1].Answer.Plugin != "fault" {
					t.Errorf("second request of the batch: %+v", out[1])
				}
				break
			}
			poll(t, ctx, "the restart")
		}
	})
}

// TestAFailedStartIsRememberedByTheCache: a plugin that hangs at start
// costs the start timeout once; the next registry sharing the description
// cache does not start it again before the backoff, and says why; a new
// build of it (other bytes) is tried at once.
func TestAFailedStartIsRememberedByTheCache(t *testing.T) {
	dir := faultDir(t)
	t.Setenv("ATTNPLUG_FAULT", "hang_at_start")
	cfg := registry.Config{PluginDirs: []string{dir}, CacheDir: t.TempDir(), StartTimeout: 300 * time.Millisecond}
	first, _ := open(t, cfg)
	if p := faultInfo(t, first); p.Status != registry.StatusBroken || !strings.Contains(p.Reason, "start") {
		t.Fatalf("the hung plugin: %+v, want broken for its start", p)
	}
	first.Close()

	second, logs := open(t, cfg)
	p := faultInfo(t, second)
	if p.Status != registry.StatusBroken || !strings.Contains(p.Reason, "not tried again before") || !strings.Contains(p.Reason, "start failed 1 time") {
		t.Errorf("the hung plugin in the next registry: %+v, want broken, remembered", p)
	}
	// The reason it gives may quote what the plugin wrote at its first
	// start; go-plugin's "starting plugin" is logged by a start only.
	if strings.Contains(logs.String(), "starting plugin") {
		t.Errorf("the next registry started the plugin again:\n%s", logs)
	}
	if len(testbin.ProcessesUnder(dir)) != 0 {
		t.Errorf("fault processes left: %v", testbin.ProcessesUnder(dir))
	}

	tamper(t, filepath.Join(dir, "attnplug-backend-fault"))
	third, logs := open(t, cfg)
	if p := faultInfo(t, third); strings.Contains(p.Reason, "not tried again") || !strings.Contains(logs.String(), "hanging at start") {
		t.Errorf("a new build was not tried: %+v\n%s", p, logs)
	}
}

// TestReloadLiftsAQuarantine: a plugin quarantined by its crashes serves
// again after a reload, which gives it a fresh start (a quarantine used
// to last for the life of the host, a reload included), and says so.
func TestReloadLiftsAQuarantine(t *testing.T) {
	r, logs, _ := openFault(t, "crash_after=1", registry.Config{QuarantineAfter: 2, RestartBackoff: time.Millisecond})
	ctx := pollContext(t, 20*time.Second)
	for i := 0; faultInfo(t, r).Status != registry.StatusQuarantined; i++ {
		if reason, msg := ask(t, ctx, r, false, faultReq(i)); reason == "" {
			t.Fatalf("request %d answered by a plugin that crashes on every request: %s", i, msg)
		}
		poll(t, ctx, "the quarantine")
	}
	if reason, _ := ask(t, ctx, r, false, faultReq(0)); reason != registry.ReasonQuarantined {
		t.Fatalf("after the quarantine: %q, want %s", reason, registry.ReasonQuarantined)
	}
	t.Setenv("ATTNPLUG_FAULT", "") // the next process is well
	ch, err := r.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch) != 1 || ch[0].Plugin != "fault" || ch[0].Action != "unquarantined" || !strings.Contains(ch[0].Reason, "quarantined on") {
		t.Errorf("reload of a quarantined plugin: %+v, want fault unquarantined", ch)
	}
	if p := faultInfo(t, r); p.Status == registry.StatusQuarantined || p.Status == registry.StatusFailed {
		t.Errorf("listing after the reload: %+v, want a plugin ready to start", p)
	}
	if reason, msg := ask(t, ctx, r, false, faultReq(1)); reason != "" {
		t.Fatalf("after the reload: %s, want the plugin's answer", msg)
	}
	if p := faultInfo(t, r); p.Status != registry.StatusRunning {
		t.Errorf("listing after an answer: %+v, want running", p)
	}
	if !strings.Contains(logs.String(), "plugin quarantine lifted by a reload") {
		t.Errorf("the lifted quarantine was not logged:\n%s", logs)
	}
	if ch, err := r.Reload(ctx); err != nil || len(ch) != 0 {
		t.Errorf("a second reload: %+v, %v; want no change", ch, err)
	}
}

// TestPluginMemoryIsLimited: a plugin whose memory grows without end
// (32 MiB more at every request) under a limit of 256 MiB fails to
// allocate past it and dies ("out of memory"), and is restarted as after
// any crash, its request answered by the restarted process; the limit is
// the process's RLIMIT_DATA, and its Go collector is told three quarters
// of it (GOMEMLIMIT). Without the limit it grew past 1 GiB here.
func TestPluginMemoryIsLimited(t *testing.T) {
	const limit = 256 << 20
	r, logs, _ := openFault(t, "alloc_mib=32", registry.Config{PluginMemoryLimit: limit, RestartBackoff: time.Millisecond})
	ctx := pollContext(t, 20*time.Second)
	pid := 0
	for i := 0; i < 16 && !strings.Contains(logs.String(), "out of memory"); i++ {
		if reason, msg := ask(t, ctx, r, false, faultReq(i)); reason != "" && reason != registry.ReasonCrashed {
			t.Fatalf("request %d: %s, want the plugin's answer or %s", i, msg, registry.ReasonCrashed)
		}
		if pid == 0 {
			pid = faultInfo(t, r).PID
			limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
			if err != nil {
				t.Skipf("no /proc here: %v", err)
			}
			if !regexp.MustCompile(`Max data size\s+268435456\s+268435456`).Match(limits) {
				t.Errorf("the plugin's limits:\n%s\nwant a data size of %d", limits, limit)
			}
			if env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); !bytes.Contains(env, []byte("\x00GOMEMLIMIT=201326592\x00")) {
				t.Errorf("the plugin's environment has no GOMEMLIMIT of three quarters of the limit")
			}
		}
	}
	if !strings.Contains(logs.String(), "out of memory") {
		t.Fatalf("16 requests of 32 MiB more each, and the plugin did not run out of memory under a limit of 256 MiB:\n%s", logs)
	}
	if p := faultInfo(t, r); p.Restarts < 1 || p.PID == pid {
		t.Errorf("listing %+v, want the plugin restarted after it ran out of memory", p)
	}
}

// TestAPluginOfTooManyNamesIsBroken: the fault plugin declaring 100 001
// names (its start took 47 s, in a check quadratic in the names) is listed
// broken, saying how many names it declares and the bound, and serves
// none.
func TestAPluginOfTooManyNamesIsBroken(t *testing.T) {
	dir := faultDir(t)
	t.Setenv("ATTNPLUG_FAULT", "many_names=100000")
	r, _ := open(t, registry.Config{PluginDirs: []string{dir}})
	p := faultInfo(t, r)
	if p.Status != registry.StatusBroken || !strings.Contains(p.Reason, fmt.Sprintf("declares 100001 names, more than %d", backend.MaxNames)) {
		t.Errorf("listing %+v, want broken, naming the count of names and the bound", p)
	}
	a, err := r.Dispatch(testContext(t), faultReq(1))
	if err != nil || a.Plugin != core.PluginCore || !strings.HasPrefix(a.Fallback, string(registry.ReasonPluginBroken)) {
		t.Errorf("fault: %+v, %v; want a %s fallback", a, err, registry.ReasonPluginBroken)
	}
}

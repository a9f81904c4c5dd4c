package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/testbin"
)

// The tests of this file hold the host's boundary against plugins that
// hang, are replaced under it, or are killed under load, with the real
// host and plugin binaries.

// bounded waits for the host process of cmd to exit, and fails the test
// when it has not within limit (far more than a bounded shutdown takes):
// it then resumes every stopped plugin, so that nothing is left behind.
func bounded(t *testing.T, wait func() int, limit time.Duration, stopped []int) int {
	t.Helper()
	code := make(chan int, 1)
	go func() { code <- wait() }()
	select {
	case c := <-code:
		return c
	case <-time.After(limit):
		for _, pid := range stopped {
			syscall.Kill(pid, syscall.SIGCONT)
		}
		t.Fatalf("the host did not exit within %s with a stopped plugin", limit)
		return -1
	}
}

// stopAll stops every plugin process of tree but the host with SIGSTOP,
// and waits until each is stopped (testbin.Stop).
func stopAll(t *testing.T, tree *testbin.Bins, host int) []int {
	t.Helper()
	pids := pluginPIDs(tree, host)
	if len(pids) == 0 {
		t.Fatal("no plugin process runs")
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGCONT)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	for _, pid := range pids {
		if err := testbin.Stop(pid, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return pids
}

// TestDispatchEndsWithAStoppedPlugin stops every plugin with SIGSTOP in
// the middle of a dispatch stream: the lines that need a plugin then fall
// back at the call deadline, and when stdin closes the host exits within
// its bounded shutdown, killing the stopped processes; the same holds when
// every answer after the stop came from the cache.
func TestDispatchEndsWithAStoppedPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("long: waits out call deadlines and the bounded shutdown of stopped plugins (make test runs it)")
	}
	for _, fresh := range []bool{true, false} {
		name := map[bool]string{true: "new_keys_time_out", false: "answers_from_the_cache"}[fresh]
		t.Run(name, func(t *testing.T) {
			tree, err := bins.CopyTree(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			h := startHost(t, tree, nil, "dispatch", "--platform", "cuda", "--timeout", "300ms")
			line := func(prefix int) string {
				return fmt.Sprintf(`{"backend":"fa3","forward_mode":"EXTEND","extend_prefix_lens":[%d],"seq_lens":[%d],"max_chunk_capacity":131072}`+"\n", prefix, prefix+100)
			}
			read := func() answer {
				t.Helper()
				l, err := h.stdout.ReadBytes('\n')
				if err != nil {
					t.Fatalf("reading an answer: %v; stderr:\n%s", err, h.stderr)
				}
				var a answer
				if err := json.Unmarshal(l, &a); err != nil {
					t.Fatal(err)
				}
				return a
			}
			fmt.Fprint(h.stdin, line(1))
			if a := read(); a.Plugin != "fa3" {
				t.Fatalf("first answer %+v", a)
			}
			stopped := stopAll(t, tree, h.cmd.Process.Pid)
			if fresh {
				fmt.Fprint(h.stdin, line(9000))
				if a := read(); !strings.HasPrefix(a.Fallback, "plugin_timeout") {
					t.Errorf("a new key with fa3 stopped: %+v, want a plugin_timeout fallback; stderr:\n%s", a, h.stderr)
				}
			} else {
				fmt.Fprint(h.stdin, line(1))
				if a := read(); a.Plugin != "fa3" || a.Fallback != "" {
					t.Errorf("a cached key with fa3 stopped: %+v, want fa3's cached answer", a)
				}
			}
			h.stdin.Close()
			bounded(t, h.wait, 60*time.Second, stopped)
			for _, pid := range stopped {
				if procAlive(pid) {
					t.Errorf("stopped plugin %d outlived the host", pid)
				}
			}
		})
	}
}

// TestServeEndsWithAStoppedPlugin stops every plugin of a serve with
// SIGSTOP: SIGTERM ends serve within its bounded shutdown, and a second
// SIGTERM ends it at once with status 143; no plugin outlives it.
func TestServeEndsWithAStoppedPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("long: waits out the bounded shutdown of stopped plugins (make test runs it)")
	}
	for _, twice := range []bool{false, true} {
		t.Run(map[bool]string{false: "one_sigterm", true: "two_sigterms"}[twice], func(t *testing.T) {
			tree, err := bins.CopyTree(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			s := startServer(t, tree, nil)
			servedBy(t, s, "fa3", "fa3")
			servedBy(t, s, "aiter", "aiter")
			stopped := stopAll(t, tree, s.cmd.Process.Pid)
			if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if twice {
				if !s.stderr.await(testContext(t), "shutting down", 0) {
					t.Fatalf("no shutting down after SIGTERM:\n%s", s.stderr.String())
				}
				if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			code := bounded(t, func() int {
				err := s.cmd.Wait()
				if ee, ok := err.(interface{ ExitCode() int }); ok {
					return ee.ExitCode()
				}
				return 0
			}, 60*time.Second, stopped)
			if twice && code != 128+int(syscall.SIGTERM) && code != -1 {
				t.Errorf("exit status %d after two SIGTERMs, want %d", code, 128+int(syscall.SIGTERM))
			}
			deadline := time.Now().Add(5 * time.Second)
			for _, pid := range stopped {
				for procAlive(pid) && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if procAlive(pid) {
					t.Errorf("stopped plugin %d outlived serve", pid)
				}
			}
		})
	}
}

// TestRefusedSwapThenCrashRunsTheAcceptedBinary puts a same-version fa3
// with other rules at fa3's path and sends SIGHUP: the self-test refuses
// it. Then fa3 is SIGKILLed: its restart runs the accepted bytes (sglang's
// answer, the accepted SHA-256 listed), never the refused file.
func TestRefusedSwapThenCrashRunsTheAcceptedBinary(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, tree, nil)
	servedBy(t, s, "fa3", "fa3", "fa4")
	before := listed(t, s)["fa3"]

	// The variant: the fault plugin calling itself fa3, serving fa3's
	// names, with fa3's version, answering MHA everywhere.
	spec := fmt.Sprintf("name=fa3,names=%s,version=%s,rules=mha", strings.Join(before.GetNames(), "+"), before.GetVersion())
	if err := testbin.FaultScript(tree.Dir, faultPlugin(t), "fa3", spec); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tree.Dir+"/attnplug-backend-fa3", tree.Plugin("fa3")); err != nil {
		t.Fatal(err)
	}
	if log := sighup(t, s); !strings.Contains(log, "new plugin binary rejected") || !strings.Contains(log, "differ") {
		t.Fatalf("the variant was not refused by the self-test:\n%s", log)
	}
	if err := syscall.Kill(int(listed(t, s)["fa3"].GetPid()), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	req := &dispatchv1.Request{Backend: "fa3", Batch: &dispatchv1.Batch{
		ForwardMode:      dispatchv1.ForwardMode(core.ModeExtend),
		ExtendPrefixLens: []int64{0, 0}, ExtendPrefixLensKnown: true,
		SeqLens: []int64{1024, 2048}, SeqLensKnown: true,
		MaxChunkCapacity: 131072,
	}}
	resp, err := dispatchv1.NewDispatcherClient(s.conn).Dispatch(testContext(t), &dispatchv1.DispatchRequest{Request: req})
	if err != nil {
		t.Fatal(err)
	}
	a := resp.GetAnswer()
	if a.GetPlugin() != "fa3" || a.GetFallback() != "" || a.GetMethod() != dispatchv1.Method(core.MHAOneShot) {
		t.Errorf("after the crash: %v; want MHA_ONE_SHOT from the accepted fa3", a)
	}
	after := listed(t, s)["fa3"]
	if after.GetSha256() != before.GetSha256() || after.GetPid() == before.GetPid() {
		t.Errorf("fa3 after the crash: pid %d sha %s; want a new process of sha %s", after.GetPid(), after.GetSha256(), before.GetSha256())
	}
}

// cleanAnswers runs lines through a host that no one disturbs, for the
// answers a disturbed run must give.
func cleanAnswers(t *testing.T, lines [][]byte) []answer {
	t.Helper()
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := startHost(t, tree, nil, "dispatch", "--platform", "cuda")
	go h.feed(lines)
	var out []answer
	sc := bufio.NewScanner(h.stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var a answer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	if code := h.wait(); code != 0 || len(out) != len(lines) {
		t.Fatalf("clean run: exit %d, %d answers for %d lines; stderr:\n%s", code, len(out), len(lines), h.stderr)
	}
	return slices.Clip(out)
}

// feed writes lines to the host's stdin, one per line, and closes it.
func (h *hostCmd) feed(lines [][]byte) {
	w := bufio.NewWriterSize(h.stdin, 64<<10)
	for _, l := range lines {
		w.Write(l)
		w.WriteByte('\n')
	}
	w.Flush()
	h.stdin.Close()
}

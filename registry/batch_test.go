package registry_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/testbin"
	"github.com/attnplug/attnplug/registry"
)

// TestLargeBatchesStayUnderTheMessageLimit sends batches whose requests
// carry the longest length arrays allowed: together far past gRPC's 4 MiB
// default, they must still be answered by the plugin, not fall back.
func TestLargeBatchesStayUnderTheMessageLimit(t *testing.T) {
	// The deadline is not what is tested: a loaded machine may take more
	// than the default 2s to carry and check these batches.
	r, _ := open(t, registry.Config{NoAnswerCache: true, CallTimeout: time.Minute})
	ctx := testContext(t)
	reqs := make([]core.Request, 40)
	for i := range reqs {
		reqs[i] = core.NewRequest("fa3", core.ModeExtend)
		reqs[i].Batch.ExtendPrefixLens = make([]int64, core.MaxBatchSize)
		reqs[i].Batch.SeqLens = make([]int64, core.MaxBatchSize)
		reqs[i].Batch.SeqLens[0] = int64(i + 1)
		reqs[i].Batch.MaxChunkCapacity = 131072
	}
	out := make([]registry.BatchAnswer, len(reqs))
	if err := r.DispatchBatch(ctx, reqs, out); err != nil {
		t.Fatal(err)
	}
	for i, res := range out {
		if res.Err != nil || res.Answer.Plugin != "fa3" || res.Answer.Method != core.MHAOneShot || res.Answer.Fallback != "" {
			t.Fatalf("request %d: %+v", i, res)
		}
	}
}

// TestHostHardwareFiltersPlugins: with the host's hardware known, a plugin
// none of whose names runs there is never started; its names fall back
// with plugin_unsupported_hardware.
func TestHostHardwareFiltersPlugins(t *testing.T) {
	host := core.HostInfo{Platform: core.PlatformHIP, Archs: []string{"gfx942"}}
	r, _ := open(t, registry.Config{Host: &host})
	ctx := testContext(t)
	if a, err := r.Dispatch(ctx, decode("aiter")); err != nil || a.Plugin != "aiter" {
		t.Errorf("aiter on an MI300X host: %+v, %v", a, err)
	}
	a, err := r.Dispatch(ctx, decode("fa3"))
	if err != nil || !strings.HasPrefix(a.Fallback, string(registry.ReasonUnsupportedHardware)) || a.Handler != "triton" {
		t.Errorf("fa3 on an MI300X host: %+v, %v; want a %s fallback", a, err, registry.ReasonUnsupportedHardware)
	}
	for _, p := range r.Plugins() {
		switch p.Name {
		case "fa3":
			// Listed as what it is, not "ready": it will never start here.
			if p.PID != 0 || p.Status != registry.StatusUnsupportedHardware || !strings.Contains(p.Reason, "does not run on this host") || !strings.Contains(p.Reason, "cuda") {
				t.Errorf("fa3 on an MI300X host is listed %+v, want %s saying what it needs", p, registry.StatusUnsupportedHardware)
			}
		case "aiter":
			if p.Status != registry.StatusRunning {
				t.Errorf("aiter on an MI300X host is listed %+v, want running", p)
			}
		}
	}
}

// cacheScene is a registry over a copy of the plugin tree whose fa3 has
// answered one request (cached, now in its answer cache) and a Pass over
// it, with batch sending the cached request and a new one together.
type cacheScene struct {
	tree   *testbin.Bins
	r      *registry.Registry
	cached core.Request
	pass   *registry.Pass
}

func newCacheScene(t *testing.T) *cacheScene {
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, _ := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}, RestartBackoff: 50 * time.Millisecond, QuarantineAfter: -1})
	sc := &cacheScene{tree: tree, r: r, cached: *decode("fa3")}
	if a, err := r.Dispatch(testContext(t), &sc.cached); err != nil || a.Plugin != "fa3" {
		t.Fatalf("fa3: %+v, %v", a, err)
	}
	if sc.pass, err = r.Resolve("fa3").Begin(&sc.cached.Batch, &sc.cached.Runtime); err != nil {
		t.Fatal(err)
	}
	return sc
}

// fresh is a request of fa3 whose key is not cached yet.
func fresh(i int) core.Request {
	req := core.NewRequest("fa3", core.ModeExtend)
	req.Batch.ExtendPrefixLens = []int64{int64(i)}
	req.Batch.SeqLens = []int64{int64(i) + 100}
	req.Batch.MaxChunkCapacity = int64(1000 + i)
	return req
}

// answers sends the cached request and a new one in one batch, and each
// alone, and the cached one's layer through the Pass: it returns what
// answered each, as plugin/fallback reason.
func (sc *cacheScene) answers(t *testing.T, i int) []string {
	t.Helper()
	ctx := testContext(t)
	reqs := []core.Request{sc.cached, fresh(i), sc.cached}
	out := make([]registry.BatchAnswer, len(reqs))
	if err := sc.r.DispatchBatch(ctx, reqs, out); err != nil {
		t.Fatal(err)
	}
	var got []string
	note := func(a core.Answer, err error) {
		if err != nil {
			t.Fatal(err)
		}
		reason, _, _ := strings.Cut(a.Fallback, ":")
		got = append(got, a.Plugin+"/"+reason)
	}
	for _, res := range out {
		note(res.Answer, res.Err)
	}
	note(sc.pass.Dispatch(ctx, &sc.cached.Layer))
	note(sc.r.Dispatch(ctx, &sc.cached))
	f := fresh(i + 1)
	note(sc.r.Dispatch(ctx, &f))
	return got
}

// killFa3 SIGKILLs fa3's process and waits until it is gone.
func (sc *cacheScene) killFa3(t *testing.T) {
	t.Helper()
	pid := pidOf(t, sc.r, "fa3")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for syscall.Kill(pid, 0) == nil {
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestARestartRunsTheVerifiedBytesAndKeepsTheCache kills fa3 and renames
// garbage into the place of its binary, with no reload: the restart runs
// the bytes that were verified (from the descriptor held since), so every
// request, cached or new, alone, in a batch or through a Pass, is fa3's,
// with no fallback; the listing keeps the verified hash.
func TestARestartRunsTheVerifiedBytesAndKeepsTheCache(t *testing.T) {
	sc := newCacheScene(t)
	before := listing(sc.r)["fa3"]
	sc.killFa3(t)
	if err := os.WriteFile(sc.tree.Plugin("fa3")+".new", []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(sc.tree.Plugin("fa3")+".new", sc.tree.Plugin("fa3")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		for j, got := range sc.answers(t, 100*i) {
			if got != "fa3/" {
				t.Errorf("round %d, answer %d: %s; want fa3's with no fallback", i, j, got)
			}
		}
	}
	after := listing(sc.r)["fa3"]
	if after.Restarts != 1 || after.SHA256 != before.SHA256 || after.PID == before.PID || after.Status != registry.StatusRunning {
		t.Errorf("listing after the restart %+v; want one restart of the binary %s", after, before.SHA256)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", after.PID))
	if err != nil || !strings.HasSuffix(exe, "(deleted)") {
		t.Errorf("the restarted process runs %q (%v); want the verified binary, unlinked since", exe, err)
	}
}

// TestABinaryChangedInPlaceIsBroken kills fa3 and writes garbage into its
// binary in place: the verified bytes are gone, so fa3 is not started
// again; every request of it, cached or not, falls back as plugin_broken,
// and a reload after the good bytes are back serves it again.
func TestABinaryChangedInPlaceIsBroken(t *testing.T) {
	sc := newCacheScene(t)
	good, err := os.ReadFile(sc.tree.Plugin("fa3"))
	if err != nil {
		t.Fatal(err)
	}
	sc.killFa3(t)
	ctx := testContext(t)
	// The same inode, truncated and written, once the kernel lets go of
	// the dead process's image (ETXTBSY until then).
	for {
		err := os.WriteFile(sc.tree.Plugin("fa3"), []byte("#!/bin/sh\nexit 3\n"), 0o755)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ETXTBSY) || ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := "core/" + string(registry.ReasonPluginBroken)
	for i := range 2 {
		for j, got := range sc.answers(t, 100*i) {
			if got != want {
				t.Errorf("round %d, answer %d: %s; want %s", i, j, got, want)
			}
		}
	}
	if p := listing(sc.r)["fa3"]; p.Status != registry.StatusBroken || !strings.Contains(p.Reason, "changed in place") {
		t.Errorf("listing %+v; want broken, changed in place", p)
	}
	if err := os.WriteFile(sc.tree.Plugin("fa3")+".new", good, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(sc.tree.Plugin("fa3")+".new", sc.tree.Plugin("fa3")); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.r.Reload(testContext(t)); err != nil {
		t.Fatal(err)
	}
	f := fresh(7)
	if a, err := sc.r.Dispatch(testContext(t), &f); err != nil || a.Plugin != "fa3" || a.Fallback != "" {
		t.Errorf("after the good binary is back and a reload: %+v, %v", a, err)
	}
}

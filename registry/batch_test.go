package registry_test

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry"
)

// TestLargeBatchesStayUnderTheMessageLimit sends batches whose requests
// carry the longest length arrays allowed: together far past gRPC's 4 MiB
// default, they must still be answered by the plugin, not fall back.
func TestLargeBatchesStayUnderTheMessageLimit(t *testing.T) {
	r, _ := open(t, registry.Config{NoAnswerCache: true})
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
		if p.Name == "fa3" && p.PID != 0 {
			t.Errorf("fa3 was started on hardware it does not run on")
		}
	}
}

// TestCachedAnswersFollowThePluginsState kills fa3 and puts garbage in
// place of its binary: from the failure until fa3 answers again, every
// request of its names falls back, whether its answer is cached or not,
// and the lines of one batch get the same kind of answer; once the binary
// is back, cached and new requests are fa3's again.
func TestCachedAnswersFollowThePluginsState(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, _ := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}, RestartBackoff: 50 * time.Millisecond, QuarantineAfter: -1})
	ctx := testContext(t)
	cached := *decode("fa3")
	fresh := func(i int) core.Request {
		req := core.NewRequest("fa3", core.ModeExtend)
		req.Batch.ExtendPrefixLens = []int64{int64(i)}
		req.Batch.SeqLens = []int64{int64(i) + 100}
		req.Batch.MaxChunkCapacity = int64(1000 + i) // a key not cached yet
		return req
	}
	if a, err := r.Dispatch(ctx, &cached); err != nil || a.Plugin != "fa3" {
		t.Fatalf("fa3: %+v, %v", a, err)
	}
	pass, err := r.Resolve("fa3").Begin(&cached.Batch, &cached.Runtime)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pidOf(t, r, "fa3"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tree.Plugin("fa3")+".new", []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tree.Plugin("fa3")+".new", tree.Plugin("fa3")); err != nil {
		t.Fatal(err)
	}

	// batch sends the cached request and a new one in one batch; all must
	// be answered the same way, and the Pass too.
	batch := func(i int) (reasons []string) {
		t.Helper()
		reqs := []core.Request{cached, fresh(i), cached}
		out := make([]registry.BatchAnswer, len(reqs))
		if err := r.DispatchBatch(ctx, reqs, out); err != nil {
			t.Fatal(err)
		}
		for _, res := range out {
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			reason, _, _ := strings.Cut(res.Answer.Fallback, ":")
			reasons = append(reasons, res.Answer.Plugin+"/"+reason)
		}
		if reasons[0] != reasons[1] || reasons[1] != reasons[2] {
			t.Errorf("batch %d: the lines were answered %v; want one kind of answer", i, reasons)
		}
		return reasons
	}
	seen := map[string]bool{}
	for i := 0; !seen["core/"+string(registry.ReasonStartFailed)]; i++ {
		if ctx.Err() != nil {
			t.Fatalf("no start failure seen; saw %v", seen)
		}
		seen[batch(i)[0]] = true
		if a, err := pass.Dispatch(ctx, &cached.Layer); err != nil || a.Plugin == "fa3" {
			t.Errorf("the pass of a failed plugin answered %+v, %v; want a fallback", a, err)
		}
		if a, err := r.Dispatch(ctx, &cached); err != nil || a.Plugin == "fa3" {
			t.Errorf("Dispatch of a failed plugin answered %+v, %v from its cache; want a fallback", a, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !seen["core/"+string(registry.ReasonCrashed)] || seen["fa3/"] {
		t.Errorf("answers seen while fa3 was down: %v; want plugin_crashed first, never fa3's", seen)
	}

	rebuild(t, bins.Plugin("fa3"), tree.Plugin("fa3"))
	for i := 1000; batch(i)[0] != "fa3/"; i++ {
		if ctx.Err() != nil {
			t.Fatal("fa3 never answered again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if a, err := pass.Dispatch(ctx, &cached.Layer); err != nil || a.Plugin != "fa3" || a.Fallback != "" {
		t.Errorf("the pass after fa3 recovered: %+v, %v", a, err)
	}
}

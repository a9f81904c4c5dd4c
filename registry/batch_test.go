package registry_test

import (
	"strings"
	"testing"

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
	out := make([]registry.Result, len(reqs))
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

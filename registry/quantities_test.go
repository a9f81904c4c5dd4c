package registry_test

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/ruletest"
	"github.com/attnplug/attnplug/internal/testbin"
	labrules "github.com/attnplug/attnplug/internal/testplugins/lab/rules"
	"github.com/attnplug/attnplug/registry"
)

// labRequests returns requests around every threshold the lab's rules
// compare with, so that many share a key and both sides of each are met.
func labRequests(rng *rand.Rand, n int) []core.Request {
	around := func(t int64) []int64 { return []int64{t - 2, t - 1, t, t + 1, t + 2} }
	return ruletest.Random(rng, ruletest.Domain{
		Names:       []string{labrules.Name, labrules.NameB},
		Platforms:   []core.Platform{core.PlatformCUDA, core.PlatformHIP, core.PlatformCPU},
		ComputeCaps: []int{labrules.MinCapability - 1, labrules.MinCapability, labrules.MinCapability + 1},
		KVDTypes:    []string{"", "bf16", "fp8_e4m3", "fp8_e5m2"},
		Counts:      []int{labrules.ManySequences - 2, labrules.ManySequences - 1, labrules.ManySequences, labrules.ManySequences + 1},
		PrefixSums:  around(labrules.PrefixThreshold),
		Extends:     []int64{labrules.LongSequence - labrules.LongPrefix, labrules.LongSequence/4 - 2},
		Capacities:  []int64{labrules.CapacityThreshold},
		FlagOneIn:   6,
	}, n)
}

// TestQuantityReadsCachedCorrectly: the lab plugin's rules read one
// quantity of each kind, declared with its thresholds; every answer the
// registry gives from its cache is the rules' own, through Dispatch, a
// batch and a forward pass. With one declaration left out, the cache
// answers some request wrongly: the declarations are what keeps it right.
func TestQuantityReadsCachedCorrectly(t *testing.T) {
	dir := t.TempDir()
	if _, err := testbin.BuildTestPlugin(dir, "lab"); err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	reqs := labRequests(rand.New(rand.NewPCG(3, 4)), 3000)
	r, _ := open(t, registry.Config{PluginDirs: []string{dir}, ExpectedNames: []string{}})
	for round := 0; round < 2; round++ {
		out := make([]registry.BatchAnswer, len(reqs))
		if err := r.DispatchBatch(ctx, append([]core.Request(nil), reqs...), out); err != nil {
			t.Fatal(err)
		}
		for i := range reqs {
			want := labrules.Decide(&reqs[i])
			a, err := r.Dispatch(ctx, &reqs[i])
			if err != nil || a.Method != want || a.Plugin != labrules.Name {
				t.Fatalf("round %d, %+v: got %+v, %v; want %s from lab", round, reqs[i], a, err, want)
			}
			if out[i].Err != nil || out[i].Answer.Method != want {
				t.Fatalf("round %d, batch %d: got %+v, want %s", round, i, out[i], want)
			}
			pass, err := r.Resolve(reqs[i].Backend).Begin(&reqs[i].Batch, &reqs[i].Runtime)
			if err != nil {
				t.Fatal(err)
			}
			if a, err := pass.Dispatch(ctx, &reqs[i].Layer); err != nil || a.Method != want {
				t.Fatalf("round %d, pass %d: got %+v, %v, want %s", round, i, a, err, want)
			}
		}
	}

	// The control: without prefix_sum declared, the cache mixes requests
	// on both sides of 1000.
	t.Setenv("ATTNPLUG_LAB", "undeclared=prefix_sum")
	broken, _ := open(t, registry.Config{PluginDirs: []string{dir}, ExpectedNames: []string{}, CacheDir: filepath.Join(dir, "cache")})
	wrong := 0
	for i := range reqs {
		a, err := broken.Dispatch(ctx, &reqs[i])
		if err != nil {
			t.Fatal(err)
		}
		if a.Method != labrules.Decide(&reqs[i]) {
			wrong++
		}
	}
	if wrong == 0 {
		t.Errorf("with prefix_sum undeclared, every cached answer was still right: the requests do not test the declarations")
	}
}

package registry_test

import (
	"math/rand/v2"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/reference"
	"github.com/attnplug/attnplug/jsonl"
	"github.com/attnplug/attnplug/registry"
)

// TestCachedAnswersEqualPluginAnswers sends the same random requests
// through a registry that caches answers by the declared facts and through
// one that asks the plugin every time: every answer must be the same.
func TestCachedAnswersEqualPluginAnswers(t *testing.T) {
	cached, _ := open(t, registry.Config{Platform: core.PlatformCUDA})
	direct, _ := open(t, registry.Config{Platform: core.PlatformCUDA, NoAnswerCache: true})
	ctx := testContext(t)
	rng := rand.New(rand.NewPCG(5, 6))
	n := 3000
	if testing.Short() {
		n = 500
	}
	reqs := make([]core.Request, n)
	for i := range reqs {
		if err := jsonl.DecodeRequest(reference.Generate(rng), &reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	// Twice through the cache: the first pass fills it, the second reads it.
	for round := 0; round < 2; round++ {
		batch := make([]registry.BatchAnswer, n)
		if err := cached.DispatchBatch(ctx, append([]core.Request(nil), reqs...), batch); err != nil {
			t.Fatal(err)
		}
		for i := range reqs {
			want, err := direct.Dispatch(ctx, &reqs[i])
			if err != nil {
				t.Fatal(err)
			}
			got, err := cached.Dispatch(ctx, &reqs[i])
			if err != nil || got != want {
				t.Fatalf("round %d request %d (%s): cached %+v, %v; plugin %+v", round, i, reqs[i].Backend, got, err, want)
			}
			if batch[i].Err != nil || batch[i].Answer != want {
				t.Fatalf("round %d request %d (%s): batch %+v; plugin %+v", round, i, reqs[i].Backend, batch[i], want)
			}
			d := cached.Resolve(reqs[i].Backend)
			pass, err := d.Begin(&reqs[i].Batch, &reqs[i].Runtime)
			if err != nil {
				t.Fatal(err)
			}
			got, err = pass.Dispatch(ctx, &reqs[i].Layer)
			if err != nil || got != want {
				t.Fatalf("round %d request %d (%s): pass %+v, %v; plugin %+v", round, i, reqs[i].Backend, got, err, want)
			}
		}
	}
}

// TestPassDispatchDoesNotAllocate checks the steady state of the
// production path: once the cache knows the answer, a layer costs no
// allocation.
func TestPassDispatchDoesNotAllocate(t *testing.T) {
	// A plugin's name, answered from the cache, and names the triton rules
	// answer in process: "triton" itself, and a name no backend serves.
	for _, tc := range []struct{ name, plugin string }{{"fa3", "fa3"}, {"triton", core.PluginCore}, {"torch_native", core.PluginCore}} {
		t.Run(tc.name, func(t *testing.T) { passDoesNotAllocate(t, tc.name, tc.plugin) })
	}
}

func passDoesNotAllocate(t *testing.T, name, plugin string) {
	r, _ := open(t, registry.Config{})
	ctx := testContext(t)
	d := r.Resolve(name)
	batch := core.Batch{Mode: core.ModeDecode, ExtendPrefixLens: []int64{100, 200}, SeqLens: []int64{101, 201}, MaxChunkCapacity: 131072}
	rt := core.Runtime{Platform: core.PlatformCUDA}
	layer := core.Layer{ChunkedPrefixCacheThreshold: 8192, FusedQKVAProjWithMQA: true}
	var pass registry.Pass
	if err := d.BeginInto(&pass, &batch, &rt); err != nil {
		t.Fatal(err)
	}
	if a, err := pass.Dispatch(ctx, &layer); err != nil || a.Plugin != plugin {
		t.Fatalf("warm-up: %+v, %v", a, err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := d.BeginInto(&pass, &batch, &rt); err != nil {
			t.Fatal(err)
		}
		for l := 0; l < 61; l++ {
			if _, err := pass.Dispatch(ctx, &layer); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per forward pass, want 0", allocs)
	}
}

// TestPassConditionSharesAnswers: the dsa rules declare that a batch that
// gives dsa_use_mha is decided by it alone, so passes over batches that
// differ in everything else (mode, device, KV cache dtype, CUDA graph,
// lengths past the dense threshold and the capacity: each a key of its own
// under the whole reads) are answered from the answer the first batch left
// in the cache: no call to the plugin, no allocation.
func TestPassConditionSharesAnswers(t *testing.T) {
	r, _ := open(t, registry.Config{})
	ctx := testContext(t)
	d := r.Resolve("dsa")
	layer := core.Layer{ChunkedPrefixCacheThreshold: 8192, UseDSA: true}
	type pass struct {
		b  core.Batch
		rt core.Runtime
	}
	var passes []pass
	for _, mode := range []core.ForwardMode{core.ModeExtend, core.ModeDecode, core.ModeTargetVerify} {
		for _, cc := range []int{90, 80} {
			for _, dt := range []string{"bf16", "fp16"} {
				for _, graph := range []bool{false, true} {
					b := core.Batch{Mode: mode, ExtendPrefixLens: []int64{0, 0}, SeqLens: []int64{100, 200}, MaxChunkCapacity: 131072}
					if graph {
						b.ExtendPrefixLens, b.SeqLens, b.MaxChunkCapacity = []int64{0, 9000}, []int64{5000, 9100}, 1000
					}
					passes = append(passes, pass{b, core.Runtime{Platform: core.PlatformCUDA, DSAUseMHA: true, DSAUseMHASet: true,
						ComputeCapability: cc, KVCacheDType: dt, PiecewiseCUDAGraph: graph}})
				}
			}
		}
	}
	var p registry.Pass
	if err := d.BeginInto(&p, &passes[0].b, &passes[0].rt); err != nil {
		t.Fatal(err)
	}
	if a, err := p.Dispatch(ctx, &layer); err != nil || a.Plugin != "dsa" || a.Method != core.MHAOneShot {
		t.Fatalf("warm-up: %+v, %v", a, err)
	}
	n := 1
	allocs := testing.AllocsPerRun(len(passes)-2, func() {
		if err := d.BeginInto(&p, &passes[n].b, &passes[n].rt); err != nil {
			t.Fatal(err)
		}
		if a, err := p.Dispatch(ctx, &layer); err != nil || a.Method != core.MHAOneShot || a.Plugin != "dsa" {
			t.Fatalf("pass %d: %+v, %v; want MHA_ONE_SHOT from dsa", n, a, err)
		}
		n++
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per pass over a new batch that gives dsa_use_mha, want 0 (answered from the cache)", allocs)
	}
}

// BenchmarkPassDispatch measures one 61-layer forward pass (ns/op) on the
// production path.
func BenchmarkPassDispatch(b *testing.B) {
	r, err := registry.New(b.Context(), registry.Config{PluginDirs: []string{bins.PluginDir}})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	d := r.Resolve("fa3")
	batch := core.Batch{Mode: core.ModeDecode, ExtendPrefixLens: make([]int64, 64), SeqLens: make([]int64, 64), MaxChunkCapacity: 131072}
	rt := core.Runtime{Platform: core.PlatformCUDA}
	layer := core.Layer{ChunkedPrefixCacheThreshold: 8192, FusedQKVAProjWithMQA: true}
	var pass registry.Pass
	if err := d.BeginInto(&pass, &batch, &rt); err != nil {
		b.Fatal(err)
	}
	pass.Dispatch(b.Context(), &layer)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := d.BeginInto(&pass, &batch, &rt); err != nil {
			b.Fatal(err)
		}
		for l := 0; l < 61; l++ {
			pass.Dispatch(b.Context(), &layer)
		}
	}
}

// BenchmarkRPCPerLayer is the baseline of BenchmarkPassDispatch: one gRPC
// call to the plugin per layer.
func BenchmarkRPCPerLayer(b *testing.B) {
	r, err := registry.New(b.Context(), registry.Config{PluginDirs: []string{bins.PluginDir}, NoAnswerCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	req := core.NewRequest("fa3", core.ModeDecode)
	req.Batch.ExtendPrefixLens = make([]int64, 64)
	req.Batch.SeqLens = make([]int64, 64)
	r.Dispatch(b.Context(), &req)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.Dispatch(b.Context(), &req); err != nil {
			b.Fatal(err)
		}
	}
}

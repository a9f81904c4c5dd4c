package kernels_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/attnplug/attnplug/kernels"
)

// ExampleRun runs absorbed MLA on a small decode batch and checks it against the oracle.
func ExampleRun() {
	cfg := kernels.DeepSeekV3()
	cfg.Heads = 2 // keep the example fast
	b := kernels.BatchShape{SeqLens: []int{40, 17}, PrefixLens: []int{39, 16}}
	raw, err := kernels.RandomTensors(rand.New(rand.NewPCG(1, 2)), cfg, b)
	if err != nil {
		panic(err)
	}
	in, err := kernels.ApplyRoPE(cfg, b, raw) // MLA takes rotated q_pe / k_pe
	if err != nil {
		panic(err)
	}
	out := make([]float32, b.Tokens()*cfg.Heads*cfg.VHeadDim)
	if err := kernels.Run(kernels.MLA, cfg, b, in, out); err != nil {
		panic(err)
	}
	want, err := kernels.Reference(cfg, b, raw) // the oracle takes unrotated inputs
	if err != nil {
		panic(err)
	}
	fmt.Println(kernels.RelError(out, want) <= 1e-5)
	// Output: true
}

// ExampleLayout cuts one flat buffer into named tensors without copying.
func ExampleLayout() {
	cfg := kernels.DeepSeekV3()
	b := kernels.BatchShape{SeqLens: []int{1024}, PrefixLens: []int{1023}}
	l, err := kernels.Layout(cfg, b)
	if err != nil {
		panic(err)
	}
	for _, f := range l.Fields() {
		fmt.Printf("%-12s offset %9d bytes %9d shape %v\n", f.Name, 4*f.Offset, 4*f.Len, f.Shape)
	}
	fmt.Println("total bytes", l.Bytes())
	// Output:
	// q_nope       offset         0 bytes     65536 shape [1 128 128]
	// q_pe         offset     65536 bytes     32768 shape [1 128 64]
	// positions    offset     98304 bytes         4 shape [1]
	// c_kv         offset     98368 bytes   2097152 shape [1024 512]
	// k_pe         offset   2195520 bytes    262144 shape [1024 64]
	// w_kc         offset   2457664 bytes  33554432 shape [128 128 512]
	// w_vc         offset  36012096 bytes  33554432 shape [128 512 128]
	// topk_indices offset  69566528 bytes      8192 shape [1 2048]
	// out          offset  69574720 bytes     65536 shape [1 128 128]
	// total bytes 69640256
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/kernelrun"
	"github.com/attnplug/attnplug/shm"
)

func runRun(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var h hostFlags
	h.register(fs)
	o := kernelrun.DefaultOptions()
	fs.BoolVar(&o.RandomTensors, "random-tensors", false, "generate the tensors of lines that give none (seeded by --seed and the line number)")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of --random-tensors")
	fs.IntVar(&o.Dims.Heads, "heads", o.Dims.Heads, "attention heads")
	fs.IntVar(&o.Dims.KVLoraRank, "kv-lora-rank", o.Dims.KVLoraRank, "width of the latent c_kv (DeepSeek-V3: 512)")
	fs.IntVar(&o.Dims.QKNopeHeadDim, "qk-nope-head-dim", o.Dims.QKNopeHeadDim, "per-head width of the non-rotary q and k (DeepSeek-V3: 128)")
	fs.IntVar(&o.Dims.QKRopeHeadDim, "qk-rope-head-dim", o.Dims.QKRopeHeadDim, "width of the rotary q_pe and k_pe, even (DeepSeek-V3: 64)")
	fs.IntVar(&o.Dims.VHeadDim, "v-head-dim", o.Dims.VHeadDim, "per-head width of v (DeepSeek-V3: 128)")
	fs.Float64Var(&o.Dims.SoftmaxScale, "softmax-scale", 0, "softmax scale (default (qk_nope+qk_rope)^-0.5)")
	fs.Float64Var(&o.Dims.RopeBase, "rope-base", o.Dims.RopeBase, "RoPE base theta")
	fs.IntVar(&o.TopK, "top-k", o.TopK, "DSA indexer top-k of DSA layers (DeepSeek-V3.2: 2048); 0 runs them dense")
	fs.IntVar(&o.MaxKVTokens, "max-kv-tokens", o.MaxKVTokens, "refuse lines whose batch has more KV tokens (sum of seq_lens)")
	fs.Int64Var(&o.MaxTensorBytes, "max-tensor-bytes", o.MaxTensorBytes, "refuse lines whose tensors (inputs and output), or the k and v that MHA_ONE_SHOT decompresses, take more bytes (at most 64 GiB, and at most this machine's memory)")
	maxLine := maxLineFlag(fs, o.MaxLine)
	device := fs.String("device", "cpu", "where kernels run: cpu (the plugins' reference kernels over shared memory) or cuda (the plugins' device code, launched by this process on tensors it generates on the GPU; docs/device.md)")
	pageSize := fs.Int("page-size", 64, "with --device cuda: the KV cache page size of MLA decode")
	allowCPU := fs.Bool("allow-cpu", false, "with --device cuda: when there is no usable CUDA device, warn and run the kernels on the CPU instead of failing")
	logger, err := h.parse(fs, e, args, "attnplug run [flags] < requests.jsonl > answers.jsonl", "requests come on stdin")
	if err != nil {
		return err
	}
	switch *device {
	case "cpu":
		if *allowCPU {
			return &usageError{"run: --allow-cpu needs --device cuda"}
		}
		if given(fs, "page-size") {
			return &usageError{fmt.Sprintf("run: --page-size=%d needs --device cuda", *pageSize)}
		}
	case "cuda":
		if *pageSize < 1 || *pageSize > 4096 {
			return &usageError{fmt.Sprintf("run: --page-size=%d is outside [1, 4096]", *pageSize)}
		}
	default:
		return &usageError{fmt.Sprintf("run: --device=%q: want cpu or cuda", *device)}
	}
	if err := checkMaxLine(*maxLine); err != nil {
		return err
	}
	if o.Dims.SoftmaxScale == 0 {
		o.Dims.SoftmaxScale = 1 / math.Sqrt(float64(o.Dims.QKNopeHeadDim+o.Dims.QKRopeHeadDim))
	}
	if err := checkMaxTensorBytes(o.MaxTensorBytes, physicalMemory()); err != nil {
		return err
	}
	if o.MaxKVTokens <= 0 {
		return &usageError{fmt.Sprintf("run: --max-kv-tokens=%d must be positive", o.MaxKVTokens)}
	}
	if o.TopK < 0 {
		return &usageError{fmt.Sprintf("run: --top-k=%d is negative (0 runs DSA layers dense)", o.TopK)}
	}
	o.Dims.ChunkCapacity, o.Dims.TopK = 1, o.TopK
	if err := o.Dims.Validate(); err != nil {
		// The field is a dimension's name, which its flag spells with
		// dashes: heads, --heads; top_k, --top-k.
		var fe *core.FieldError
		if errors.As(err, &fe) {
			return &usageError{fmt.Sprintf("run: --%s: %s", strings.ReplaceAll(fe.Field, "_", "-"), fe.Msg)}
		}
		return &usageError{"run: " + err.Error()}
	}
	o.Dims.TopK = 0 // set per line
	o.MaxLine = *maxLine
	if *device == "cuda" {
		o.Device = kernelrun.NewDevice(*pageSize)
		defer o.Device.Close()
		if err := o.Device.Open(); err != nil {
			if !*allowCPU {
				return fmt.Errorf("run: --device cuda: no usable CUDA device: %w (--allow-cpu runs the kernels on the CPU instead)", err)
			}
			logger.Warn("no usable CUDA device: the kernels run on the CPU (--device cuda --allow-cpu)", "error", err)
		}
	}
	reg, err := h.open(ctx, logger)
	if err != nil {
		return err
	}
	defer reg.Close()
	refused, err := kernelrun.Stream(ctx, reg, e.stdin, e.stdout, o)
	if err != nil {
		return err
	}
	if refused > 0 {
		return &refusedError{refused}
	}
	return nil
}

// checkMaxTensorBytes refuses a --max-tensor-bytes that is not positive,
// or more than the largest shared-memory segment or than this machine's
// memory (machine, when known): the tensors of a line the CPU runs (every
// line with --device cpu, and those the GPU does not run with --device
// cuda) live in a segment the plugins map, and a line allowed more than
// the machine holds would be ended by the kernel's out-of-memory killer,
// not refused.
func checkMaxTensorBytes(n, machine int64) error {
	switch {
	case n <= 0:
		return &usageError{fmt.Sprintf("run: --max-tensor-bytes=%d must be positive", n)}
	case n > shm.MaxSize:
		return &usageError{fmt.Sprintf("run: --max-tensor-bytes=%d is more than the largest tensor segment, %d bytes (64 GiB)", n, int64(shm.MaxSize))}
	case machine > 0 && n > machine:
		return &usageError{fmt.Sprintf("run: --max-tensor-bytes=%d is more than this machine's memory, %d bytes", n, machine)}
	}
	return nil
}

package reference

import (
	"encoding/json"
	"math/rand/v2"

	"github.com/attnplug/attnplug/core"
)

// Names is the backend names Generate picks from: the reference's, names
// that fall back (a case-different one, torch_native, an unknown one), and
// the deprecated nsa.
func Names() []string {
	return append(core.ReferenceNames(), "FA3", "torch_native", "no_such_backend", "Flashinfer")
}

// modeNames is the forward modes Generate picks from: every mode, in
// sglang's order, by name.
func modeNames() []string {
	var out []string
	for _, m := range core.ForwardModes() {
		out = append(out, m.String())
	}
	return out
}

// platformNames is the platforms Generate picks from: every platform but
// the unset one, in core's order, by name.
func platformNames() []string {
	var out []string
	for p := core.PlatformUnset + 1; p.Valid(); p++ {
		out = append(out, p.String())
	}
	return out
}

// pick returns one of names, chosen by rng.
func pick(rng *rand.Rand, names []string) string { return names[rng.IntN(len(names))] }

// Generate returns a random valid request of the dispatch format, as one
// JSON line without its newline. Lengths are chosen so that the prefix sum
// often lands exactly on the threshold, on 0, one below or one above, and
// the sequence sum exactly on the chunk capacity.
func Generate(rng *rand.Rand) []byte {
	req := map[string]any{
		"backend":      Names()[rng.IntN(len(Names()))],
		"forward_mode": pick(rng, modeNames()),
	}
	threshold := []int64{8192, 0, 1, 4096, 16384, int64(rng.IntN(20000))}[rng.IntN(6)]
	n := 1 + rng.IntN(4)
	prefix := make([]int64, n)
	seq := make([]int64, n)
	switch rng.IntN(5) {
	case 0: // all zero
	case 1: // on the threshold, or next to it
		target := threshold + int64(rng.IntN(3)) - 1
		if target < 0 {
			target = 0
		}
		spread(rng, prefix, target)
	default:
		for i := range prefix {
			prefix[i] = int64(rng.IntN(12000))
		}
	}
	for i := range seq {
		seq[i] = prefix[i] + int64(rng.IntN(5000))
	}
	capacity := []int64{131072, 0, 4096, int64(rng.IntN(40000))}[rng.IntN(4)]
	if rng.IntN(4) == 0 { // sequence sum on the capacity, or next to it
		var ps, ss int64
		for i := range seq {
			ps += prefix[i]
			ss += seq[i]
		}
		want := ss + int64(rng.IntN(3)) - 1
		if want < ps {
			want = ps
		}
		capacity = want
	}
	if rng.IntN(8) != 0 {
		req["extend_prefix_lens"] = prefix
	} else if rng.IntN(2) == 0 {
		req["extend_prefix_lens"] = nil
	}
	if rng.IntN(8) != 0 {
		req["seq_lens"] = seq
	}
	if rng.IntN(6) != 0 {
		req["max_chunk_capacity"] = capacity
	}
	maybeBool(rng, req, "mla_prefill_cp", 4)
	layer := map[string]any{}
	if rng.IntN(5) != 0 {
		layer["chunked_prefix_cache_threshold"] = threshold
	}
	for _, f := range []string{"disable_chunked_prefix_cache", "flashinfer_mla_disable_ragged", "rocm_fused_decode_mla", "use_dsa", "fused_qkv_a_proj_with_mqa", "intel_amx"} {
		maybeBool(rng, layer, f, 2)
	}
	if len(layer) > 0 || rng.IntN(2) == 0 {
		req["layer"] = layer
	}
	runtime := map[string]any{}
	if rng.IntN(3) != 0 {
		runtime["platform"] = pick(rng, platformNames())
	}
	for _, f := range []string{"piecewise_cuda_graph", "breakable_cuda_graph", "deterministic_inference", "dsa_use_mha", "two_batch_overlap"} {
		maybeBool(rng, runtime, f, 4)
	}
	if len(runtime) > 0 || rng.IntN(2) == 0 {
		req["runtime"] = runtime
	}
	b, err := json.Marshal(req)
	if err != nil {
		panic(err) // only plain values above
	}
	return b
}

// maybeBool sets m[key] to a random bool, or leaves it out, one time in
// oneIn.
func maybeBool(rng *rand.Rand, m map[string]any, key string, oneIn int) {
	if rng.IntN(oneIn) == 0 {
		return
	}
	m[key] = rng.IntN(3) == 0
}

// spread splits total over dst at random.
func spread(rng *rand.Rand, dst []int64, total int64) {
	for i := range dst {
		if i == len(dst)-1 {
			dst[i] = total
			return
		}
		part := int64(0)
		if total > 0 {
			part = rng.Int64N(total + 1)
		}
		dst[i] = part
		total -= part
	}
}

package kernels

import "fmt"

// Stats reports what one kernel call did.
type Stats struct {
	// Method is the method that ran.
	Method Method
	// ChunkLen is sglang's prefix_chunk_len (MHA_CHUNKED_KV only, else 0).
	ChunkLen int
	// PrefixChunks is sglang's num_prefix_chunks (MHA_CHUNKED_KV only, else 0).
	PrefixChunks int
	// FLOPs is FLOPs(Method, cfg, b) for the call.
	FLOPs float64
}

// Run computes method m's attention output for batch b into out ([T, Heads, VHeadDim]);
// t.QPe and t.KPe must be rotated unless m is a fused-RoPE method (see Method.PreRoped).
// Bad input returns an error naming the field and value; Run never panics on it.
func Run(m Method, cfg Config, b BatchShape, t Tensors, out []float32) error {
	_, err := RunWithStats(m, cfg, b, t, out)
	return err
}

// RunWithStats is Run that also reports the chunking and the flop count of the call.
func RunWithStats(m Method, cfg Config, b BatchShape, t Tensors, out []float32) (Stats, error) {
	if !m.Valid() {
		return Stats{}, fmt.Errorf("kernels: unknown method %q", string(m))
	}
	if err := validateInputs(cfg, b, &t, len(out), m.Sparse()); err != nil {
		return Stats{}, err
	}
	st := Stats{Method: m, FLOPs: FLOPs(m, cfg, b)}
	ix := newBatchIndex(b)
	switch m {
	case MHA:
		runMHA(cfg, b, &ix, &t, out)
	case MHANPU:
		runMHA(cfg, b, &ix, &t, out)
	case MHAOneShot:
		runMHAOneShot(cfg, b, &ix, &t, out)
	case MHAChunkedKV:
		cl, n, _, err := runMHAChunkedKV(cfg, b, &ix, &t, out)
		if err != nil {
			return Stats{}, err
		}
		st.ChunkLen, st.PrefixChunks = cl, n
	case MLA, MLANPU:
		runMLA(cfg, b, &ix, &t, out, mlaOptions{})
	case MLAFusedRopeROCm, MLAFusedRopeCPU:
		runMLA(cfg, b, &ix, &t, out, mlaOptions{fusedRope: true})
	case DSANPU, DSAMLA:
		runMLA(cfg, b, &ix, &t, out, mlaOptions{sparse: true})
	}
	return st, nil
}

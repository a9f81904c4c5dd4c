package wire

import (
	"fmt"
	"slices"
	"strings"

	"github.com/attnplug/attnplug/core"
)

// CloneRequest copies r with its own length slices: the request as it was,
// for RequestChanged after the rules. A rule reads its request and leaves
// it as it is; the server checks it when Server.CheckRequests is set, and
// the conformance suite checks a backend in its own process the same way.
func CloneRequest(r *core.Request) core.Request {
	c := *r
	c.Batch.ExtendPrefixLens = slices.Clone(r.Batch.ExtendPrefixLens)
	c.Batch.SeqLens = slices.Clone(r.Batch.SeqLens)
	return c
}

// RequestChanged returns an error wrapping ErrRequestChanged and
// core.ErrProtocol, naming what changed, when after is not before.
func RequestChanged(before, after *core.Request) error {
	var what []string
	lens := func(field string, a, b []int64) {
		if !slices.Equal(a, b) || (a == nil) != (b == nil) {
			what = append(what, fmt.Sprintf("%s %v became %v", field, shortLens(a), shortLens(b)))
		}
	}
	lens("extend_prefix_lens", before.Batch.ExtendPrefixLens, after.Batch.ExtendPrefixLens)
	lens("seq_lens", before.Batch.SeqLens, after.Batch.SeqLens)
	b, a := before, after
	if b.Backend != a.Backend {
		what = append(what, fmt.Sprintf("backend %q became %q", b.Backend, a.Backend))
	}
	if b.Layer != a.Layer {
		what = append(what, fmt.Sprintf("layer %v became %v", b.Layer, a.Layer))
	}
	if b.Batch.Mode != a.Batch.Mode || b.Batch.MaxChunkCapacity != a.Batch.MaxChunkCapacity || b.Batch.MLAPrefillCP != a.Batch.MLAPrefillCP {
		what = append(what, fmt.Sprintf("forward_mode, max_chunk_capacity, mla_prefill_cp %s, %d, %v became %s, %d, %v",
			b.Batch.Mode, b.Batch.MaxChunkCapacity, b.Batch.MLAPrefillCP, a.Batch.Mode, a.Batch.MaxChunkCapacity, a.Batch.MLAPrefillCP))
	}
	if b.Runtime != a.Runtime {
		what = append(what, fmt.Sprintf("runtime %v became %v", b.Runtime, a.Runtime))
	}
	if len(what) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w: %s", core.ErrProtocol, ErrRequestChanged, strings.Join(what, "; "))
}

// shortLens shows at most 8 lengths.
func shortLens(v []int64) string {
	if v == nil {
		return "(not known)"
	}
	if len(v) > 8 {
		return fmt.Sprintf("%v... (%d entries)", v[:8], len(v))
	}
	return fmt.Sprint(v)
}

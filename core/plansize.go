package core

import "fmt"

// The size of a plan is bounded, and so are the requests that would imply
// a larger one, so that no plan request a client types makes a planner
// build, or a host keep, a plan without end. A request past a bound is
// refused before any planning (PlanRequest.CheckSize): by the host, before
// it asks a plugin (launch.CheckRequest, which registry.PlanKernel calls),
// and by the plugin's planners, which check the same request
// (devkernels.Plan, through launch.Tensors). Its error wraps
// ErrInvalidRequest and names the field, its value and the bound. A plan
// past a bound is refused by the host's check of it (launch.Check), as
// any plan that breaks the contract is.
//
// The bounds hold every shape sglang serves with room to spare: its chunk
// capacity (get_max_chunk_capacity(), DefaultChunkCapacity) cuts a batch
// of b requests whose longest prefix is DeepSeek-V3's full context of
// 163 840 keys into ceil(163839 / (131072 / b)) chunks, 2 for one request,
// 126 for 100 requests; the largest batch within MaxChunkRanges at that
// context is 914 requests (1 146 chunks of 143 keys).
const (
	// MaxPlanLaunches bounds the launches of one plan.
	MaxPlanLaunches = 1 << 14
	// MaxPlanMetadataBytes bounds the metadata buffers of one plan, all
	// together, at 4 bytes an int32 value (32 MiB): a plan at the bound
	// still travels in one message of the plugin protocol (64 MiB).
	MaxPlanMetadataBytes = 32 << 20
	// MaxPlanWorkspaceBytes bounds the workspace of one plan (4 GiB),
	// unless its outputs are larger: a plan may always have four times the
	// bytes of its output tensors (the partial results of a split, a
	// prefix chunk's pass), so that the bound grows with the batch, which
	// MaxPlanTokens bounds, and not past it (Plan.CheckSize).
	MaxPlanWorkspaceBytes = 4 << 30
	// MaxPlanTokens bounds the query tokens of one plan request, the sum
	// of Shape.QLens: the rows of its queries and outputs, and of a sparse
	// request's schedule (a query token each).
	MaxPlanTokens = 1 << 18
	// MaxPrefixChunks bounds the prefix chunks of an MHA_CHUNKED_KV
	// request (PlanShape.PrefixChunks): each is a pass over its keys and a
	// merge, two launches.
	MaxPrefixChunks = 4096
	// MaxChunkRanges bounds the prefix chunks of an MHA_CHUNKED_KV request
	// times its batch size: each pass reads a range of keys of every
	// request, two int32 values a range in the plan's metadata (8 MiB at
	// the bound).
	MaxChunkRanges = 1 << 20
)

// DefaultChunkCapacity is sglang's get_max_chunk_capacity(): the chunk
// capacity of a PlanShape that gives none.
const DefaultChunkCapacity = 128 * 1024

// PrefixChunks returns sglang's cut of the prefixes of an MHA_CHUNKED_KV
// batch, request i's prefix being SeqLens[i] - QLens[i] keys: each chunk
// holds ChunkCapacity / batch size keys of every request (at least one;
// ChunkCapacity 0 is DefaultChunkCapacity), and there are as many chunks
// as the longest prefix needs. Chunk c of request i is its prefix keys
// [c*size, min((c+1)*size, prefix_i)). A shape without requests has no
// chunks.
func (s *PlanShape) PrefixChunks() (size, chunks int64) {
	b := int64(len(s.SeqLens))
	if b == 0 {
		return 0, 0
	}
	capacity := int64(s.ChunkCapacity)
	if capacity <= 0 {
		capacity = DefaultChunkCapacity
	}
	size = max(capacity/b, 1)
	longest := s.longestPrefix()
	chunks = longest / size
	if longest%size != 0 {
		chunks++
	}
	return size, chunks
}

// CheckSize refuses a plan request whose plan would be past the bounds of
// a plan: more than MaxPlanTokens query tokens; for MHA_CHUNKED_KV, more
// than MaxPrefixChunks prefix chunks, or more than MaxChunkRanges chunks
// times requests. The error wraps ErrInvalidRequest (a *FieldError) and
// names the field, its value and the bound. It reads the shape only, and
// takes any shape (launch.CheckRequest checks the rest of it first).
func (r *PlanRequest) CheckSize() error {
	s := &r.Shape
	var tokens int64
	for _, q := range s.QLens {
		if q > 0 {
			tokens = min(tokens+min(q, MaxPlanTokens+1), MaxPlanTokens+1) // no overflow, whatever the lengths
		}
	}
	if tokens > MaxPlanTokens {
		return NewFieldError("shape.q_lens", fmt.Sprintf("add up to more than %d query tokens, the bound of one plan (core.MaxPlanTokens); split the batch", MaxPlanTokens))
	}
	if r.Method != MHAChunkedKV || s.PrefixChunk {
		return nil // a prefix chunk's pass is one pass over the keys given
	}
	size, chunks := s.PrefixChunks()
	b := int64(len(s.SeqLens))
	capacity := fmt.Sprint(s.ChunkCapacity)
	if s.ChunkCapacity <= 0 {
		capacity += fmt.Sprintf(" (the default, %d)", DefaultChunkCapacity)
	}
	switch {
	case chunks > MaxPrefixChunks:
		return NewFieldError("shape.chunk_capacity", fmt.Sprintf("%s cuts the longest prefix, %d keys, into %d prefix chunks of %s (chunk_capacity / %s), more than the bound of %d (core.MaxPrefixChunks); ask with a larger chunk_capacity",
			capacity, s.longestPrefix(), chunks, plural(size, "key"), plural(b, "request"), MaxPrefixChunks))
	case chunks*b > MaxChunkRanges:
		return NewFieldError("shape.chunk_capacity", fmt.Sprintf("%s cuts the prefixes of %s into %d chunks of %s each, %d chunk ranges, more than the bound of %d (core.MaxChunkRanges); ask with a larger chunk_capacity or a smaller batch",
			capacity, plural(b, "request"), chunks, plural(size, "key"), chunks*b, MaxChunkRanges))
	}
	return nil
}

// longestPrefix is the longest of SeqLens[i] - QLens[i].
func (s *PlanShape) longestPrefix() int64 {
	var longest int64
	for i, n := range s.SeqLens {
		if i < len(s.QLens) {
			n -= s.QLens[i]
		}
		longest = max(longest, n)
	}
	return longest
}

// plural is n and noun, with an s unless n is 1.
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// CheckSize refuses a plan past the bounds of a plan: more than
// MaxPlanLaunches launches, more than MaxPlanMetadataBytes of metadata, a
// negative workspace or one past MaxPlanWorkspaceBytes and four times the
// bytes of the plan's output tensors. The error says which bound and by
// how much.
func (p *Plan) CheckSize() error {
	if n := len(p.Launches); n > MaxPlanLaunches {
		return fmt.Errorf("%d launches, more than the bound of %d", n, MaxPlanLaunches)
	}
	var meta int64
	for _, m := range p.Metadata {
		meta += 4 * int64(len(m.Int32s))
	}
	if meta > MaxPlanMetadataBytes {
		return fmt.Errorf("metadata of %d bytes, more than the bound of %d", meta, MaxPlanMetadataBytes)
	}
	if limit := p.WorkspaceLimit(); p.WorkspaceBytes < 0 || p.WorkspaceBytes > limit {
		return fmt.Errorf("workspace of %d bytes is outside [0, %d] (%d bytes, or four times the plan's outputs)", p.WorkspaceBytes, limit, int64(MaxPlanWorkspaceBytes))
	}
	return nil
}

// WorkspaceLimit is the most workspace p may ask for: MaxPlanWorkspaceBytes,
// or four times the bytes of its output tensors when that is more.
func (p *Plan) WorkspaceLimit() int64 {
	var outputs int64
	for _, t := range p.Tensors {
		if n := t.Bytes(); t.Output && n > 0 {
			outputs += n
		}
	}
	return max(int64(MaxPlanWorkspaceBytes), 4*outputs)
}

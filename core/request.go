package core

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Limits on one request. They bound the memory a decoder spends and keep
// every sum of lengths far from int64 overflow.
const (
	// MaxBatchSize is the most entries extend_prefix_lens or seq_lens may
	// hold: far above any serving batch, far below what would strain memory.
	MaxBatchSize = 1 << 16
	// MaxLength is the largest single prefix or sequence length accepted.
	MaxLength = 1 << 40
	// MaxBackendNameLen is the longest backend name accepted.
	MaxBackendNameLen = 256
)

// DefaultChunkedPrefixCacheThreshold is the threshold a layer uses when the
// request does not give one (sglang's default).
const DefaultChunkedPrefixCacheThreshold = 8192

// Layer holds the facts of the attention layer being dispatched.
type Layer struct {
	// ChunkedPrefixCacheThreshold is the sum of prefix lengths from which
	// chunked-prefix MHA is used; not negative (sglang compares it with a
	// sum of lengths, so a negative one would mean what 0 means).
	ChunkedPrefixCacheThreshold int64
	// DisableChunkedPrefixCache turns the chunked prefix cache off.
	DisableChunkedPrefixCache bool
	// FlashinferMLADisableRagged turns the ragged prefill off for the
	// flashinfer and flashmla names.
	FlashinferMLADisableRagged bool
	// ROCmFusedDecodeMLA selects the fused-RoPE MLA decode kernel on ROCm.
	ROCmFusedDecodeMLA bool
	// UseDSA marks a DeepSeek sparse attention layer.
	UseDSA bool
	// FusedQKVAProjWithMQA marks a layer with the fused q/kv-a projection
	// (q_lora_rank set).
	FusedQKVAProjWithMQA bool
	// IntelAMX marks a layer that runs on the Intel AMX CPU backend.
	IntelAMX bool
}

// Batch holds the facts of the forward batch.
type Batch struct {
	// Mode is the batch's forward mode; it must be valid.
	Mode ForwardMode
	// ExtendPrefixLens is, per request, the number of tokens already in the
	// KV cache; nil means not known, and its sum counts as 0.
	ExtendPrefixLens []int64
	// SeqLens is, per request, the total KV length (prefix and new tokens);
	// nil means not known, and its sum counts as 0.
	SeqLens []int64
	// MaxChunkCapacity is the batch's get_max_chunk_capacity().
	MaxChunkCapacity int64
	// MLAPrefillCP reports that MLA prefill context parallelism is active.
	MLAPrefillCP bool
}

// Runtime holds the facts sglang reads from process state.
type Runtime struct {
	// Platform is the platform the request runs on; unset means the host's.
	Platform Platform
	// PiecewiseCUDAGraph reports a piecewise CUDA graph (capture or replay).
	PiecewiseCUDAGraph bool
	// BreakableCUDAGraph reports a breakable CUDA graph.
	BreakableCUDAGraph bool
	// DeterministicInference reports a server with deterministic inference.
	DeterministicInference bool
	// DSAUseMHA is the DSA backend's per-batch prefill choice (use_mha),
	// when DSAUseMHASet says it was made.
	DSAUseMHA bool
	// TwoBatchOverlap reports a two-batch-overlap wrapper backend; the
	// choice is read from its primary, so no rule changes with it.
	TwoBatchOverlap bool
	// DSAUseMHASet reports that runtime.dsa_use_mha was given. When it was
	// not, the dsa backend makes the prefill choice itself, as sglang's DSA
	// backend does (set_dsa_prefill_impl).
	DSAUseMHASet bool
	// ComputeCapability is the CUDA compute capability of the device the
	// batch runs on, as major*10+minor (90 for sm90); 0 when not known.
	ComputeCapability int
	// KVCacheDType is the KV cache's data type, as sglang's
	// --kv-cache-dtype spells it (KVCacheDTypes); "" is "auto", the model's
	// dtype (bf16 for DeepSeek).
	KVCacheDType string
}

// String returns l as the dispatch format's "layer" object, for messages:
// chunked_prefix_cache_threshold, and each flag that is true, such as
// {"chunked_prefix_cache_threshold":8192,"use_dsa":true}.
func (l Layer) String() string {
	var o jsonObject
	o.add("chunked_prefix_cache_threshold", strconv.FormatInt(l.ChunkedPrefixCacheThreshold, 10))
	o.flag("disable_chunked_prefix_cache", l.DisableChunkedPrefixCache)
	o.flag("flashinfer_mla_disable_ragged", l.FlashinferMLADisableRagged)
	o.flag("rocm_fused_decode_mla", l.ROCmFusedDecodeMLA)
	o.flag("use_dsa", l.UseDSA)
	o.flag("fused_qkv_a_proj_with_mqa", l.FusedQKVAProjWithMQA)
	o.flag("intel_amx", l.IntelAMX)
	return o.String()
}

// String returns r as the dispatch format's "runtime" object, for
// messages: the fields a request sets (the platform when set, each flag
// that is true, dsa_use_mha when given, compute_capability and
// kv_cache_dtype when set), such as {"platform":"cuda","dsa_use_mha":false}.
// A platform this host does not know is its number.
func (r Runtime) String() string {
	var o jsonObject
	switch {
	case r.Platform == PlatformUnset:
	case r.Platform.Valid():
		o.add("platform", strconv.Quote(r.Platform.String()))
	default:
		o.add("platform", strconv.Itoa(int(r.Platform)))
	}
	o.flag("piecewise_cuda_graph", r.PiecewiseCUDAGraph)
	o.flag("breakable_cuda_graph", r.BreakableCUDAGraph)
	o.flag("deterministic_inference", r.DeterministicInference)
	if r.DSAUseMHAGiven() {
		o.add("dsa_use_mha", strconv.FormatBool(r.DSAUseMHA))
	}
	o.flag("two_batch_overlap", r.TwoBatchOverlap)
	if r.ComputeCapability != 0 {
		o.add("compute_capability", strconv.Itoa(r.ComputeCapability))
	}
	if r.KVCacheDType != "" {
		o.add("kv_cache_dtype", strconv.Quote(shortText(r.KVCacheDType)))
	}
	return o.String()
}

// jsonObject writes a one-line JSON object of members whose values are
// already JSON.
type jsonObject struct{ b strings.Builder }

func (o *jsonObject) add(key, value string) {
	if o.b.Len() > 0 {
		o.b.WriteByte(',')
	}
	o.b.WriteString(`"` + key + `":` + value)
}

func (o *jsonObject) flag(key string, v bool) {
	if v {
		o.add(key, "true")
	}
}

func (o *jsonObject) String() string { return "{" + o.b.String() + "}" }

// DSAUseMHAGiven reports that the request carries the DSA backend's
// prefill choice: DSAUseMHASet, or DSAUseMHA true (which a client older
// than DSAUseMHASet always meant as given).
func (r *Runtime) DSAUseMHAGiven() bool { return r.DSAUseMHASet || r.DSAUseMHA }

// KVCacheDTypes are the values runtime.kv_cache_dtype accepts.
func KVCacheDTypes() []string {
	return []string{"auto", "bf16", "bfloat16", "fp16", "float16", "fp8_e4m3", "fp8_e5m2", "fp4_e2m1"}
}

// MaxComputeCapability is the largest runtime.compute_capability accepted.
const MaxComputeCapability = 1000

// DenseDSADevice reports a compute capability of 90 or in [100, 110): the
// devices (H100/H200, B200/GB200) on which sglang's DSA backend may run a
// prefill as dense MHA.
func (r *Runtime) DenseDSADevice() bool {
	cc := r.ComputeCapability
	return cc == 90 || (cc >= 100 && cc < 110)
}

// KVCacheDenseDType reports a KV cache of bf16 or fp8_e4m3, the dtypes of
// the DSA backend's dense prefill; "" and "auto" are the model's bf16.
func (r *Runtime) KVCacheDenseDType() bool {
	switch r.KVCacheDType {
	case "", "auto", "bf16", "bfloat16", "fp8_e4m3":
		return true
	}
	return false
}

// Request is one dispatch question: which forward method the named backend
// runs for this layer and batch. A Request is a plain value; handlers must
// not modify it or keep its slices.
type Request struct {
	// Backend is the registry name asked for, matched exactly.
	Backend string
	// Layer holds the layer's facts.
	Layer Layer
	// Batch holds the batch's facts.
	Batch Batch
	// Runtime holds the process-state facts.
	Runtime Runtime
}

// NewRequest returns a request for backend and mode with the defaults of the
// dispatch format: a chunked-prefix threshold of 8192 and nothing else set.
func NewRequest(backend string, mode ForwardMode) Request {
	return Request{
		Backend: backend,
		Layer:   Layer{ChunkedPrefixCacheThreshold: DefaultChunkedPrefixCacheThreshold},
		Batch:   Batch{Mode: mode},
	}
}

// PrefixSum is the sum of ExtendPrefixLens, 0 when they are not known.
func (b *Batch) PrefixSum() int64 { return sum(b.ExtendPrefixLens) }

// SeqSum is the sum of SeqLens, 0 when they are not known.
func (b *Batch) SeqSum() int64 { return sum(b.SeqLens) }

// MaxSeqLen is the largest of SeqLens, 0 when they are not known.
func (b *Batch) MaxSeqLen() int64 {
	var m int64
	for _, x := range b.SeqLens {
		m = max(m, x)
	}
	return m
}

func sum(v []int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s
}

// Validate checks what a decoder cannot: the mode and platform are known,
// the lengths, max_chunk_capacity and the layer's
// chunked_prefix_cache_threshold are within limits and not negative, both
// arrays have the same length, and no prefix is longer than its sequence.
// The error wraps ErrInvalidRequest and names the field and the value.
func (r *Request) Validate() error {
	if r.Backend == "" {
		return invalid("backend", "must not be empty")
	}
	if len(r.Backend) > MaxBackendNameLen {
		return invalid("backend", fmt.Sprintf("name of %d bytes is longer than %d", len(r.Backend), MaxBackendNameLen))
	}
	if !r.Batch.Mode.Valid() {
		return invalid("forward_mode", fmt.Sprintf("unknown mode %d", uint8(r.Batch.Mode)))
	}
	if !r.Runtime.Platform.Valid() {
		return invalid("runtime.platform", fmt.Sprintf("unknown platform %d", uint8(r.Runtime.Platform)))
	}
	if cc := r.Runtime.ComputeCapability; cc < 0 || cc > MaxComputeCapability {
		return invalid("runtime.compute_capability", fmt.Sprintf("%d is out of [0, %d]", cc, MaxComputeCapability))
	}
	if dt := r.Runtime.KVCacheDType; dt != "" && !slices.Contains(KVCacheDTypes(), dt) {
		return invalid("runtime.kv_cache_dtype", fmt.Sprintf("unknown dtype %q (want one of %s)", shortText(dt), strings.Join(KVCacheDTypes(), ", ")))
	}
	if c := r.Batch.MaxChunkCapacity; c < 0 {
		return invalid("max_chunk_capacity", fmt.Sprintf("%d is negative", c))
	}
	if t := r.Layer.ChunkedPrefixCacheThreshold; t < 0 {
		return invalid("layer.chunked_prefix_cache_threshold", fmt.Sprintf("%d is negative", t))
	}
	if err := checkLens("extend_prefix_lens", r.Batch.ExtendPrefixLens); err != nil {
		return err
	}
	if err := checkLens("seq_lens", r.Batch.SeqLens); err != nil {
		return err
	}
	p, s := r.Batch.ExtendPrefixLens, r.Batch.SeqLens
	if p != nil && s != nil {
		if len(p) != len(s) {
			return invalid("extend_prefix_lens", fmt.Sprintf("has %d entries but seq_lens has %d", len(p), len(s)))
		}
		for i := range p {
			if p[i] > s[i] {
				return invalid(fmt.Sprintf("extend_prefix_lens[%d]", i), fmt.Sprintf("prefix %d is longer than seq_lens[%d] = %d", p[i], i, s[i]))
			}
		}
	}
	return nil
}

func checkLens(field string, v []int64) error {
	if len(v) > MaxBatchSize {
		return invalid(field, fmt.Sprintf("has %d entries, more than the limit of %d", len(v), MaxBatchSize))
	}
	for i, x := range v {
		if x < 0 {
			return invalid(fmt.Sprintf("%s[%d]", field, i), fmt.Sprintf("negative length %d", x))
		}
		if x > MaxLength {
			return invalid(fmt.Sprintf("%s[%d]", field, i), fmt.Sprintf("length %d is past the limit of %d", x, int64(MaxLength)))
		}
	}
	return nil
}

// shortText cuts s to 40 bytes for an error message.
func shortText(s string) string {
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}

func invalid(field, msg string) error { return &FieldError{Field: field, Msg: msg} }

// FieldError is an invalid request value: it names the field and says what
// is wrong with its value. errors.Is(err, ErrInvalidRequest) holds for it.
type FieldError struct {
	// Field is the field's path in the dispatch format, such as
	// "seq_lens[3]" or "layer.use_dsa".
	Field string
	// Msg says what is wrong, naming the value.
	Msg string
}

// Error returns "field: msg".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Is makes errors.Is(err, ErrInvalidRequest) hold.
func (e *FieldError) Is(target error) bool { return target == ErrInvalidRequest }

// NewFieldError returns a FieldError for field with the message msg.
func NewFieldError(field, msg string) error { return invalid(field, msg) }

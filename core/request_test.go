package core_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
)

func TestNewRequestDefaults(t *testing.T) {
	r := core.NewRequest("fa3", core.ModeDecode)
	want := core.Request{
		Backend: "fa3",
		Layer:   core.Layer{ChunkedPrefixCacheThreshold: 8192},
		Batch:   core.Batch{Mode: core.ModeDecode},
	}
	if fmt.Sprintf("%#v", r) != fmt.Sprintf("%#v", want) {
		t.Errorf("NewRequest: got %#v, want %#v", r, want)
	}
	if core.DefaultChunkedPrefixCacheThreshold != 8192 {
		t.Errorf("DefaultChunkedPrefixCacheThreshold: got %d, want 8192", core.DefaultChunkedPrefixCacheThreshold)
	}
}

func TestBatchSums(t *testing.T) {
	tests := []struct {
		name string
		lens []int64
		want int64
	}{
		{"nil_is_0", nil, 0},
		{"empty_is_0", []int64{}, 0},
		{"one", []int64{7}, 7},
		{"many", []int64{1, 2, 3, 4}, 10},
		{"max_batch_of_max_length_no_overflow", repeat(core.MaxLength, core.MaxBatchSize), int64(core.MaxLength) * core.MaxBatchSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := core.Batch{ExtendPrefixLens: tt.lens, SeqLens: tt.lens}
			if got := b.PrefixSum(); got != tt.want {
				t.Errorf("PrefixSum: got %d, want %d", got, tt.want)
			}
			if got := b.SeqSum(); got != tt.want {
				t.Errorf("SeqSum: got %d, want %d", got, tt.want)
			}
		})
	}
}

func repeat(v int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestRequestValidate(t *testing.T) {
	valid := func(opts ...func(*core.Request)) core.Request { return req(core.ModeExtend, opts...) }
	tests := []struct {
		name    string
		req     core.Request
		wantErr string // "" for a valid request
	}{
		{"valid_minimal", valid(), ""},
		{"valid_full", valid(prefix(0, 512), seq(1024, 2048), capacity(131072)), ""},
		{"valid_unset_platform", valid(platform(core.PlatformUnset)), ""},
		{"valid_prefix_equal_seq", valid(prefix(5), seq(5)), ""},
		{"valid_prefix_without_seq", valid(prefix(5, 6)), ""},
		{"valid_seq_without_prefix", valid(seq(5, 6)), ""},
		{"valid_empty_lens", valid(emptyLens), ""},
		{"valid_max_length", valid(prefix(core.MaxLength), seq(core.MaxLength)), ""},
		{"valid_max_batch_size", valid(func(r *core.Request) { r.Batch.SeqLens = make([]int64, core.MaxBatchSize) }), ""},
		{"valid_max_name_len", valid(func(r *core.Request) { r.Backend = strings.Repeat("a", core.MaxBackendNameLen) }), ""},
		{"empty_backend", valid(func(r *core.Request) { r.Backend = "" }), "backend: must not be empty"},
		{"backend_name_too_long", valid(func(r *core.Request) { r.Backend = strings.Repeat("a", 257) }), "backend: name of 257 bytes is longer than 256"},
		{"mode_zero", req(0), "forward_mode: unknown mode 0"},
		{"mode_past_last", req(10), "forward_mode: unknown mode 10"},
		{"platform_unknown", valid(platform(9)), "runtime.platform: unknown platform 9"},
		{"negative_prefix_names_index", valid(prefix(0, -1), seq(1, 1)), "extend_prefix_lens[1]: negative length -1"},
		{"negative_seq_names_index", valid(seq(1, 2, -3)), "seq_lens[2]: negative length -3"},
		{"prefix_over_max_length", valid(prefix(core.MaxLength + 1)), fmt.Sprintf("extend_prefix_lens[0]: length %d is past the limit of %d", int64(core.MaxLength)+1, int64(core.MaxLength))},
		{"seq_over_max_length", valid(seq(1, core.MaxLength+1)), fmt.Sprintf("seq_lens[1]: length %d is past the limit of %d", int64(core.MaxLength)+1, int64(core.MaxLength))},
		{"prefix_over_max_batch_size", valid(func(r *core.Request) { r.Batch.ExtendPrefixLens = make([]int64, core.MaxBatchSize+1) }),
			"extend_prefix_lens: has 65537 entries, more than the limit of 65536"},
		{"seq_over_max_batch_size", valid(func(r *core.Request) { r.Batch.SeqLens = make([]int64, core.MaxBatchSize+1) }),
			"seq_lens: has 65537 entries, more than the limit of 65536"},
		{"negative_capacity_names_value", valid(capacity(-1)), "max_chunk_capacity: -1 is negative"},
		{"valid_zero_capacity", valid(capacity(0)), ""},
		{"negative_threshold_names_value", valid(func(r *core.Request) { r.Layer.ChunkedPrefixCacheThreshold = -1 }), "layer.chunked_prefix_cache_threshold: -1 is negative"},
		{"valid_zero_threshold", valid(func(r *core.Request) { r.Layer.ChunkedPrefixCacheThreshold = 0 }), ""},
		{"different_lengths", valid(prefix(0, 0), seq(1, 2, 3)), "extend_prefix_lens: has 2 entries but seq_lens has 3"},
		{"different_lengths_empty_prefix", valid(func(r *core.Request) { r.Batch.ExtendPrefixLens = []int64{} }, seq(1)), "extend_prefix_lens: has 0 entries but seq_lens has 1"},
		{"prefix_longer_than_seq_names_both", valid(prefix(0, 11), seq(10, 10)), "extend_prefix_lens[1]: prefix 11 is longer than seq_lens[1] = 10"},
		{"negative_checked_before_lengths_differ", valid(prefix(-1), seq(1, 2)), "extend_prefix_lens[0]: negative length -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: got %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: got nil, want %q", tt.wantErr)
			}
			if err.Error() != tt.wantErr {
				t.Errorf("Validate: got %q, want %q", err, tt.wantErr)
			}
			if !errors.Is(err, core.ErrInvalidRequest) {
				t.Errorf("errors.Is(err, ErrInvalidRequest): got false, want true")
			}
			var fe *core.FieldError
			if !errors.As(err, &fe) || !strings.HasPrefix(tt.wantErr, fe.Field+": ") {
				t.Errorf("errors.As FieldError: got %+v, want one naming the field of %q", fe, tt.wantErr)
			}
		})
	}
}

// TestLayerRuntimeString: a layer and a runtime print as the dispatch
// format's "layer" and "runtime" objects, with the fields a request sets
// (the threshold always, a flag when true, dsa_use_mha when given), never
// as Go's structs.
func TestLayerRuntimeString(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{core.Layer{}, `{"chunked_prefix_cache_threshold":0}`},
		{core.NewRequest("fa3", core.ModeDecode).Layer, `{"chunked_prefix_cache_threshold":8192}`},
		{core.Layer{ChunkedPrefixCacheThreshold: 8, DisableChunkedPrefixCache: true, FlashinferMLADisableRagged: true, ROCmFusedDecodeMLA: true,
			UseDSA: true, FusedQKVAProjWithMQA: true, IntelAMX: true},
			`{"chunked_prefix_cache_threshold":8,"disable_chunked_prefix_cache":true,"flashinfer_mla_disable_ragged":true,"rocm_fused_decode_mla":true,` +
				`"use_dsa":true,"fused_qkv_a_proj_with_mqa":true,"intel_amx":true}`},
		{core.Runtime{}, `{}`},
		{core.Runtime{Platform: core.PlatformHIP, DSAUseMHASet: true}, `{"platform":"hip","dsa_use_mha":false}`},
		{core.Runtime{Platform: core.PlatformCUDA, PiecewiseCUDAGraph: true, BreakableCUDAGraph: true, DeterministicInference: true, DSAUseMHA: true,
			TwoBatchOverlap: true, ComputeCapability: 90, KVCacheDType: "fp8_e4m3"},
			`{"platform":"cuda","piecewise_cuda_graph":true,"breakable_cuda_graph":true,"deterministic_inference":true,"dsa_use_mha":true,` +
				`"two_batch_overlap":true,"compute_capability":90,"kv_cache_dtype":"fp8_e4m3"}`},
		{core.Runtime{Platform: 9}, `{"platform":9}`},
	} {
		if got := fmt.Sprintf("%+v", tc.v); got != tc.want {
			t.Errorf("got %s, want %s", got, tc.want)
		}
	}
}

func TestFieldError(t *testing.T) {
	err := core.NewFieldError("layer.use_dsa", "want true or false, got a string")
	if got, want := err.Error(), "layer.use_dsa: want true or false, got a string"; got != want {
		t.Errorf("Error(): got %q, want %q", got, want)
	}
	if !errors.Is(err, core.ErrInvalidRequest) {
		t.Errorf("errors.Is(err, ErrInvalidRequest): got false, want true")
	}
	if errors.Is(err, core.ErrProtocol) {
		t.Errorf("errors.Is(err, ErrProtocol): got true, want false")
	}
	wrapped := fmt.Errorf("line 3: %w", err)
	if !errors.Is(wrapped, core.ErrInvalidRequest) {
		t.Errorf("errors.Is(wrapped, ErrInvalidRequest): got false, want true")
	}
}

func TestDescriptionHandler(t *testing.T) {
	d := &core.Description{Handlers: []core.HandlerInfo{{Name: "a"}, {Name: "b", AliasOf: "a"}}}
	if h, ok := d.Handler("b"); !ok || h.AliasOf != "a" {
		t.Errorf("Handler(b): got %+v, %v, want the alias of a", h, ok)
	}
	if h, ok := d.Handler("c"); ok {
		t.Errorf("Handler(c): got %+v, true, want false", h)
	}
}

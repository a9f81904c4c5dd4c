package jsonl_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/jsonl"
)

const specExample = `{
  "backend": "fa3",
  "forward_mode": "EXTEND",
  "extend_prefix_lens": [0, 512],
  "seq_lens": [1024, 2048],
  "max_chunk_capacity": 131072,
  "mla_prefill_cp": false,
  "layer": {
    "chunked_prefix_cache_threshold": 8192,
    "disable_chunked_prefix_cache": false,
    "flashinfer_mla_disable_ragged": false,
    "rocm_fused_decode_mla": false,
    "use_dsa": false,
    "fused_qkv_a_proj_with_mqa": true,
    "intel_amx": false
  },
  "runtime": {
    "platform": "cuda",
    "piecewise_cuda_graph": false,
    "breakable_cuda_graph": false,
    "deterministic_inference": false,
    "dsa_use_mha": false,
    "two_batch_overlap": false
  }
}`

// head is a request's required fields; tests append the rest and "}".
const head = `{"backend":"fa3","forward_mode":"EXTEND"`

func with(fields string) string { return head + "," + fields + "}" }

func want(mode core.ForwardMode, opts ...func(*core.Request)) *core.Request {
	r := core.NewRequest("fa3", mode)
	for _, o := range opts {
		o(&r)
	}
	return &r
}

type decodeCase struct {
	name    string
	in      string
	want    *core.Request // nil when an error is wanted
	wantErr string
}

// decodeCases are every line the decoder is tested on: accepted, refused for
// its JSON syntax, and refused for its schema.
func decodeCases() []decodeCase {
	return append(append(acceptedDecodeCases(), syntaxDecodeCases()...), schemaDecodeCases()...)
}

// manyJSON is a JSON array of n ones.
func manyJSON(n int) string { return "[" + strings.Repeat("1,", n-1) + "1]" }

// acceptedDecodeCases are the lines the decoder accepts.
func acceptedDecodeCases() []decodeCase {
	trueAll := func(r *core.Request) {
		r.Layer = core.Layer{ChunkedPrefixCacheThreshold: 7, DisableChunkedPrefixCache: true, FlashinferMLADisableRagged: true,
			ROCmFusedDecodeMLA: true, UseDSA: true, FusedQKVAProjWithMQA: true, IntelAMX: true}
		r.Runtime = core.Runtime{Platform: core.PlatformHIP, PiecewiseCUDAGraph: true, BreakableCUDAGraph: true,
			DeterministicInference: true, DSAUseMHA: true, DSAUseMHASet: true, TwoBatchOverlap: true}
		r.Batch.MLAPrefillCP = true
	}
	backend := func(s string) func(*core.Request) { return func(r *core.Request) { r.Backend = s } }
	capacity := func(c int64) func(*core.Request) { return func(r *core.Request) { r.Batch.MaxChunkCapacity = c } }
	return []decodeCase{
		{"spec_example", specExample, want(core.ModeExtend, func(r *core.Request) {
			r.Batch = core.Batch{Mode: core.ModeExtend, ExtendPrefixLens: []int64{0, 512}, SeqLens: []int64{1024, 2048}, MaxChunkCapacity: 131072}
			r.Layer.FusedQKVAProjWithMQA = true
			r.Runtime.Platform = core.PlatformCUDA
			r.Runtime.DSAUseMHASet = true // "dsa_use_mha": false is given
		}), ""},
		{"defaults_when_absent", `{"backend":"fa3","forward_mode":"DECODE"}`, want(core.ModeDecode), ""},
		{"every_field_set", with(`"mla_prefill_cp":true,"layer":{"chunked_prefix_cache_threshold":7,"disable_chunked_prefix_cache":true,
			"flashinfer_mla_disable_ragged":true,"rocm_fused_decode_mla":true,"use_dsa":true,"fused_qkv_a_proj_with_mqa":true,"intel_amx":true},
			"runtime":{"platform":"hip","piecewise_cuda_graph":true,"breakable_cuda_graph":true,"deterministic_inference":true,"dsa_use_mha":true,"two_batch_overlap":true}`),
			want(core.ModeExtend, trueAll), ""},
		{"null_as_absent_top_level", with(`"extend_prefix_lens":null,"seq_lens":null,"max_chunk_capacity":null,"mla_prefill_cp":null,"layer":null,"runtime":null`),
			want(core.ModeExtend), ""},
		{"null_as_absent_layer", with(`"layer":{"chunked_prefix_cache_threshold":null,"disable_chunked_prefix_cache":null,"flashinfer_mla_disable_ragged":null,
			"rocm_fused_decode_mla":null,"use_dsa":null,"fused_qkv_a_proj_with_mqa":null,"intel_amx":null}`), want(core.ModeExtend), ""},
		{"null_as_absent_runtime", with(`"runtime":{"platform":null,"piecewise_cuda_graph":null,"breakable_cuda_graph":null,"deterministic_inference":null,
			"dsa_use_mha":null,"two_batch_overlap":null}`), want(core.ModeExtend), ""},
		{"empty_array_is_not_null", with(`"extend_prefix_lens":[],"seq_lens":null`),
			want(core.ModeExtend, func(r *core.Request) { r.Batch.ExtendPrefixLens = []int64{} }), ""},
		{"empty_objects", with(`"layer":{},"runtime":{}`), want(core.ModeExtend), ""},
		{"whitespace", " \t{ \"backend\" : \"fa3\" ,\n\"forward_mode\" :\"EXTEND\" , \"seq_lens\" : [ 1 , 2 ] } \r",
			want(core.ModeExtend, func(r *core.Request) { r.Batch.SeqLens = []int64{1, 2} }), ""},
		{"field_order_irrelevant", `{"runtime":{"platform":"npu"},"forward_mode":"IDLE","backend":"fa3"}`,
			want(core.ModeIdle, func(r *core.Request) { r.Runtime.Platform = core.PlatformNPU }), ""},
		{"explicit_false", with(`"mla_prefill_cp":false,"layer":{"use_dsa":false},"runtime":{"dsa_use_mha":false}`),
			want(core.ModeExtend, func(r *core.Request) { r.Runtime.DSAUseMHASet = true }), ""},
		{"dsa_prefill_facts", with(`"runtime":{"compute_capability":90,"kv_cache_dtype":"fp8_e4m3"}`),
			want(core.ModeExtend, func(r *core.Request) { r.Runtime.ComputeCapability, r.Runtime.KVCacheDType = 90, "fp8_e4m3" }), ""},
		{"dsa_prefill_facts_null", with(`"runtime":{"compute_capability":null,"kv_cache_dtype":null}`), want(core.ModeExtend), ""},
		{"compute_capability_negative", with(`"runtime":{"compute_capability":-1}`), nil, "runtime.compute_capability: -1 is out of [0, 1000] (want major*10+minor, such as 90)"},
		{"compute_capability_not_integer", with(`"runtime":{"compute_capability":"90"}`), nil, "runtime.compute_capability: want an integer, got a string"},
		{"kv_cache_dtype_unknown", with(`"runtime":{"kv_cache_dtype":"int4"}`), nil, `runtime.kv_cache_dtype: unknown dtype "int4" (want one of auto, bf16, bfloat16, fp16, float16, fp8_e4m3, fp8_e5m2, fp4_e2m1)`},
		{"kv_cache_dtype_twice", with(`"runtime":{"kv_cache_dtype":"bf16","kv_cache_dtype":"bf16"}`), nil, "runtime.kv_cache_dtype: given twice"},
		{"exponent_integer_1e3", with(`"max_chunk_capacity":1e3`), want(core.ModeExtend, capacity(1000)), ""},
		{"exponent_integer_1E+2", with(`"max_chunk_capacity":1E+2`), want(core.ModeExtend, capacity(100)), ""},
		{"fraction_integer_1024.0", with(`"max_chunk_capacity":1024.0`), want(core.ModeExtend, capacity(1024)), ""},
		{"fraction_exponent_integer_2.5e1", with(`"max_chunk_capacity":2.5e1`), want(core.ModeExtend, capacity(25)), ""},
		{"largest_float_integer", with(`"max_chunk_capacity":9007199254740991.0`), want(core.ModeExtend, capacity(1<<53-1)), ""},
		{"minus_zero", with(`"max_chunk_capacity":-0`), want(core.ModeExtend, capacity(0)), ""},
		{"max_int64", with(`"max_chunk_capacity":9223372036854775807`), want(core.ModeExtend, capacity(1<<63-1)), ""},
		{"min_int64", with(`"max_chunk_capacity":-9223372036854775808`), want(core.ModeExtend, capacity(-1<<63)), ""},
		{"negative_lens_decoded_for_validate", with(`"seq_lens":[-1]`),
			want(core.ModeExtend, func(r *core.Request) { r.Batch.SeqLens = []int64{-1} }), ""},
		{"max_batch_size_entries", with(`"seq_lens":` + manyJSON(core.MaxBatchSize)),
			want(core.ModeExtend, func(r *core.Request) { r.Batch.SeqLens = ones(core.MaxBatchSize) }), ""},
		{"string_escapes", `{"backend":"a\"\\\/\b\f\n\r\t\u00e9\u00E9\ud83d\ude00","forward_mode":"EXTEND"}`,
			want(core.ModeExtend, backend("a\"\\/\b\f\n\r\téé😀")), ""},
		{"raw_utf8", `{"backend":"é😀","forward_mode":"EXTEND"}`, want(core.ModeExtend, backend("é😀")), ""},
		{"raw_utf8_after_escape", `{"backend":"\né","forward_mode":"EXTEND"}`, want(core.ModeExtend, backend("\né")), ""},
		{"lone_high_surrogate", `{"backend":"a\ud800","forward_mode":"EXTEND"}`, want(core.ModeExtend, backend("a\uFFFD")), ""},
		{"high_surrogate_then_char_keeps_char", `{"backend":"\ud800\u0041","forward_mode":"EXTEND"}`, want(core.ModeExtend, backend("\uFFFDA")), ""},
		{"low_surrogate_then_pair", `{"backend":"\udc00\ud800\udc00","forward_mode":"EXTEND"}`, want(core.ModeExtend, backend("\uFFFD\U00010000")), ""},
		{"escaped_key", `{"backen\u0064":"fa3","forward_mode":"EXTEND"}`, want(core.ModeExtend), ""},
		{"del_char_raw", "{\"backend\":\"a\x7f\",\"forward_mode\":\"EXTEND\"}", want(core.ModeExtend, backend("a\x7f")), ""},
	}
}

// syntaxDecodeCases are the lines refused for their JSON syntax.
func syntaxDecodeCases() []decodeCase {
	deep := strings.Repeat("[", 10000)
	return []decodeCase{
		{"empty_line", ``, nil, `request: invalid JSON: unexpected end of line, want '{'`},
		{"truncated", `{"backend":"fa3","forward_mode":"EXTEND"`, nil, `request: invalid JSON: unexpected end of line, want ',' or '}'`},
		{"truncated_in_string", `{"backend":"fa`, nil, `request: invalid JSON: unexpected end of line, want '"' to end the string`},
		{"truncated_after_colon", `{"backend":`, nil, `backend: want a string, got the end of the line`},
		{"truncated_in_array", with(`"seq_lens":[1,2`)[:len(head)+16], nil, `request: invalid JSON: unexpected end of line, want ',' or ']'`},
		{"trailing_garbage", head + `}x`, nil, `request: invalid JSON at byte 42: unexpected 'x', want end of line after the request object`},
		{"two_objects", head + `}{}`, nil, `request: invalid JSON at byte 42: unexpected '{', want end of line after the request object`},
		{"garbage_byte", "\x01", nil, `request: invalid JSON at byte 1: unexpected byte 0x01, want '{'`},
		{"garbage_nul_byte_inside", with(`"seq_lens":[1]` + "\x00"), nil, `request: invalid JSON at byte 56: unexpected byte 0x00, want ',' or '}'`},
		{"trailing_comma", head + `,}`, nil, `request: invalid JSON at byte 42: unexpected '}', want a field name`},
		{"lone_comma", `{,}`, nil, `request: invalid JSON at byte 2: unexpected ',', want a field name`},
		{"missing_colon", `{"backend" "fa3"}`, nil, `request: invalid JSON at byte 12: unexpected '"', want ':'`},
		{"unquoted_key", `{backend:"fa3"}`, nil, `request: invalid JSON at byte 2: unexpected 'b', want a field name`},
		{"array_missing_comma", with(`"seq_lens":[1 2]`), nil, `request: invalid JSON at byte 56: unexpected '2', want ',' or ']'`},
		{"array_trailing_comma", with(`"seq_lens":[1,]`), nil, `seq_lens[1]: want an integer, got ']'`},
		{"truncated_true", with(`"layer":{"use_dsa":tru}`), nil, `request: invalid JSON at byte 61: unexpected 't', want true or false`},
		{"truncated_null", with(`"layer":{"use_dsa":nul}`), nil, `layer.use_dsa: want true or false, got 'n'`},
		{"nan_literal", with(`"max_chunk_capacity":NaN`), nil, `max_chunk_capacity: want an integer, got 'N'`},
		{"infinity_literal", with(`"max_chunk_capacity":Infinity`), nil, `max_chunk_capacity: want an integer, got 'I'`},
		{"minus_infinity_literal", with(`"max_chunk_capacity":-Infinity`), nil, `max_chunk_capacity: want an integer, got "-Infinity"`},
		{"nan_in_array", with(`"seq_lens":[NaN]`), nil, `seq_lens[0]: want an integer, got 'N'`},
		{"leading_zeros", with(`"max_chunk_capacity":01`), nil, `request: invalid JSON at byte 64: unexpected '1', want ',' after a number (leading zeros are not JSON)`},
		{"leading_zeros_negative", with(`"max_chunk_capacity":-007`), nil, `request: invalid JSON at byte 65: unexpected '0', want ',' after a number (leading zeros are not JSON)`},
		{"leading_zeros_in_array", with(`"seq_lens":[00]`), nil, `request: invalid JSON at byte 55: unexpected '0', want ',' after a number (leading zeros are not JSON)`},
		{"leading_plus", with(`"max_chunk_capacity":+1`), nil, `max_chunk_capacity: want an integer, got '+'`},
		{"leading_dot", with(`"max_chunk_capacity":.5`), nil, `max_chunk_capacity: want an integer, got '.'`},
		{"dot_without_digits", with(`"max_chunk_capacity":1.`), nil, `request: invalid JSON at byte 65: unexpected '}', want a digit after '.'`},
		{"exponent_without_digits", with(`"max_chunk_capacity":1e`), nil, `request: invalid JSON at byte 65: unexpected '}', want a digit in the exponent`},
		{"minus_alone", with(`"max_chunk_capacity":-`), nil, `max_chunk_capacity: want an integer, got "-"`},
		{"invalid_escape", `{"backend":"\x","forward_mode":"EXTEND"}`, nil, `request: invalid JSON at byte 14: unexpected 'x', want an escape character`},
		{"short_unicode_escape", `{"backend":"\u12","forward_mode":"EXTEND"}`, nil, `request: invalid JSON at byte 15: unexpected '1', want four hex digits after \u`},
		{"non_hex_unicode_escape", `{"backend":"\u12G4","forward_mode":"EXTEND"}`, nil, `request: invalid JSON at byte 15: unexpected '1', want four hex digits after \u`},
		{"bad_second_surrogate_escape", `{"backend":"\ud800\uZZZZ","forward_mode":"EXTEND"}`, nil, `request: invalid JSON at byte 21: unexpected 'Z', want four hex digits after \u`},
		{"escape_at_end_of_line", `{"backend":"\`, nil, `request: invalid JSON: unexpected end of line, want '"' to end the string`},
		{"raw_control_character", "{\"backend\":\"a\x01\",\"forward_mode\":\"EXTEND\"}", nil,
			`request: invalid JSON at byte 14: unexpected byte 0x01, want a string character (control characters must be escaped)`},
		{"raw_tab", "{\"backend\":\"a\tb\",\"forward_mode\":\"EXTEND\"}", nil,
			`request: invalid JSON at byte 14: unexpected byte 0x09, want a string character (control characters must be escaped)`},
		{"raw_control_after_escape", "{\"backend\":\"\\n\x1f\",\"forward_mode\":\"EXTEND\"}", nil,
			`request: invalid JSON at byte 15: unexpected byte 0x1f, want a string character (control characters must be escaped)`},
		{"invalid_utf8", "{\"backend\":\"a\xff\",\"forward_mode\":\"EXTEND\"}", nil, `backend: invalid UTF-8 at byte 14`},
		{"invalid_utf8_after_escape", "{\"backend\":\"\\t\xc3(\",\"forward_mode\":\"EXTEND\"}", nil, `backend: invalid UTF-8 at byte 15`},
		{"invalid_utf8_key", "{\"\xed\xa0\x80\":1}", nil, `request: invalid JSON at byte 3: unexpected byte 0xed, want UTF-8 text`},
		{"deep_nesting_top_level", deep, nil, `request: invalid JSON at byte 1: unexpected '[', want '{'`},
		{"deep_nesting_seq_lens", with(`"seq_lens":` + deep), nil, `seq_lens[0]: want an integer, got an array`},
		{"deep_nesting_layer", with(`"layer":` + deep), nil, `layer: want an object, got an array`},
		{"deep_nesting_unknown_field", with(`"x":` + deep), nil, `"x": unknown field`},
	}
}

// schemaDecodeCases are the lines refused for their schema.
func schemaDecodeCases() []decodeCase {
	return []decodeCase{
		{"unknown_top_level_field", with(`"seq_len":[1]`), nil, `"seq_len": unknown field`},
		{"unknown_field_quoted", with(`"a\"b":1`), nil, `"a\"b": unknown field`},
		{"unknown_layer_field", with(`"layer":{"use_nsa":true}`), nil, `layer."use_nsa": unknown field`},
		{"unknown_runtime_field", with(`"runtime":{"platform":"cuda","cuda_graph":true}`), nil, `runtime."cuda_graph": unknown field`},
		{"layer_field_at_top_level", with(`"use_dsa":true`), nil, `"use_dsa": unknown field`},
		{"duplicate_backend", with(`"backend":"flashinfer"`), nil, `backend: given twice`},
		{"duplicate_forward_mode", with(`"forward_mode":"EXTEND"`), nil, `forward_mode: given twice`},
		{"duplicate_seq_lens", with(`"seq_lens":[1],"seq_lens":[2]`), nil, `seq_lens: given twice`},
		{"duplicate_layer", with(`"layer":null,"layer":{}`), nil, `layer: given twice`},
		{"duplicate_layer_field", with(`"layer":{"use_dsa":true,"use_dsa":false}`), nil, `layer.use_dsa: given twice`},
		{"duplicate_threshold", with(`"layer":{"chunked_prefix_cache_threshold":1,"chunked_prefix_cache_threshold":1}`), nil, `layer.chunked_prefix_cache_threshold: given twice`},
		{"duplicate_platform", with(`"runtime":{"platform":"cuda","platform":"hip"}`), nil, `runtime.platform: given twice`},
		{"duplicate_runtime_field", with(`"runtime":{"dsa_use_mha":true,"dsa_use_mha":true}`), nil, `runtime.dsa_use_mha: given twice`},
		{"string_for_seq_lens", with(`"seq_lens":"1,2"`), nil, `seq_lens: want an array of integers, got a string`},
		{"object_for_seq_lens", with(`"extend_prefix_lens":{}`), nil, `extend_prefix_lens: want an array of integers, got an object`},
		{"string_in_seq_lens", with(`"seq_lens":[1,"2"]`), nil, `seq_lens[1]: want an integer, got a string`},
		{"null_in_seq_lens", with(`"seq_lens":[null]`), nil, `seq_lens[0]: want an integer, got null`},
		{"array_for_backend", `{"backend":["fa3"],"forward_mode":"EXTEND"}`, nil, `backend: want a string, got an array`},
		{"number_for_backend", `{"backend":3,"forward_mode":"EXTEND"}`, nil, `backend: want a string, got a number`},
		{"number_for_bool", with(`"mla_prefill_cp":1`), nil, `mla_prefill_cp: want true or false, got a number`},
		{"string_for_bool", with(`"layer":{"use_dsa":"true"}`), nil, `layer.use_dsa: want true or false, got a string`},
		{"bool_for_integer", with(`"layer":{"chunked_prefix_cache_threshold":true}`), nil, `layer.chunked_prefix_cache_threshold: want an integer, got a boolean`},
		{"string_for_integer", with(`"max_chunk_capacity":"1"`), nil, `max_chunk_capacity: want an integer, got a string`},
		{"object_for_forward_mode", `{"backend":"fa3","forward_mode":{}}`, nil, `forward_mode: want a string, got an object`},
		{"array_for_layer", with(`"layer":[]`), nil, `layer: want an object, got an array`},
		{"string_for_runtime", with(`"runtime":"cuda"`), nil, `runtime: want an object, got a string`},
		{"number_for_platform", with(`"runtime":{"platform":1}`), nil, `runtime.platform: want a string, got a number`},
		{"unknown_forward_mode", `{"backend":"fa3","forward_mode":"PREFILL"}`, nil,
			`forward_mode: unknown mode "PREFILL" (want one of EXTEND, DECODE, MIXED, IDLE, TARGET_VERIFY, DRAFT_EXTEND_V2, PREBUILT, SPLIT_PREFILL, DLLM_EXTEND)`},
		{"lower_case_forward_mode", `{"backend":"fa3","forward_mode":"extend"}`, nil,
			`forward_mode: unknown mode "extend" (want one of EXTEND, DECODE, MIXED, IDLE, TARGET_VERIFY, DRAFT_EXTEND_V2, PREBUILT, SPLIT_PREFILL, DLLM_EXTEND)`},
		{"empty_platform", with(`"runtime":{"platform":""}`), nil, `runtime.platform: unknown platform "" (want one of cuda, hip, npu, xpu, cpu)`},
		{"unknown_platform", with(`"runtime":{"platform":"rocm"}`), nil, `runtime.platform: unknown platform "rocm" (want one of cuda, hip, npu, xpu, cpu)`},
		{"integer_past_int64", with(`"max_chunk_capacity":9223372036854775808`), nil, `max_chunk_capacity: 9223372036854775808 is out of the int64 range`},
		{"integer_below_int64", with(`"max_chunk_capacity":-9223372036854775809`), nil, `max_chunk_capacity: -9223372036854775809 is out of the int64 range`},
		{"integer_past_int64_in_array", with(`"seq_lens":[1,9223372036854775808]`), nil, `seq_lens[1]: 9223372036854775808 is out of the int64 range`},
		{"long_number_shortened", with(`"max_chunk_capacity":` + strings.Repeat("9", 50)), nil,
			`max_chunk_capacity: ` + strings.Repeat("9", 37) + `... is out of the int64 range`},
		{"fraction_not_integer", with(`"max_chunk_capacity":1.5`), nil, `max_chunk_capacity: 1.5 is not an integer`},
		{"fraction_not_integer_in_array", with(`"seq_lens":[1.5]`), nil, `seq_lens[0]: 1.5 is not an integer`},
		{"negative_exponent_not_integer", with(`"layer":{"chunked_prefix_cache_threshold":1e-3}`), nil, `layer.chunked_prefix_cache_threshold: 1e-3 is not an integer`},
		{"exponent_overflow", with(`"max_chunk_capacity":1e400`), nil, `max_chunk_capacity: 1e400 is out of the int64 range`},
		{"exponent_past_int64", with(`"max_chunk_capacity":1e20`), nil, `max_chunk_capacity: 1e20 is out of the int64 range`},
		{"float_past_int64", with(`"max_chunk_capacity":9223372036854775808.0`), nil, `max_chunk_capacity: 9223372036854775808.0 is out of the int64 range`},
		{"tiny_exponent_is_not_zero", with(`"max_chunk_capacity":1e-400`), nil, `max_chunk_capacity: 1e-400 is not an integer`},
		{"fraction_past_float_precision", with(`"max_chunk_capacity":1.00000000000000001`), nil, `max_chunk_capacity: 1.00000000000000001 is not an integer`},
		{"seq_lens_past_max_batch_size", with(`"seq_lens":` + manyJSON(70000)), nil, `seq_lens: has more than 65536 entries`},
		{"prefix_lens_past_max_batch_size", with(`"extend_prefix_lens":` + manyJSON(core.MaxBatchSize+1)), nil, `extend_prefix_lens: has more than 65536 entries`},
		{"backend_missing", `{"forward_mode":"EXTEND"}`, nil, `backend: required field missing`},
		{"backend_null_is_missing", `{"backend":null,"forward_mode":"EXTEND"}`, nil, `backend: required field missing`},
		{"backend_empty", `{"backend":"","forward_mode":"EXTEND"}`, nil, `backend: must not be empty`},
		{"backend_too_long", `{"backend":"` + strings.Repeat("a", 257) + `","forward_mode":"EXTEND"}`, nil, `backend: name of 257 bytes is longer than 256`},
		{"forward_mode_missing", `{"backend":"fa3"}`, nil, `forward_mode: required field missing`},
		{"forward_mode_null_is_missing", `{"backend":"fa3","forward_mode":null}`, nil, `forward_mode: required field missing`},
		{"empty_object", `{}`, nil, `backend: required field missing`},
	}
}

func ones(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

func TestDecodeRequest(t *testing.T) {
	for _, tt := range decodeCases() {
		t.Run(tt.name, func(t *testing.T) {
			var got core.Request
			err := jsonl.DecodeRequest([]byte(tt.in), &got)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("DecodeRequest: got %+v, nil, want error %q", got, tt.wantErr)
				}
				if err.Error() != tt.wantErr {
					t.Errorf("DecodeRequest error:\n got %q\nwant %q", err, tt.wantErr)
				}
				if !errors.Is(err, core.ErrInvalidRequest) {
					t.Errorf("errors.Is(err, ErrInvalidRequest): got false, want true")
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeRequest: got error %q, want %+v", err, *tt.want)
			}
			if !reflect.DeepEqual(got, *tt.want) {
				t.Errorf("DecodeRequest:\n got %#v\nwant %#v", got, *tt.want)
			}
		})
	}
}

// TestDecodeRequestReuse checks that the request's slices are reused and
// that nothing of an earlier line survives into a later one.
func TestDecodeRequestReuse(t *testing.T) {
	var r core.Request
	steps := []struct {
		name       string
		in         string
		wantPrefix []int64
		wantSeq    []int64
		wantErr    bool
	}{
		{"long_lists", with(`"extend_prefix_lens":[1,2,3,4],"seq_lens":[5,6,7,8],"max_chunk_capacity":9,"layer":{"use_dsa":true},"runtime":{"platform":"hip"}`),
			[]int64{1, 2, 3, 4}, []int64{5, 6, 7, 8}, false},
		{"shorter_lists", with(`"extend_prefix_lens":[10],"seq_lens":[20]`), []int64{10}, []int64{20}, false},
		{"absent_lists_are_nil", head + `}`, nil, nil, false},
		{"lists_again", with(`"extend_prefix_lens":[1,1],"seq_lens":[2,2]`), []int64{1, 1}, []int64{2, 2}, false},
		{"empty_lists", with(`"extend_prefix_lens":[],"seq_lens":[]`), []int64{}, []int64{}, false},
		{"error_midway", with(`"seq_lens":[1,2,"x"]`), nil, nil, true},
		{"after_error", with(`"seq_lens":[3]`), nil, []int64{3}, false},
	}
	for _, s := range steps {
		err := jsonl.DecodeRequest([]byte(s.in), &r)
		if (err != nil) != s.wantErr {
			t.Fatalf("%s: got error %v, want error %v", s.name, err, s.wantErr)
		}
		if s.wantErr {
			continue
		}
		if !reflect.DeepEqual(r.Batch.ExtendPrefixLens, s.wantPrefix) || !reflect.DeepEqual(r.Batch.SeqLens, s.wantSeq) {
			t.Errorf("%s: got lens %#v %#v, want %#v %#v", s.name, r.Batch.ExtendPrefixLens, r.Batch.SeqLens, s.wantPrefix, s.wantSeq)
		}
		if s.name != "long_lists" {
			if r.Batch.MaxChunkCapacity != 0 || r.Layer.UseDSA || r.Runtime.Platform != core.PlatformUnset {
				t.Errorf("%s: got %+v, want the earlier line's facts gone", s.name, r)
			}
		}
	}
	// The slices of a line are reused by the next one.
	if err := jsonl.DecodeRequest([]byte(with(`"seq_lens":[1,2,3,4,5,6,7,8]`)), &r); err != nil {
		t.Fatal(err)
	}
	first := &r.Batch.SeqLens[0]
	if err := jsonl.DecodeRequest([]byte(with(`"seq_lens":[9]`)), &r); err != nil {
		t.Fatal(err)
	}
	if &r.Batch.SeqLens[0] != first {
		t.Errorf("seq_lens: got a new array, want the earlier one reused")
	}
}

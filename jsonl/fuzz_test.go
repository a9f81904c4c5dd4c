package jsonl_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/jsonl"
)

// encodeRequest is a test-only encoder of the dispatch format, written with
// encoding/json, independent of the decoder under test.
func encodeRequest(r *core.Request) ([]byte, error) {
	type layer struct {
		Threshold                  int64 `json:"chunked_prefix_cache_threshold"`
		DisableChunkedPrefixCache  bool  `json:"disable_chunked_prefix_cache"`
		FlashinferMLADisableRagged bool  `json:"flashinfer_mla_disable_ragged"`
		ROCmFusedDecodeMLA         bool  `json:"rocm_fused_decode_mla"`
		UseDSA                     bool  `json:"use_dsa"`
		FusedQKVAProjWithMQA       bool  `json:"fused_qkv_a_proj_with_mqa"`
		IntelAMX                   bool  `json:"intel_amx"`
	}
	type runtime struct {
		Platform               string `json:"platform,omitempty"`
		PiecewiseCUDAGraph     bool   `json:"piecewise_cuda_graph"`
		BreakableCUDAGraph     bool   `json:"breakable_cuda_graph"`
		DeterministicInference bool   `json:"deterministic_inference"`
		DSAUseMHA              *bool  `json:"dsa_use_mha,omitempty"` // absent unless given
		TwoBatchOverlap        bool   `json:"two_batch_overlap"`
		ComputeCapability      int    `json:"compute_capability"`
		KVCacheDType           string `json:"kv_cache_dtype,omitempty"`
	}
	type request struct {
		Backend          string  `json:"backend"`
		ForwardMode      string  `json:"forward_mode"`
		ExtendPrefixLens []int64 `json:"extend_prefix_lens"` // nil is null
		SeqLens          []int64 `json:"seq_lens"`
		MaxChunkCapacity int64   `json:"max_chunk_capacity"`
		MLAPrefillCP     bool    `json:"mla_prefill_cp"`
		Layer            layer   `json:"layer"`
		Runtime          runtime `json:"runtime"`
	}
	l, rt := r.Layer, r.Runtime
	var useMHA *bool
	if rt.DSAUseMHASet {
		useMHA = &rt.DSAUseMHA
	}
	return json.Marshal(request{
		Backend: r.Backend, ForwardMode: r.Batch.Mode.String(),
		ExtendPrefixLens: r.Batch.ExtendPrefixLens, SeqLens: r.Batch.SeqLens,
		MaxChunkCapacity: r.Batch.MaxChunkCapacity, MLAPrefillCP: r.Batch.MLAPrefillCP,
		Layer: layer{l.ChunkedPrefixCacheThreshold, l.DisableChunkedPrefixCache, l.FlashinferMLADisableRagged,
			l.ROCmFusedDecodeMLA, l.UseDSA, l.FusedQKVAProjWithMQA, l.IntelAMX},
		Runtime: runtime{rt.Platform.String(), rt.PiecewiseCUDAGraph, rt.BreakableCUDAGraph,
			rt.DeterministicInference, useMHA, rt.TwoBatchOverlap, rt.ComputeCapability, rt.KVCacheDType},
	})
}

func FuzzDecodeRequest(f *testing.F) {
	for _, tt := range decodeCases() {
		if len(tt.in) < 4096 {
			f.Add([]byte(tt.in))
		}
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var r core.Request
		err := jsonl.DecodeRequest(line, &r)
		if err != nil {
			if !errors.Is(err, core.ErrInvalidRequest) {
				t.Fatalf("DecodeRequest(%q): error %v does not wrap ErrInvalidRequest", line, err)
			}
			return
		}
		if r.Backend == "" || !r.Batch.Mode.Valid() || !r.Runtime.Platform.Valid() {
			t.Fatalf("DecodeRequest(%q): accepted %+v without a backend, mode or platform", line, r)
		}
		if err := r.Validate(); err != nil && !errors.Is(err, core.ErrInvalidRequest) {
			t.Fatalf("Validate of %+v: error %v does not wrap ErrInvalidRequest", r, err)
		}
		enc, err := encodeRequest(&r)
		if err != nil {
			t.Fatalf("encoding %+v: %v", r, err)
		}
		var again core.Request
		if err := jsonl.DecodeRequest(enc, &again); err != nil {
			t.Fatalf("decoding %q (the encoding of %q) again: %v", enc, line, err)
		}
		if !reflect.DeepEqual(r, again) {
			t.Fatalf("round trip of %q through %q:\n got %#v\nwant %#v", line, enc, again, r)
		}
	})
}

func BenchmarkDecodeRequest(b *testing.B) {
	line := []byte(specExample)
	var r core.Request
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if err := jsonl.DecodeRequest(line, &r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendAnswer(b *testing.B) {
	a := core.Answer{Method: core.MHAOneShot, Handler: "fa3", Plugin: "fa3", Fallback: "plugin crashed"}
	var dst []byte
	b.ReportAllocs()
	for b.Loop() {
		dst = jsonl.AppendAnswer(dst[:0], a)
	}
}

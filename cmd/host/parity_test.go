package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/detect"
	"github.com/attnplug/attnplug/internal/reference"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
)

// parityLines are the requests of the parity test: the example,
// the same without a layer and with an empty one, dsa_use_mha given false,
// and generated requests, whose fields are absent at random.
func parityLines(n int) []string {
	lines := []string{
		`{"backend":"flashinfer","forward_mode":"EXTEND","extend_prefix_lens":[100],"seq_lens":[200]}`,
		`{"backend":"flashinfer","forward_mode":"EXTEND","extend_prefix_lens":[100],"seq_lens":[200],"layer":{}}`,
		`{"backend":"fa3","forward_mode":"EXTEND","extend_prefix_lens":[9000],"seq_lens":[9100],"max_chunk_capacity":131072}`,
		`{"backend":"fa3","forward_mode":"EXTEND","extend_prefix_lens":[9000],"seq_lens":[9100],"layer":{"chunked_prefix_cache_threshold":0}}`,
		`{"backend":"dsa","forward_mode":"EXTEND","extend_prefix_lens":[0],"seq_lens":[100],"layer":{"use_dsa":true},"runtime":{"dsa_use_mha":false,"compute_capability":90}}`,
		`{"backend":"dsa","forward_mode":"EXTEND","extend_prefix_lens":[0],"seq_lens":[100],"layer":{"use_dsa":true},"runtime":{"compute_capability":90}}`,
		`{"backend":"aiter","forward_mode":"DECODE","extend_prefix_lens":null}`,
	}
	rng := rand.New(rand.NewPCG(10, 3))
	for len(lines) < n {
		lines = append(lines, string(reference.Generate(rng)))
	}
	return lines
}

// protoFromJSON builds the gRPC request of a JSON line field by field,
// setting exactly the fields the line gives, as a client in another
// language does: absent stays absent.
func protoFromJSON(t *testing.T, line string) *dispatchv1.Request {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	num := func(v any) int64 {
		n, err := v.(json.Number).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	lens := func(v any) []int64 {
		out := []int64{}
		for _, x := range v.([]any) {
			out = append(out, num(x))
		}
		return out
	}
	out := &dispatchv1.Request{Backend: m["backend"].(string), Batch: &dispatchv1.Batch{}}
	mode, err := core.ParseForwardMode(m["forward_mode"].(string))
	if err != nil {
		t.Fatal(err)
	}
	out.Batch.ForwardMode = dispatchv1.ForwardMode(mode)
	if v, ok := m["extend_prefix_lens"]; ok && v != nil {
		out.Batch.ExtendPrefixLens, out.Batch.ExtendPrefixLensKnown = lens(v), true
	}
	if v, ok := m["seq_lens"]; ok && v != nil {
		out.Batch.SeqLens, out.Batch.SeqLensKnown = lens(v), true
	}
	if v, ok := m["max_chunk_capacity"]; ok {
		out.Batch.MaxChunkCapacity = num(v)
	}
	if v, ok := m["mla_prefill_cp"]; ok {
		out.Batch.MlaPrefillCp = v.(bool)
	}
	if l, ok := m["layer"].(map[string]any); ok {
		out.Layer = &dispatchv1.Layer{}
		for k, v := range l {
			switch k {
			case "chunked_prefix_cache_threshold":
				out.Layer.ChunkedPrefixCacheThreshold = proto.Int64(num(v))
			case "disable_chunked_prefix_cache":
				out.Layer.DisableChunkedPrefixCache = v.(bool)
			case "flashinfer_mla_disable_ragged":
				out.Layer.FlashinferMlaDisableRagged = v.(bool)
			case "rocm_fused_decode_mla":
				out.Layer.RocmFusedDecodeMla = v.(bool)
			case "use_dsa":
				out.Layer.UseDsa = v.(bool)
			case "fused_qkv_a_proj_with_mqa":
				out.Layer.FusedQkvAProjWithMqa = v.(bool)
			case "intel_amx":
				out.Layer.IntelAmx = v.(bool)
			default:
				t.Fatalf("layer.%s: not mapped", k)
			}
		}
	}
	if rt, ok := m["runtime"].(map[string]any); ok {
		out.Runtime = &dispatchv1.Runtime{}
		for k, v := range rt {
			switch k {
			case "platform":
				p, err := core.ParsePlatform(v.(string))
				if err != nil {
					t.Fatal(err)
				}
				out.Runtime.Platform = dispatchv1.Platform(p)
			case "piecewise_cuda_graph":
				out.Runtime.PiecewiseCudaGraph = v.(bool)
			case "breakable_cuda_graph":
				out.Runtime.BreakableCudaGraph = v.(bool)
			case "deterministic_inference":
				out.Runtime.DeterministicInference = v.(bool)
			case "dsa_use_mha":
				out.Runtime.DsaUseMha = proto.Bool(v.(bool))
			case "two_batch_overlap":
				out.Runtime.TwoBatchOverlap = v.(bool)
			case "compute_capability":
				out.Runtime.ComputeCapability = int32(num(v))
			default:
				t.Fatalf("runtime.%s: not mapped", k)
			}
		}
	}
	return out
}

// coreFromProto is the Go API's request for a line: core.NewRequest's
// defaults, then the fields the line gives (read back from protoFromJSON's
// message, which holds exactly those).
func coreFromProto(in *dispatchv1.Request) core.Request {
	r := core.NewRequest(in.GetBackend(), core.ForwardMode(in.GetBatch().GetForwardMode()))
	b := in.GetBatch()
	if b.GetExtendPrefixLensKnown() {
		r.Batch.ExtendPrefixLens = append([]int64{}, b.GetExtendPrefixLens()...)
	}
	if b.GetSeqLensKnown() {
		r.Batch.SeqLens = append([]int64{}, b.GetSeqLens()...)
	}
	r.Batch.MaxChunkCapacity, r.Batch.MLAPrefillCP = b.GetMaxChunkCapacity(), b.GetMlaPrefillCp()
	if l := in.GetLayer(); l != nil {
		if l.ChunkedPrefixCacheThreshold != nil {
			r.Layer.ChunkedPrefixCacheThreshold = *l.ChunkedPrefixCacheThreshold
		}
		r.Layer.DisableChunkedPrefixCache, r.Layer.FlashinferMLADisableRagged = l.GetDisableChunkedPrefixCache(), l.GetFlashinferMlaDisableRagged()
		r.Layer.ROCmFusedDecodeMLA, r.Layer.UseDSA = l.GetRocmFusedDecodeMla(), l.GetUseDsa()
		r.Layer.FusedQKVAProjWithMQA, r.Layer.IntelAMX = l.GetFusedQkvAProjWithMqa(), l.GetIntelAmx()
	}
	if rt := in.GetRuntime(); rt != nil {
		r.Runtime.Platform = core.Platform(rt.GetPlatform())
		r.Runtime.PiecewiseCUDAGraph, r.Runtime.BreakableCUDAGraph = rt.GetPiecewiseCudaGraph(), rt.GetBreakableCudaGraph()
		r.Runtime.DeterministicInference, r.Runtime.TwoBatchOverlap = rt.GetDeterministicInference(), rt.GetTwoBatchOverlap()
		r.Runtime.ComputeCapability = int(rt.GetComputeCapability())
		if rt.DsaUseMha != nil {
			r.Runtime.DSAUseMHA, r.Runtime.DSAUseMHASet = *rt.DsaUseMha, true
		}
	}
	return r
}

// sameAnswer is what the parity test compares: the method, who decided,
// and the reason of a fallback.
func sameAnswer(method, handler, plugin, fallback, errText string) string {
	reason, _, _ := strings.Cut(fallback, ":")
	return fmt.Sprintf("%s %s/%s %s %s", strings.TrimPrefix(method, "METHOD_"), handler, plugin, reason, errText)
}

// TestOneRequestOneAnswerOnEveryAPI sends the same requests, absent fields
// included, through every entry point: attnplug dispatch (JSON), dispatch
// --connect to a real attnplug serve, raw gRPC (Dispatch and
// DispatchBatch) with messages that set only the fields each line gives,
// and the Go API (registry.Registry.Dispatch): every answer must be the
// same.
func TestOneRequestOneAnswerOnEveryAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("long: starts a server and sends the requests through five entry points (make test runs it)")
	}
	lines := parityLines(3000)
	stdin := strings.Join(lines, "\n") + "\n"
	s := startServer(t, bins, nil)
	ctx := testContext(t)

	collect := func(what, out string) []string {
		t.Helper()
		as := parseAnswers(t, out)
		if len(as) != len(lines) {
			t.Fatalf("%s: %d answers for %d lines", what, len(as), len(lines))
		}
		got := make([]string, len(as))
		for i, a := range as {
			got[i] = sameAnswer(a.Method, a.Handler, a.Plugin, a.Fallback, a.Error)
		}
		return got
	}
	res := host(t, bins, stdin, "dispatch", "--plugin-dir", bins.PluginDir)
	viaJSON := collect("dispatch", res.stdout)
	res = host(t, bins, stdin, "dispatch", "--connect", "unix://"+s.socket)
	viaConnect := collect("dispatch --connect", res.stdout)

	client := dispatchv1.NewDispatcherClient(s.conn)
	reqs := make([]*dispatchv1.Request, len(lines))
	for i, line := range lines {
		reqs[i] = protoFromJSON(t, line)
	}
	batch, err := client.DispatchBatch(ctx, &dispatchv1.DispatchBatchRequest{Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	viaBatch := make([]string, len(lines))
	for i, a := range batch.GetAnswers() {
		viaBatch[i] = sameAnswer(a.GetMethod().String(), a.GetHandler(), a.GetPlugin(), a.GetFallback(), a.GetError())
	}
	viaRPC := make([]string, len(lines))
	for i := range lines {
		if i%10 != 0 && i >= 10 { // one in ten, and every hand-written line
			viaRPC[i] = viaBatch[i]
			continue
		}
		resp, err := client.Dispatch(ctx, &dispatchv1.DispatchRequest{Request: reqs[i]})
		if err != nil {
			t.Fatal(err)
		}
		a := resp.GetAnswer()
		viaRPC[i] = sameAnswer(a.GetMethod().String(), a.GetHandler(), a.GetPlugin(), a.GetFallback(), a.GetError())
	}

	reg, err := registry.New(ctx, registry.Config{
		PluginDirs: []string{bins.PluginDir}, Platform: detect.FilePlatform(ctx, "/"),
		Logger: hclog.New(&hclog.LoggerOptions{Output: &bytes.Buffer{}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	viaGo := make([]string, len(lines))
	for i := range lines {
		r := coreFromProto(reqs[i])
		a, err := reg.Dispatch(ctx, &r)
		errText := ""
		if err != nil {
			errText = err.Error()
		}
		viaGo[i] = sameAnswer(a.Method.String(), a.Handler, a.Plugin, a.Fallback, errText)
	}

	differ := 0
	for i, line := range lines {
		want := viaJSON[i]
		for _, got := range []struct{ api, answer string }{{"dispatch --connect", viaConnect[i]}, {"gRPC DispatchBatch", viaBatch[i]}, {"gRPC Dispatch", viaRPC[i]}, {"Go API", viaGo[i]}} {
			if got.answer != want {
				if differ++; differ <= 10 {
					t.Errorf("line %d %s:\n  attnplug dispatch: %s\n  %s: %s", i+1, line, want, got.api, got.answer)
				}
			}
		}
	}
	if differ > 0 {
		t.Errorf("%d answers differ from attnplug dispatch's", differ)
	}
	if strings.Fields(viaJSON[0])[0] != "MLA" || strings.Fields(viaJSON[3])[0] != "MHA_CHUNKED_KV" {
		t.Errorf("the issue's example: %s; threshold 0 given: %s", viaJSON[0], viaJSON[3])
	}
}

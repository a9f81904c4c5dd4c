package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/kernelrun"
	"github.com/attnplug/attnplug/kernels"
	"github.com/attnplug/attnplug/shm"
)

// TestRunCommand runs attnplug run, the binary, on random and inline
// tensors, a bad line among them.
func TestRunCommand(t *testing.T) {
	cfg := kernels.Config{Heads: 1, KVLoraRank: 4, QKNopeHeadDim: 2, QKRopeHeadDim: 2, VHeadDim: 2, SoftmaxScale: 0.5, RopeBase: 10000, ChunkCapacity: 8}
	b := kernels.BatchShape{SeqLens: []int{3}, PrefixLens: []int{0}}
	raw, err := kernels.RandomTensors(rand.New(rand.NewPCG(1, 1)), cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	inline, _ := json.Marshal(map[string]any{
		"heads": 1, "kv_lora_rank": 4, "qk_nope_head_dim": 2, "qk_rope_head_dim": 2, "v_head_dim": 2, "softmax_scale": 0.5,
		"q_nope": raw.QNope, "q_pe": raw.QPe, "c_kv": raw.CKV, "k_pe": raw.KPe, "w_kc": raw.WKC, "w_vc": raw.WVC,
	})
	in := strings.Join([]string{
		`{"backend":"fa3","forward_mode":"EXTEND","extend_prefix_lens":[0,0],"seq_lens":[16,24],"max_chunk_capacity":131072}`,
		`{"backend":"dsa","forward_mode":"DECODE","seq_lens":[30]}`,
		`{"backend":"fa3","forward_mode":"EXTEND","seq_lens":[3],"max_chunk_capacity":8,"tensors":` + string(inline) + `}`,
		`{"backend":"fa3","forward_mode":"DECODE"}`,
		`{"backend":"triton","forward_mode":"EXTEND","seq_lens":[5],"tensors":{"random":3,"heads":3}}`,
	}, "\n") + "\n"
	r := host(t, bins, in, "run", "--random-tensors", "--plugin-dir", bins.PluginDir)
	if r.code != 1 {
		t.Errorf("exit status %d, want 1 (one line refused); stderr: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 5 {
		t.Fatalf("got %d answers, want 5:\n%s\nstderr: %s", len(lines), r.stdout, r.stderr)
	}
	want := []struct{ method, kernel, plugin string }{
		{"MHA_ONE_SHOT", "flash_attn_varlen_func", "fa3"},
		{"MLA", "flash_mla_sparse_fwd", "dsa"},
		{"MHA_ONE_SHOT", "flash_attn_varlen_func", "fa3"},
		{},
		{"MHA", "extend_attention_fwd", "core"},
	}
	for i, line := range lines {
		var a struct {
			Method, Kernel, Plugin, Error string
			KernelPlugin                  string  `json:"kernel_plugin"`
			Emulated                      bool    `json:"emulated"`
			TimeNS                        int64   `json:"time_ns"`
			RelError                      float64 `json:"rel_error"`
		}
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("answer %d: %v: %s", i+1, err, line)
		}
		if want[i].method == "" {
			if !strings.Contains(a.Error, "line 4: seq_lens: needed to run a kernel") {
				t.Errorf("answer 4: got %s, want the seq_lens error", line)
			}
			continue
		}
		if a.Method != want[i].method || a.Kernel != want[i].kernel || a.KernelPlugin != want[i].plugin || !a.Emulated ||
			a.TimeNS <= 0 || a.RelError > 1e-5 {
			t.Errorf("answer %d: got %s, want %+v, emulated, time_ns > 0, rel_error <= 1e-5", i+1, line, want[i])
		}
	}
}

// TestRunRefusesLinesItCannotHold: a line whose tensors would take more
// than --max-tensor-bytes (here w_kc, 1024×1024×1024 floats, 4 GiB) and
// lines with a field given twice are refused with an error naming the
// field, before anything is allocated, and the line after them is
// answered.
func TestRunRefusesLinesItCannotHold(t *testing.T) {
	const good = `{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4],"tensors":{"random":2}}`
	lines := []struct{ line, err string }{
		{`{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4],"tensors":{"random":1,"heads":1024,"kv_lora_rank":1024,"qk_nope_head_dim":1024}}`,
			"line 1: tensors.w_kc: shape [1024 1024 1024] takes 4294967296 bytes; the line's tensors take "},
		{good, ""},
		{`{"backend":"fa3","backend":"triton","forward_mode":"DECODE","seq_lens":[4],"tensors":{"random":1}}`, "line 3: backend: given twice"},
		{`{"backend":"fa3","forward_mode":"DECODE","tensors":{"random":1},"seq_lens":[4],"seq_lens":[5]}`, "line 4: seq_lens: given twice"},
		{`{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4],"tensors":{"random":1},"tensors":{"random":2}}`, "line 5: tensors: given twice"},
		{`{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4],"tensors":{"random":1,"heads":1,"heads":2}}`, "line 6: tensors.heads: given twice"},
		{good, ""},
	}
	var in strings.Builder
	for _, l := range lines {
		in.WriteString(l.line + "\n")
	}
	r := host(t, bins, in.String(), "run", "--plugin-dir", bins.PluginDir)
	if r.code != 1 {
		t.Errorf("exit status %d, want 1 (lines refused); stderr: %s", r.code, r.stderr)
	}
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(got) != len(lines) {
		t.Fatalf("got %d answers, want %d:\n%s\nstderr: %s", len(got), len(lines), r.stdout, r.stderr)
	}
	for i, line := range got {
		var a struct{ Kernel, Error string }
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("answer %d: %v: %s", i+1, err, line)
		}
		if want := lines[i].err; want == "" && (a.Error != "" || a.Kernel == "") {
			t.Errorf("answer %d: got %s, want a kernel's answer", i+1, line)
		} else if want != "" && !strings.HasPrefix(a.Error, want) {
			t.Errorf("answer %d: got %s, want an error starting %q", i+1, line, want)
		}
	}
	if !strings.Contains(got[0], "more than --max-tensor-bytes 1073741824") {
		t.Errorf("answer 1: %s does not name --max-tensor-bytes", got[0])
	}
}

// TestRunPluginsKernels checks attnplug plugins --kernels lists every
// name's catalog, with the page sizes each kernel takes, and the kernels
// the host runs in its own process (the triton rules') as the host's,
// not as any hardware's.
func TestRunPluginsKernels(t *testing.T) {
	r := host(t, bins, "", "plugins", "--kernels", "--plugin-dir", bins.PluginDir)
	if r.code != 0 {
		t.Fatalf("exit status %d: %s", r.code, r.stderr)
	}
	for _, row := range [][]string{
		{"PLUGIN", "NAME", "METHOD", "KERNEL", "LIBRARY", "DTYPES", "HEAD_DIMS", "PAGES", "GRAPH", "HARDWARE"},
		{"core", "triton", "MLA", "decode_attention_fwd", "triton", "bf16,fp16,fp8_e4m3", "576/512", "1", "yes", "host"},
		{"core", "triton", "MHA", "extend_attention_fwd", "triton", "bf16,fp16,fp8_e4m3", "192/128", "1", "no", "host"},
		{"dsa", "dsa", "MLA", "flash_mla_sparse_fwd", "(sparse)", "DeepSeek", "sparse", "attention", "bf16,fp8_e4m3", "576/512", "64", "yes", "cuda"},
		{"fa3", "fa3", "MLA", "flash_attn_with_kvcache", "FlashAttention", "3", "bf16,fp16,fp8_e4m3", "576/512", "1,16,64", "yes", "cuda"},
	} {
		if !hasRow(r.stdout, row...) {
			t.Errorf("plugins --kernels: no row %v in:\n%s", row, r.stdout)
		}
	}
	if strings.Contains(r.stdout, " any\n") {
		t.Errorf("plugins --kernels: a row runs on any hardware:\n%s", r.stdout)
	}
	for _, want := range []string{"flash_mla_sparse_fwd (sparse)", "DeepSeek sparse attention", "FlashAttention 4", "CUTLASS MLA",
		"TRT-LLM MLA", "TokenSpeed MLA", "torch_npu", "Intel XPU", "FlashMLA", "FlashInfer", "aiter", "extend_attention_fwd"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("plugins --kernels: no %q in:\n%s", want, r.stdout)
		}
	}
	// The JSON spells methods and platforms by name, as the table does.
	r = host(t, bins, "", "plugins", "--kernels", "--json", "--plugin-dir", bins.PluginDir)
	var rows []struct {
		Plugin, Name string
		Kernels      []struct {
			Name, Method string
			Hardware     []struct{ Platforms []string }
			PageSizes    []int `json:"page_sizes"`
			InHost       bool  `json:"in_host"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || r.code != 0 {
		t.Fatalf("plugins --kernels --json: exit %d, %v:\n%s", r.code, err, r.stdout)
	}
	methods, platforms := map[string]bool{}, map[string]bool{}
	for _, row := range rows {
		for _, k := range row.Kernels {
			if k.InHost != (row.Plugin == core.PluginCore) {
				t.Errorf("%s %s: in_host %v", row.Name, k.Name, k.InHost)
			}
			if row.Name == "triton" && (len(k.PageSizes) != 1 || k.PageSizes[0] != 1) {
				t.Errorf("triton %s: page_sizes %v, want [1]", k.Name, k.PageSizes)
			}
			if _, err := core.ParseMethod(k.Method); err != nil {
				t.Errorf("%s %s: method %q is not a method's name", row.Name, k.Name, k.Method)
			}
			methods[k.Method] = true
			for _, h := range k.Hardware {
				for _, p := range h.Platforms {
					if pl, err := core.ParsePlatform(p); err != nil || pl == core.PlatformUnset {
						t.Errorf("%s %s: platform %q is not a platform's name", row.Name, k.Name, p)
					}
					platforms[p] = true
				}
			}
		}
	}
	if len(methods) < 5 || !platforms["cuda"] || !platforms["hip"] || !platforms["npu"] {
		t.Errorf("plugins --kernels --json: methods %v, platforms %v", methods, platforms)
	}
}

// TestRunChecksShapesBeforeDecoding sends attnplug run a 50 MB line with
// 10M q_nope values where the shape wants 16: the line is refused naming
// both counts, and the host's peak memory grows by little more than
// attnplug dispatch's does to read the same line and refuse it (decoding
// the arrays first took 461 MB).
func TestRunChecksShapesBeforeDecoding(t *testing.T) {
	if testing.Short() {
		t.Skip("long: sends two 50 MB lines and measures peak memory (make test runs it)")
	}
	const elems = 10 << 20
	var big bytes.Buffer
	big.WriteString(`{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4],"tensors":{"q_nope":[`)
	big.WriteString(strings.Repeat("0.25,", elems-1))
	big.WriteString("0.25]}}\n")
	small := `{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4]}` + "\n"
	// growth sends small, then the big line and small again, and returns
	// the answer to the big line and how much the peak RSS grew for it.
	growth := func(args ...string) (string, int) {
		h := startHost(t, bins, nil, args...)
		pid := h.cmd.Process.Pid
		if _, err := io.WriteString(h.stdin, small); err != nil {
			t.Fatal(err)
		}
		if _, err := h.stdout.ReadString('\n'); err != nil {
			t.Fatalf("%s: first answer: %v; stderr:\n%s", args[0], err, h.stderr)
		}
		before := vmKB(t, pid, "VmHWM")
		go func() {
			h.stdin.Write(big.Bytes())
			io.WriteString(h.stdin, small)
		}()
		answer, err := h.stdout.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: answer: %v; stderr:\n%s", args[0], err, h.stderr)
		}
		if _, err := h.stdout.ReadString('\n'); err != nil {
			t.Errorf("%s: no answer to the line after: %v", args[0], err)
		}
		after := vmKB(t, pid, "VmHWM")
		h.stdin.Close()
		h.wait()
		return answer, (after - before) << 10
	}
	answer, run := growth("run", "--random-tensors")
	if want := fmt.Sprintf("line 2: tensors.q_nope: has %d elements, want 16 (shape [1 2 8])", elems); !strings.Contains(answer, want) {
		t.Errorf("answer %s, want %q", answer, want)
	}
	answer, read := growth("dispatch", "--max-line-bytes", fmt.Sprint(64<<20))
	if want := `"tensors\": unknown field`; !strings.Contains(answer, want) {
		t.Errorf("dispatch answer %s, want %q", answer, want)
	}
	t.Logf("a %d MiB line: peak RSS grew %d MiB in run, %d MiB in dispatch", big.Len()>>20, run>>20, read>>20)
	if run > read+read/4+16<<20 {
		t.Errorf("run's peak RSS grew %d MiB, dispatch's %d MiB: more than reading the line takes", run>>20, read>>20)
	}
}

// TestRunDeviceCUDA: run --device cuda runs MLA decode and the MHA methods
// with the plugins' device code when a GPU and NVRTC are there, answering
// the device, the plan and an error within the bf16 tolerance; without
// them, with --allow-cpu, every line is answered on the CPU with a note
// that says why.
func TestRunDeviceCUDA(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs every method's kernels, on the CPU where there is no GPU (make test runs it)")
	}
	in := strings.Join([]string{
		`{"backend":"fa3","forward_mode":"DECODE","seq_lens":[300,4000,17]}`,
		`{"backend":"flashinfer","forward_mode":"DECODE","seq_lens":[1000]}`,
		`{"backend":"fa3","forward_mode":"EXTEND","extend_prefix_lens":[0,0],"seq_lens":[160,240],"max_chunk_capacity":131072}`,
		`{"backend":"fa3","forward_mode":"EXTEND","extend_prefix_lens":[9000,100],"seq_lens":[9200,300],"max_chunk_capacity":4096}`,
		`{"backend":"triton","forward_mode":"DECODE","seq_lens":[64]}`,
	}, "\n") + "\n"
	r := host(t, bins, in, "run", "--device", "cuda", "--allow-cpu", "--heads", "16", "--page-size", "1", "--random-tensors", "--plugin-dir", bins.PluginDir)
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr: %s\n%s", r.code, r.stderr, r.stdout)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 5 {
		t.Fatalf("got %d answers, want 5:\n%s", len(lines), r.stdout)
	}
	for i, line := range lines {
		var a struct {
			Method, Kernel, Device, Plan, Note string
			Emulated                           bool    `json:"emulated"`
			RelError                           float64 `json:"rel_error"`
		}
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("answer %d: %v: %s", i+1, err, line)
		}
		switch {
		case a.Device != "":
			if a.Emulated || a.Plan == "" || a.RelError > 1e-2 || a.RelError <= 0 {
				t.Errorf("answer %d on %s: %s", i+1, a.Device, line)
			}
		case i == 4: // triton: in process, no device code
			if !a.Emulated || !strings.Contains(a.Note, "not on the GPU") {
				t.Errorf("answer 5: %s", line)
			}
		default:
			if !a.Emulated || !strings.Contains(a.Note, "not on the GPU: no CUDA device") {
				t.Errorf("answer %d: want the CPU kernels and why not the GPU, got %s", i+1, line)
			}
		}
	}
}

// TestRunDeviceCUDASparseAndFP8: run --device cuda runs dsa's sparse MLA
// over the top-k of a DSA layer (pages of 64, its catalog's) and fa3's
// decode over an FP8 cache with the plugins' device code when a GPU is
// there, within the tolerance against the float64 reference over the
// dequantised cache; without one, with --allow-cpu, on the CPU, saying why.
func TestRunDeviceCUDASparseAndFP8(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs the kernels, on the CPU where there is no GPU (make test runs it)")
	}
	in := strings.Join([]string{
		`{"backend":"dsa","forward_mode":"DECODE","seq_lens":[3000,5000,40],"layer":{"use_dsa":true}}`,
		`{"backend":"dsa","forward_mode":"DECODE","seq_lens":[9000],"layer":{"use_dsa":true},"runtime":{"kv_cache_dtype":"fp8_e4m3"}}`,
		`{"backend":"fa3","forward_mode":"DECODE","seq_lens":[300,4000],"runtime":{"kv_cache_dtype":"fp8_e4m3"}}`,
	}, "\n") + "\n"
	r := host(t, bins, in, "run", "--device", "cuda", "--allow-cpu", "--heads", "16", "--page-size", "64", "--random-tensors", "--plugin-dir", bins.PluginDir)
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr: %s\n%s", r.code, r.stderr, r.stdout)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d answers, want 3:\n%s", len(lines), r.stdout)
	}
	for i, line := range lines {
		var a struct {
			Kernel, Device, Plan, Note string
			Emulated, Sparse           bool
			RelError                   float64 `json:"rel_error"`
		}
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("answer %d: %v: %s", i+1, err, line)
		}
		wantKernel, wantSparse := "flash_mla_sparse_fwd", i < 2
		if i == 2 {
			wantKernel = "flash_attn_with_kvcache"
		}
		switch {
		case a.Device != "":
			if a.Emulated || a.Plan == "" || a.RelError > 1e-2 || a.RelError <= 0 || a.Kernel != wantKernel || a.Sparse != wantSparse {
				t.Errorf("answer %d on %s: %s", i+1, a.Device, line)
			}
			if i > 0 && !strings.Contains(a.Note, "fp8_e4m3") {
				t.Errorf("answer %d: the note does not name the FP8 cache: %s", i+1, a.Note)
			}
		default:
			if !a.Emulated || !strings.Contains(a.Note, "not on the GPU: no CUDA device") {
				t.Errorf("answer %d: want the CPU kernels and why not the GPU, got %s", i+1, line)
			}
		}
	}
}

// TestRunDeviceCUDAWithoutGPU: run --device cuda on a machine without a
// usable GPU fails before reading a line, saying why and naming
// --allow-cpu; with --allow-cpu it warns on stderr and answers on the CPU.
// --allow-cpu without --device cuda is a usage error.
func TestRunDeviceCUDAWithoutGPU(t *testing.T) {
	d := kernelrun.NewDevice(64)
	err := d.Open()
	d.Close()
	if err == nil {
		t.Skip("a usable CUDA device is here")
	}
	const line = `{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4],"tensors":{"random":1}}` + "\n"
	r := host(t, bins, line, "run", "--device", "cuda", "--plugin-dir", bins.PluginDir)
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "run: --device cuda: no usable CUDA device: ") || !strings.Contains(r.stderr, "--allow-cpu") {
		t.Errorf("--device cuda without a GPU: exit %d, stdout %q, stderr %q; want exit 1, no answer, the reason and --allow-cpu", r.code, r.stdout, r.stderr)
	}
	r = host(t, bins, line, "run", "--device", "cuda", "--allow-cpu", "--plugin-dir", bins.PluginDir)
	var a struct {
		Kernel   string
		Emulated bool
	}
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil || r.code != 0 || a.Kernel == "" || !a.Emulated ||
		!strings.Contains(r.stderr, "[WARN]  attnplug: no usable CUDA device: the kernels run on the CPU") {
		t.Errorf("--device cuda --allow-cpu without a GPU: exit %d, %v, stdout %q, stderr %q; want the CPU's answer and a warning", r.code, err, r.stdout, r.stderr)
	}
	r = host(t, bins, line, "run", "--allow-cpu", "--plugin-dir", bins.PluginDir)
	if r.code != 2 || !strings.Contains(r.stderr, "--allow-cpu needs --device cuda") {
		t.Errorf("--allow-cpu alone: exit %d, stderr %q; want a usage error", r.code, r.stderr)
	}
	r = host(t, bins, line, "run", "--page-size", "64", "--plugin-dir", bins.PluginDir)
	if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "run: --page-size=64 needs --device cuda") {
		t.Errorf("--page-size without --device cuda: exit %d, stdout %q, stderr %q; want a usage error", r.code, r.stdout, r.stderr)
	}
}

// TestRunDimensionFlags: a dimension flag out of range is a usage error
// naming the flag and its value, before a line is read.
func TestRunDimensionFlags(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--heads", "0"}, "run: --heads: 0 is outside [1, 65536]"},
		{[]string{"--qk-rope-head-dim", "5"}, "run: --qk-rope-head-dim: 5 is odd (RoPE rotates pairs)"},
		{[]string{"--softmax-scale", "-1"}, "run: --softmax-scale: -1: want a finite number > 0"},
		{[]string{"--rope-base", "0.5"}, "run: --rope-base: 0.5: want a finite number > 1"},
		{[]string{"--top-k", "100000"}, "run: --top-k: 100000 is outside [0, 65536]"},
		{[]string{"--max-tensor-bytes", "0"}, "run: --max-tensor-bytes=0 must be positive"},
		{[]string{"--max-tensor-bytes", "99999999999999999"}, "run: --max-tensor-bytes=99999999999999999 is more than the largest tensor segment, 68719476736 bytes (64 GiB)"},
	} {
		r := host(t, bins, "", append([]string{"run", "--random-tensors", "--plugin-dir", bins.PluginDir}, tc.flags...)...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want a usage error %q", tc.flags, r.code, r.stdout, r.stderr, tc.want)
		}
	}
}

// TestCheckMaxTensorBytes: the limit of a line's tensors is positive, at
// most the largest shared-memory segment and, where it is known, at most
// the machine's memory; physicalMemory reads a size on Linux.
func TestCheckMaxTensorBytes(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		n, machine int64
		want       string
	}{
		{1, 0, ""},
		{shm.MaxSize, 0, ""},
		{shm.MaxSize, 128 * gib, ""},
		{24 * gib, 24 * gib, ""},
		{0, 24 * gib, "--max-tensor-bytes=0 must be positive"},
		{-1, 0, "--max-tensor-bytes=-1 must be positive"},
		{shm.MaxSize + 1, 0, "is more than the largest tensor segment"},
		{24*gib + 1, 24 * gib, "--max-tensor-bytes=25769803777 is more than this machine's memory, 25769803776 bytes"},
	} {
		err := checkMaxTensorBytes(tc.n, tc.machine)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkMaxTensorBytes(%d, %d) = %v, want %q", tc.n, tc.machine, err, tc.want)
		}
	}
	if runtime.GOOS == "linux" && physicalMemory() <= 0 {
		t.Errorf("physicalMemory() = %d on Linux", physicalMemory())
	}
}

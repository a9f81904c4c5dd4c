package devicecheck

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os/exec"
	"time"

	"github.com/attnplug/attnplug/core"
)

//go:embed torch_bench.py
var torchScript string

// TorchFigures are what the torch script measured.
type TorchFigures struct {
	Torch        string             `json:"torch"`
	CopyTBs      float64            `json:"copy_tb_s"`
	MatmulTFLOPs float64            `json:"matmul_tflop_s"`
	DecodeUS     map[string]float64 `json:"decode_us"`
	PrefillUS    map[string]float64 `json:"prefill_us"`
	SDPABackend  string             `json:"sdpa_note,omitempty"`
	Error        string             `json:"error,omitempty"`
}

// RunTorch runs torch's bmm-softmax-bmm decode on the decode shapes and
// its causal SDPA on the prefill ones (and its own copy and matrix
// figures) with python3, when python3 with torch and a GPU is there; the
// error says why not.
func RunTorch(ctx context.Context, python string, decode []MLA, prefill []Prefill) (*TorchFigures, error) {
	type shape struct {
		Name    string  `json:"name"`
		Heads   int     `json:"heads"`
		SeqLens []int64 `json:"seq_lens"`
		QLens   []int64 `json:"q_lens,omitempty"`
		Scale   float64 `json:"scale"`
	}
	var in struct {
		Decode  []shape `json:"decode"`
		Prefill []shape `json:"prefill"`
	}
	for _, c := range decode {
		in.Decode = append(in.Decode, shape{c.Name, c.Heads, c.SeqLens, c.QLens, Scale})
	}
	for _, c := range prefill {
		if c.Method == core.MHAChunkedKV {
			continue // SDPA's causal mask is top-left aligned: no like-for-like case
		}
		in.Prefill = append(in.Prefill, shape{c.Name, c.Heads, c.SeqLens, c.QLens, PrefillScale})
	}
	inBytes, _ := json.Marshal(in)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", torchScript)
	cmd.Stdin = bytes.NewReader(inBytes)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", python, err, lastLines(stderr.String(), 5))
	}
	var tf TorchFigures
	if err := json.Unmarshal(lastLine(out), &tf); err != nil {
		return nil, fmt.Errorf("torch script output: %w", err)
	}
	if tf.Error != "" {
		return nil, fmt.Errorf("torch script: %s", tf.Error)
	}
	return &tf, nil
}

func lastLine(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

func lastLines(s string, n int) string {
	lines := bytes.Split(bytes.TrimSpace([]byte(s)), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte(" | ")))
}

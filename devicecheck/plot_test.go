package devicecheck

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

// TestWriteSVG draws every section's rows against their floors, torch's
// mark where torch ran, as well-formed SVG; a row at half its floor is half
// the 100% bar long.
func TestWriteSVG(t *testing.T) {
	r := &Report{When: "2026-12-05T16:19:07Z", Floors: Floors{Device: "NVIDIA H100 <80GB>", CopyTBs: 3, MatmulTFLOPs: 800},
		Decode:  []BenchResult{{Name: "h16_b16_s4096", US: 40, FloorUS: 20, TBs: 1.5, TFLOPs: 40, TorchUS: 80}, {Name: "failed", Error: "x"}},
		Prefill: []PrefillResult{{Name: "h128_prefill_1k", US: 120, TFLOPs: 400, OfMatmul: 0.5, TorchUS: 100}},
		Quant:   []QuantResult{{Name: "sparse bf16 h16 b16", US: 24, Bytes: 36e6, FLOPs: 1e9, TBs: 1.5, TFLOPs: 42}},
		Merge:   &MergeResult{US: 10, TBs: 2.4, OfCopy: 0.8}}
	var b bytes.Buffer
	if err := r.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, svg)
		}
	}
	for _, want := range []string{"h16_b16_s4096", "h128_prefill_1k", "sparse bf16 h16 b16", "merge_state", "NVIDIA H100 &lt;80GB&gt;",
		"decode and extend", "prefill", "sparse and FP8", `width="260"`, "torch: 25%", "torch: 60%", "50%  40.0 us"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the chart lacks %q", want)
		}
	}
	if strings.Contains(svg, "failed") {
		t.Error("a row that failed is drawn")
	}
	// The sparse row: 36 MB over 3 TB/s is 12 us, its floor; 24 us is 50%.
	if !strings.Contains(svg, "50%  24.0 us") {
		t.Errorf("the sparse row's fraction of its floor:\n%s", svg)
	}
	if err := (&Report{}).WriteSVG(io.Discard); err == nil {
		t.Error("an empty report drew a chart")
	}
}

package ruletest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
)

// Opt changes a request built by Req.
type Opt func(*core.Request)

// Req builds a request in mode on platform cuda with chunk capacity 131072
// and core.NewRequest's defaults, threshold 8192 included, then applies opts.
func Req(mode core.ForwardMode, opts ...Opt) core.Request {
	r := core.NewRequest("", mode)
	r.Runtime.Platform = core.PlatformCUDA
	r.Batch.MaxChunkCapacity = 131072
	for _, o := range opts {
		o(&r)
	}
	return r
}

// Lens sets the batch's extend prefix lengths to p and its sequence lengths to s.
func Lens(p, s []int64) Opt {
	return func(r *core.Request) { r.Batch.ExtendPrefixLens, r.Batch.SeqLens = p, s }
}

// Capacity sets the batch's maximum chunk capacity to c.
func Capacity(c int64) Opt { return func(r *core.Request) { r.Batch.MaxChunkCapacity = c } }

// HIP sets the platform to hip.
func HIP(r *core.Request) { r.Runtime.Platform = core.PlatformHIP }

// FusedDecode sets the layer's ROCm fused decode MLA flag.
func FusedDecode(r *core.Request) { r.Layer.ROCmFusedDecodeMLA = true }

// AMXFused sets the layer's Intel AMX and fused QKV-A projection with MQA flags.
func AMXFused(r *core.Request) { r.Layer.IntelAMX, r.Layer.FusedQKVAProjWithMQA = true, true }

// Piecewise sets the runtime's piecewise CUDA graph flag.
func Piecewise(r *core.Request) { r.Runtime.PiecewiseCUDAGraph = true }

// Breakable sets the runtime's breakable CUDA graph flag.
func Breakable(r *core.Request) { r.Runtime.BreakableCUDAGraph = true }

// Deterministic sets the runtime's deterministic inference flag.
func Deterministic(r *core.Request) { r.Runtime.DeterministicInference = true }

// PrefillCP sets the batch's MLA prefill context parallel flag.
func PrefillCP(r *core.Request) { r.Batch.MLAPrefillCP = true }

// NoRagged sets the layer's flashinfer MLA disable-ragged flag.
func NoRagged(r *core.Request) { r.Layer.FlashinferMLADisableRagged = true }

// NoChunked sets the layer's disable chunked prefix cache flag.
func NoChunked(r *core.Request) { r.Layer.DisableChunkedPrefixCache = true }

// UseDSA sets the layer's use DSA flag.
func UseDSA(r *core.Request) { r.Layer.UseDSA = true }

// DSAUseMHA sets the runtime's DSA use MHA flag.
func DSAUseMHA(r *core.Request) { r.Runtime.DSAUseMHA = true }

// TBO sets the runtime's two batch overlap flag.
func TBO(r *core.Request) { r.Runtime.TwoBatchOverlap = true }

// Fresh sets a fresh prefill: prefix lengths [0 0] and sequence lengths [1024 2048].
func Fresh(r *core.Request) { Lens([]int64{0, 0}, []int64{1024, 2048})(r) }

// Context returns a context that times out after 10 seconds and is
// cancelled when the test ends.
func Context(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Backend returns the backend that newBackend (a rules package's New)
// builds with a null logger; the test fails when it cannot be built.
func Backend(t *testing.T, newBackend func(hclog.Logger) (core.Backend, error)) core.Backend {
	t.Helper()
	b, err := newBackend(hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

// Case is one request and the method it must get.
type Case struct {
	Name string
	Req  core.Request
	Want core.Method
}

// Check runs every case, as a subtest, through decide and through b's
// Dispatch under each of names.
func Check(t *testing.T, b core.Backend, cases []Case, decide func(*core.Request) core.Method, names ...string) {
	t.Helper()
	ctx := Context(t)
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			r := tt.Req
			if got := decide(&r); got != tt.Want {
				t.Errorf("Decide: got %v, want %v", got, tt.Want)
			}
			for _, name := range names {
				r.Backend = name
				if got, err := b.Dispatch(ctx, &r); err != nil || got != tt.Want {
					t.Errorf("Dispatch(%s): got %v, %v, want %v, nil", name, got, err, tt.Want)
				}
			}
		})
	}
}

// Describe returns b's description after checking its name, version and
// handler names, and that every handler declares methods and cacheable Reads.
func Describe(t *testing.T, b core.Backend, wantName, wantVersion string, wantHandlers ...string) *core.Description {
	t.Helper()
	d, err := b.Describe(Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != wantName || d.Version != wantVersion {
		t.Errorf("Describe: got %q %q, want %s %s", d.Name, d.Version, wantName, wantVersion)
	}
	var names []string
	for _, h := range d.Handlers {
		names = append(names, h.Name)
		if !h.Reads.Cacheable() {
			t.Errorf("%s: Reads not Cacheable", h.Name)
		}
		if len(h.Methods) == 0 {
			t.Errorf("%s: no methods declared", h.Name)
		}
	}
	if !slices.Equal(names, wantHandlers) {
		t.Errorf("handler names: got %v, want %v", names, wantHandlers)
	}
	return d
}

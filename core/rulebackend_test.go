package core_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
)

// countingLogger is a core.Logger that records its Warn calls.
type countingLogger struct {
	mu    sync.Mutex
	warns []string
	args  [][]any
}

func (l *countingLogger) Warn(msg string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.warns = append(l.warns, msg)
	l.args = append(l.args, args)
}

func (l *countingLogger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.warns)
}

func constRule(name string, m core.Method) core.Rule {
	return core.Rule{Name: name, Decide: func(*core.Request) core.Method { return m }, Methods: []core.Method{m}}
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestNewRuleBackendErrors(t *testing.T) {
	noDecide := constRule("b", core.MLA)
	noDecide.Decide = nil
	alias := constRule("c", core.MLA)
	alias.AliasOf = "missing"
	tests := []struct {
		name    string
		rules   []core.Rule
		wantErr string
	}{
		{"duplicate_name", []core.Rule{constRule("a", core.MLA), constRule("a", core.MHA)}, `fam: rule "a" registered twice`},
		{"empty_name", []core.Rule{constRule("", core.MLA)}, "fam: rule with an empty name"},
		{"nil_decide", []core.Rule{constRule("a", core.MLA), noDecide}, `fam: rule "b" has no Decide`},
		{"alias_to_unserved_name", []core.Rule{constRule("a", core.MLA), alias}, `fam: rule "c" is an alias of "missing", which is not served`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := core.NewRuleBackend("fam", "1.0.0", nil, tt.rules...)
			if err == nil {
				t.Fatalf("NewRuleBackend: got %v, nil, want error %q", b, tt.wantErr)
			}
			if err.Error() != tt.wantErr {
				t.Errorf("NewRuleBackend error: got %q, want %q", err, tt.wantErr)
			}
			if b != nil {
				t.Errorf("NewRuleBackend: got a backend with the error, want nil")
			}
		})
	}
}

func TestRuleBackendDescribe(t *testing.T) {
	ctx := testContext(t)
	alias := constRule("b", core.MHA)
	alias.AliasOf, alias.Deprecated = "a", "use a"
	alias.Reads = core.Reads{Facts: core.FactMode, PrefixSumAtLeast: []int64{5}}
	b, err := core.NewRuleBackend("fam", "1.2.3", nil, constRule("a", core.MLA), alias)
	if err != nil {
		t.Fatal(err)
	}
	d, err := b.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "fam" || d.Version != "1.2.3" || d.ProtocolVersion != 0 {
		t.Errorf("Describe: got name %q version %q protocol %d, want fam 1.2.3 0", d.Name, d.Version, d.ProtocolVersion)
	}
	if len(d.Handlers) != 2 || d.Handlers[0].Name != "a" || d.Handlers[1].Name != "b" {
		t.Fatalf("Describe handlers: got %+v, want a then b", d.Handlers)
	}
	h := d.Handlers[1]
	if h.AliasOf != "a" || h.Deprecated != "use a" || h.Reads.Facts != core.FactMode ||
		!slices.Equal(h.Reads.PrefixSumAtLeast, []int64{5}) || !slices.Equal(h.Methods, []core.Method{core.MHA}) {
		t.Errorf("handler b: got %+v, want alias of a, deprecated, its reads and methods", h)
	}
	// The answer is a copy: changing it does not change the next one.
	d.Handlers[0].Name = "changed"
	d2, _ := b.Describe(ctx)
	if d2.Handlers[0].Name != "a" {
		t.Errorf("Describe after changing an earlier answer: got handler %q, want a", d2.Handlers[0].Name)
	}
}

// TestNewRuleBackendWith: the options set the vendor and declare device
// code in the description, which NewRuleBackend leaves unset; a changed
// answer does not change the backend's.
func TestNewRuleBackendWith(t *testing.T) {
	ctx := testContext(t)
	b, err := core.NewRuleBackendWith(core.RuleBackendOptions{Name: "fam", Version: "1.2.3", Vendor: "Acme Corp", DeviceCode: true}, constRule("a", core.MLA))
	if err != nil {
		t.Fatal(err)
	}
	d, err := b.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "fam" || d.Version != "1.2.3" || d.Vendor != "Acme Corp" || !d.DeviceCode || len(d.Handlers) != 1 {
		t.Errorf("Describe: got %+v, want fam 1.2.3 by Acme Corp with device code", d)
	}
	d.DeviceCode, d.Vendor = false, ""
	if d2, _ := b.Describe(ctx); !d2.DeviceCode || d2.Vendor != "Acme Corp" {
		t.Errorf("Describe after changing an earlier answer: %+v", d2)
	}
	plain, err := core.NewRuleBackend("fam", "1.2.3", nil, constRule("a", core.MLA))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := plain.Describe(ctx); d.DeviceCode || d.Vendor != "" {
		t.Errorf("NewRuleBackend: %+v, want no vendor and no device code", d)
	}
	if _, err := core.NewRuleBackendWith(core.RuleBackendOptions{Name: "fam"}, constRule("a", core.MLA), constRule("a", core.MHA)); err == nil {
		t.Error("a name registered twice: no error")
	}
}

// TestHandlerCatalog: a catalog that covers a subset of the declared
// methods is completed with the host's reference kernels, in the order of
// the methods; a handler without a catalog has none.
func TestHandlerCatalog(t *testing.T) {
	own := core.Kernel{Name: "acme_decode", Library: "acme", Method: core.MLA}
	h := core.HandlerInfo{Name: "a", Methods: []core.Method{core.MHAOneShot, core.MLA, core.MHAChunkedKV}, Kernels: []core.Kernel{own}}
	got := h.Catalog()
	want := []core.Kernel{own, core.HostReferenceKernel(core.MHAOneShot), core.HostReferenceKernel(core.MHAChunkedKV)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Catalog: got %+v, want %+v", got, want)
	}
	if k := core.HostReferenceKernel(core.MHA); k.Name != "reference" || k.Library != "reference (host)" {
		t.Errorf("HostReferenceKernel: %+v", k)
	}
	h.Kernels = nil
	if got := h.Catalog(); got != nil {
		t.Errorf("Catalog without a catalog: %+v, want nil", got)
	}
}

func TestRuleBackendDispatch(t *testing.T) {
	ctx := testContext(t)
	b, err := core.NewRuleBackend("fam", "1.0.0", nil, constRule("a", core.MLA), core.Rule{Name: "t", Decide: core.TritonDecide})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		req     core.Request
		want    core.Method
		wantErr string
	}{
		{"served_name", core.NewRequest("a", core.ModeExtend), core.MLA, ""},
		{"served_name_rules_applied", core.NewRequest("t", core.ModeExtend), core.MHA, ""},
		{"unknown_name", core.NewRequest("nope", core.ModeExtend), 0, `fam: unknown backend "nope"`},
		{"name_case_sensitive", core.NewRequest("A", core.ModeExtend), 0, `fam: unknown backend "A"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := b.Dispatch(ctx, &tt.req)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Dispatch error: got %v, want %q", err, tt.wantErr)
				}
				if !errors.Is(err, core.ErrUnknownBackend) {
					t.Errorf("errors.Is(err, ErrUnknownBackend): got false, want true")
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Dispatch: got %v, %v, want %v, nil", got, err, tt.want)
			}
		})
	}
}

func TestRuleBackendDeprecatedAliasLogsOnce(t *testing.T) {
	ctx := testContext(t)
	logger := &countingLogger{}
	alias := constRule("old", core.MLA)
	alias.AliasOf, alias.Deprecated = "new", `"old" is deprecated`
	b, err := core.NewRuleBackend("fam", "1.0.0", logger, constRule("new", core.MLA), alias)
	if err != nil {
		t.Fatal(err)
	}
	newReq := core.NewRequest("new", core.ModeDecode)
	if _, err := b.Dispatch(ctx, &newReq); err != nil {
		t.Fatal(err)
	}
	if n := logger.count(); n != 0 {
		t.Fatalf("after asking the current name: got %d warnings, want 0", n)
	}
	const goroutines, calls = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := core.NewRequest("old", core.ModeDecode)
			for range calls {
				if m, err := b.Dispatch(ctx, &r); err != nil || m != core.MLA {
					errs <- errors.Join(err, errors.New("wrong answer "+m.String()))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := logger.count(); n != 1 {
		t.Fatalf("after %d concurrent calls of the deprecated name: got %d warnings, want 1", goroutines*calls, n)
	}
	args := logger.args[0]
	want := []any{"backend", "old", "use", "new", "reason", `"old" is deprecated`}
	if !slices.Equal(args, want) {
		t.Errorf("warning args: got %v, want %v", args, want)
	}
}

func TestRuleBackendDeprecatedNilLogger(t *testing.T) {
	alias := constRule("old", core.MLA)
	alias.AliasOf, alias.Deprecated = "new", "old"
	b, err := core.NewRuleBackend("fam", "1.0.0", nil, constRule("new", core.MLA), alias)
	if err != nil {
		t.Fatal(err)
	}
	r := core.NewRequest("old", core.ModeDecode)
	if m, err := b.Dispatch(testContext(t), &r); err != nil || m != core.MLA {
		t.Errorf("Dispatch with a nil logger: got %v, %v, want MLA, nil", m, err)
	}
}

func TestRuleBackendDispatchBatch(t *testing.T) {
	ctx := testContext(t)
	b, err := core.NewRuleBackend("fam", "1.0.0", nil, constRule("a", core.MLA), constRule("b", core.MHA))
	if err != nil {
		t.Fatal(err)
	}
	reqs := []core.Request{core.NewRequest("a", core.ModeDecode), core.NewRequest("x", core.ModeDecode), core.NewRequest("b", core.ModeDecode)}
	t.Run("results_in_order_each_with_its_error", func(t *testing.T) {
		out := make([]core.Result, len(reqs))
		if err := b.DispatchBatch(ctx, reqs, out); err != nil {
			t.Fatal(err)
		}
		if out[0] != (core.Result{Method: core.MLA}) || out[2] != (core.Result{Method: core.MHA}) {
			t.Errorf("results 0 and 2: got %+v and %+v, want MLA and MHA", out[0], out[2])
		}
		if !errors.Is(out[1].Err, core.ErrUnknownBackend) {
			t.Errorf("result 1: got %+v, want an ErrUnknownBackend", out[1])
		}
	})
	t.Run("length_mismatch", func(t *testing.T) {
		err := b.DispatchBatch(ctx, reqs, make([]core.Result, 2))
		if want := "fam: dispatch batch: 2 results for 3 requests"; err == nil || err.Error() != want {
			t.Errorf("DispatchBatch: got %v, want %q", err, want)
		}
	})
	t.Run("empty_batch", func(t *testing.T) {
		if err := b.DispatchBatch(ctx, nil, nil); err != nil {
			t.Errorf("DispatchBatch(nil): got %v, want nil", err)
		}
	})
}

func TestRuleBackendCancelled(t *testing.T) {
	b, err := core.NewRuleBackend("fam", "1.0.0", nil, constRule("a", core.MLA))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testContext(t))
	cancel()
	r := core.NewRequest("a", core.ModeDecode)
	if m, err := b.Dispatch(ctx, &r); !errors.Is(err, context.Canceled) || m != 0 {
		t.Errorf("Dispatch: got %v, %v, want 0, context.Canceled", m, err)
	}
	out := make([]core.Result, 1)
	if err := b.DispatchBatch(ctx, []core.Request{r}, out); !errors.Is(err, context.Canceled) {
		t.Errorf("DispatchBatch: got %v, want context.Canceled", err)
	}
	if !errors.Is(out[0].Err, context.Canceled) {
		t.Errorf("DispatchBatch result: got %+v, want context.Canceled", out[0])
	}
}

func TestTritonBackend(t *testing.T) {
	ctx := testContext(t)
	var b core.Backend = core.Triton{}
	d, err := b.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rule := core.TritonRule()
	if d.Name != core.PluginCore || d.Version != core.Version || len(d.Handlers) != 1 || d.Handlers[0].Name != "triton" {
		t.Errorf("Describe: got %+v, want core %s serving triton", d, core.Version)
	}
	if d.Handlers[0].Reads.Facts != rule.Reads.Facts || !slices.Equal(d.Handlers[0].Methods, rule.Methods) {
		t.Errorf("Describe handler: got %+v, want TritonRule's reads and methods", d.Handlers[0])
	}
	r := req(core.ModeExtend, prefix(0), func(r *core.Request) { r.Backend = "triton" })
	if m, err := b.Dispatch(ctx, &r); err != nil || m != core.MHA {
		t.Errorf("Dispatch(triton): got %v, %v, want MHA, nil", m, err)
	}
	// core.Backend's contract: a name it does not serve is refused.
	for _, name := range []string{"unknown_name", "fa3"} {
		r := req(core.ModeExtend, prefix(0), func(r *core.Request) { r.Backend = name })
		if _, err := b.Dispatch(ctx, &r); !errors.Is(err, core.ErrUnknownBackend) {
			t.Errorf("Dispatch(%q): got %v, want ErrUnknownBackend", name, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	r = core.NewRequest("triton", core.ModeDecode)
	_, err = b.Dispatch(cctx, &r)
	if !errors.Is(err, context.Canceled) || err.Error() != "triton: context canceled" {
		t.Errorf("Dispatch after cancel: got %v, want triton: context canceled", err)
	}
}

package registry_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry"
)

// TestStrictRefusesUnservedNames: under Strict, a name that no running
// plugin serves is refused with the reason (a broken plugin, refused by the
// lock, missing since a reload, never seen), and only triton is answered
// in process; without Strict, a name never seen gets the triton rules
// silently, as in sglang, and the others a fallback naming the reason.
func TestStrictRefusesUnservedNames(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A vendor plugin that cannot start, and one no lock pins.
	if err := os.WriteFile(filepath.Join(tree.PluginDir, "attnplug-backend-acme_mla"), []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	strict, _ := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}, Strict: true})
	lax, _ := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}})

	tests := []struct {
		name   string
		reason registry.Reason
		says   string
	}{
		{"acme_mla", registry.ReasonPluginBroken, `plugin acme_mla (` + filepath.Join(tree.PluginDir, "attnplug-backend-acme_mla") + `), which serves "acme_mla", is broken`},
		{"fa3", registry.ReasonPluginMissing, ""}, // served: no refusal
		{"never_heard_of", registry.ReasonUnknownBackend, `"never_heard_of" was never seen: no plugin in ` + tree.PluginDir + ` serves it (names served: aiter, ascend, cutlass_mla`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := strict.Dispatch(ctx, decode(tt.name))
			if tt.says == "" {
				if err != nil || a.Plugin == core.PluginCore {
					t.Fatalf("strict: %+v, %v; want the plugin's answer", a, err)
				}
				return
			}
			if !errors.Is(err, core.ErrRefused) || !strings.Contains(err.Error(), string(tt.reason)+": "+tt.says) ||
				!strings.Contains(err.Error(), "strict: no fallback to triton") {
				t.Errorf("strict: got %+v, %v\nwant a refusal: %s: %s", a, err, tt.reason, tt.says)
			}
			a, err = lax.Dispatch(ctx, decode(tt.name))
			want := string(tt.reason) + ": " + tt.says
			if tt.reason == registry.ReasonUnknownBackend {
				want = "" // sglang's rule: the triton rules, silently
			}
			if err != nil || a.Plugin != core.PluginCore || !strings.HasPrefix(a.Fallback, want) || (want == "" && a.Fallback != "") {
				t.Errorf("not strict: got %+v, %v; want the triton rules with fallback %q", a, err, want)
			}
		})
	}
	if a, err := strict.Dispatch(ctx, decode(core.TritonName)); err != nil || a.Plugin != core.PluginCore || a.Fallback != "" {
		t.Errorf("triton under strict: %+v, %v; want the in-process rules", a, err)
	}
	// The same through a batch and a Dispatcher.
	reqs := []core.Request{*decode("fa3"), *decode("never_heard_of"), *decode("acme_mla")}
	out := make([]registry.BatchAnswer, len(reqs))
	if err := strict.DispatchBatch(ctx, reqs, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Err != nil || !errors.Is(out[1].Err, core.ErrRefused) || !errors.Is(out[2].Err, core.ErrRefused) {
		t.Errorf("batch: %+v", out)
	}
	if _, err := strict.Resolve("never_heard_of").Dispatch(ctx, decode("x")); !errors.Is(err, core.ErrRefused) {
		t.Errorf("dispatcher: got %v, want a refusal", err)
	}

	// A name served before a reload, whose plugin is gone since: intel_amx
	// is not a name sglang registers, so only the registry's memory says
	// that it was served.
	if a, err := strict.Dispatch(ctx, decode("intel_amx")); err != nil || a.Plugin != "intel_xpu" {
		t.Fatalf("intel_amx: %+v, %v", a, err)
	}
	os.Remove(tree.Plugin("intel_xpu"))
	if _, err := strict.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = strict.Dispatch(ctx, decode("intel_amx"))
	if !errors.Is(err, core.ErrRefused) || !strings.Contains(err.Error(), `plugin_missing: "intel_amx" was served by plugin intel_xpu, which is missing`) {
		t.Errorf("intel_amx after its plugin went: got %v, want a refusal naming the missing plugin", err)
	}
}

// TestStrictRefusesUnpinned: a vendor plugin that the lock file does not
// pin is refused by the lock, and its name with it.
func TestStrictRefusesUnpinned(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir(), "aiter", "ascend", "dsa", "flashinfer", "intel_xpu")
	if err != nil {
		t.Fatal(err)
	}
	lockPath := filepath.Join(tree.PluginDir, registry.LockFileName)
	if err := (&registry.Lock{Format: 1}).Write(lockPath); err != nil {
		t.Fatal(err)
	}
	lock, err := registry.ReadLock(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}, Strict: true, Lock: lock, ExpectedNames: []string{}})
	_, err = r.Dispatch(testContext(t), decode("fa3"))
	if !errors.Is(err, core.ErrRefused) || !strings.Contains(err.Error(), "plugin_broken") ||
		!strings.Contains(err.Error(), "refused by the lock file") || !strings.Contains(err.Error(), "run attnplug lock --plugin-dir "+tree.PluginDir) {
		t.Errorf("fa3 unpinned: got %v, want a refusal by the lock saying how to pin it", err)
	}
}

package registry_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry"
)

// specPlugin is a plugin directory whose fault plugin reads its faults from
// a file at every start, so that a test can describe it with one spec and
// start it with another.
func specPlugin(t *testing.T, spec string) (dir string, setSpec func(string)) {
	t.Helper()
	bin := filepath.Join(faultDir(t), "attnplug-backend-fault")
	dir = t.TempDir()
	specFile := filepath.Join(t.TempDir(), "spec")
	setSpec = func(s string) {
		if err := os.WriteFile(specFile, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	setSpec(spec)
	script := fmt.Sprintf("#!/bin/sh\nATTNPLUG_FAULT=$(cat %s) exec %s \"$@\"\n", specFile, bin)
	if err := os.WriteFile(filepath.Join(dir, "attnplug-backend-fault"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, setSpec
}

// TestSelfCheckRefusesAMethodWithoutKernel: a plugin with a kernel catalog
// whose rules answer a method it neither declares nor has a kernel for is
// refused at its first start, listed as broken with the name and the
// method, and never used.
func TestSelfCheckRefusesAMethodWithoutKernel(t *testing.T) {
	dir, setSpec := specPlugin(t, "kernels")
	r, _ := open(t, registry.Config{PluginDirs: []string{dir}, NoAnswerCache: true})
	defer r.Close()
	setSpec("kernels,undeclared")
	req := core.NewRequest("fault", core.ModeDecode)
	for range 2 {
		a, err := r.Dispatch(context.Background(), &req)
		if err != nil {
			t.Fatal(err)
		}
		if a.Plugin != core.PluginCore || !strings.Contains(a.Fallback, "which it does not declare and its kernel catalog lacks") {
			t.Errorf("answer %+v: want the triton rules, because the self-check refused the plugin", a)
		}
	}
	for _, p := range r.Plugins() {
		if p.Name == "fault" && (p.Status != registry.StatusBroken || !strings.Contains(p.Reason, "fault answered MHA_NPU, which it does not declare and its kernel catalog lacks")) {
			t.Errorf("listing %+v: want broken, naming fault and MHA_NPU", p)
		}
		// The request is named as the dispatch format names it, never by
		// Go's fields.
		if p.Name == "fault" && (!strings.Contains(p.Reason, ", to EXTEND on cuda, extend_prefix_lens [") || !strings.Contains(p.Reason, `, runtime {"platform":"cuda"`) ||
			!strings.Contains(p.Reason, `, layer {"chunked_prefix_cache_threshold":`) || strings.ContainsAny(p.Reason, "+") || strings.Contains(p.Reason, "Platform:")) {
			t.Errorf("reason %q: want the request in the dispatch format's names", p.Reason)
		}
	}
}

// TestSelfCheckPassesAndOldPluginsStayUsable: a plugin whose catalog covers
// its answers, and one without any catalog, both serve.
func TestSelfCheckPassesAndOldPluginsStayUsable(t *testing.T) {
	for _, spec := range []string{"kernels", ""} {
		dir, _ := specPlugin(t, spec)
		r, _ := open(t, registry.Config{PluginDirs: []string{dir}, NoAnswerCache: true})
		req := core.NewRequest("fault", core.ModeDecode)
		a, err := r.Dispatch(context.Background(), &req)
		if err != nil || a.Plugin != "fault" || a.Fallback != "" {
			t.Errorf("spec %q: got %+v, %v; want the fault plugin's answer", spec, a, err)
		}
		r.Close()
	}
}

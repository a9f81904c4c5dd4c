package registry_test

import (
	"os"
	"testing"

	"github.com/attnplug/attnplug/registry"
)

// TestStagedBinariesSkipped: a binary being put in place
// (attnplug-backend-fa3.new) is neither served nor listed as broken.
func TestStagedBinariesSkipped(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir(), "aiter", "ascend", "dsa", "flashinfer", "intel_xpu")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bins.Plugin("aiter"))
	if err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{".new", ".tmp", ".old", ".bak"} {
		if err := os.WriteFile(tree.Plugin("fa3")+suffix, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}})
	list := r.Plugins()
	if len(list) != 1 || list[0].Name != "fa3" || list[0].Status != registry.StatusReady || list[0].Path != tree.Plugin("fa3") {
		t.Errorf("plugins: %+v, want fa3 alone, ready", list)
	}
}

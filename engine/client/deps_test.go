package client_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/engine/client"
	"github.com/attnplug/attnplug/engine/internal/convert"
	"github.com/attnplug/attnplug/wire"
)

// TestClientLinksNoPluginHost: a Go client of attnplug serve links the
// engine API and core, and nothing of the plugin host.
func TestClientLinksNoPluginHost(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/attnplug/attnplug/engine/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"attnplug/attnplug/registry", "attnplug/attnplug/wire", "hashicorp/go-plugin", "attnplug/attnplug/jsonl", "attnplug/attnplug/launch"} {
			if strings.HasSuffix(dep, banned) || strings.Contains(dep, banned+"/") {
				t.Errorf("the client imports %s", dep)
			}
		}
	}
}

// TestLimitsAgreeWithTheServer: the client's limits are the server's,
// which are the plugin protocol's.
func TestLimitsAgreeWithTheServer(t *testing.T) {
	if client.MaxMessageBytes != wire.MaxMessageBytes {
		t.Errorf("client.MaxMessageBytes = %d, wire.MaxMessageBytes = %d", client.MaxMessageBytes, wire.MaxMessageBytes)
	}
	if convert.MaxPlanBatch != wire.MaxPlanBatch {
		t.Errorf("convert.MaxPlanBatch = %d, wire.MaxPlanBatch = %d", convert.MaxPlanBatch, wire.MaxPlanBatch)
	}
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/internal/testbin"
)

// TestConformRunsPlansOnTheGPU: on a machine with a GPU, conform runs the
// device code it checks against the float64 reference: fa3 passes, and a
// copy of it whose decode grid covers one query token per request (the
// narrow test plugin, installed as attnplug-backend-fa3) fails, naming a
// target-verify batch and the outputs it never wrote, and so does the copy
// whose entries declare the pointers q and out swapped. Without a GPU the
// plans cannot run and the test skips, saying so.
func TestConformRunsPlansOnTheGPU(t *testing.T) {
	d, err := cuda.Open()
	if err != nil {
		t.Skipf("no GPU here (%v): conform checks plans without running them", err)
	}
	d.Close()
	dir := t.TempDir()
	narrow, err := testbin.BuildTestPlugin(filepath.Join(dir, "build"), "narrow")
	if err != nil {
		t.Fatal(err)
	}
	copyDir := filepath.Join(dir, "copy")
	data, err := os.ReadFile(narrow)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(copyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(copyDir, "attnplug-backend-fa3")
	if err := os.WriteFile(bad, data, 0o755); err != nil {
		t.Fatal(err)
	}
	res := host(t, bins, "", "conform", bins.Plugin("fa3"))
	if res.code != 0 || !hasRow(res.stdout, "PASS", "device-run") || !strings.Contains(res.stdout, "plans ran on") {
		t.Errorf("conform fa3 on the GPU: exit %d:\n%s%s", res.code, res.stdout, res.stderr)
	}
	res = host(t, bins, "", "conform", "--json", bins.Plugin("fa3"))
	var rep struct {
		DeviceCode struct {
			PlansChecked int    `json:"plans_checked"`
			PlansRun     int    `json:"plans_run"`
			RanOn        string `json:"ran_on"`
			NotRun       string `json:"not_run"`
		} `json:"device_code"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || res.code != 0 || rep.DeviceCode.PlansRun == 0 ||
		rep.DeviceCode.PlansRun > rep.DeviceCode.PlansChecked || rep.DeviceCode.RanOn == "" || rep.DeviceCode.NotRun != "" {
		t.Errorf("conform --json fa3 on the GPU: exit %d, %v, device_code %+v, want plans run and the GPU named", res.code, err, rep.DeviceCode)
	}
	res = host(t, bins, "", "conform", bad)
	if res.code != 1 || !strings.Contains(res.stdout, "run on the GPU: the outputs differ from the float64 reference") || !strings.Contains(res.stdout, "unwritten") {
		t.Errorf("conform of the narrow copy on the GPU: exit %d, want a failure naming the unwritten outputs:\n%s", res.code, res.stdout)
	}
	// Two pointer parameters swapped in the declared entries: no static
	// check sees it, running the plans does.
	res = hostEnv(t, bins, []string{"ATTNPLUG_NARROW=swap"}, "", "conform", bad)
	if res.code != 1 || !strings.Contains(res.stdout, "run on the GPU: the outputs differ from the float64 reference") {
		t.Errorf("conform of the copy with q and out swapped on the GPU: exit %d, want a failure:\n%s", res.code, res.stdout)
	}
}

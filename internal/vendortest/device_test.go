package vendortest

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/conformance"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
	"github.com/attnplug/attnplug/registry"
)

// TestVendorDeviceCode: the unchanged host gets acme's device code from
// the built plugin, as it would on a GPU host: `attnplug plugins --kernels
// --arch sm_90` lists its PTX module; through the registry, the module for
// an sm_90 device passes the host's checks, plans for decode, target
// verify and graph batches are checked by the host (registry.CheckPlan)
// and a graph plan is kept for every step of its batch size; what acme
// does not run (an FP8 cache, the chunked-prefix MHA the host runs) is
// refused with acme's reason.
func TestVendorDeviceCode(t *testing.T) {
	dir := pluginDir(t, acmeBin)
	r := host(t, "", nil, "plugins", "--kernels", "--arch", "sm_90", "--plugin-dir", dir)
	if r.code != 0 || !regexp.MustCompile(`(?m)^acme_mla +acme_mla +acme_decode +compute_80 +ptx +7\.8 +520\.61\.05 \(CUDA 11\.8\) +\d+ +[0-9a-f]{12} +acme_decode$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^acme_mla +acme_mla +MLA +acme_mla_decode +acme +bf16 +576/512 +1,64 +yes +acme$`).MatchString(r.stdout) {
		t.Errorf("plugins --kernels --arch sm_90: exit %d, want acme's PTX module and its graph-capturable kernel\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg, err := registry.New(ctx, registry.Config{PluginDirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	dev, err := conformance.ExampleDevice("sm_90")
	if err != nil {
		t.Fatal(err)
	}
	mods, err := reg.KernelModules(ctx, "acme_mla", dev)
	if err != nil {
		t.Fatalf("modules: %v", err)
	}
	if len(mods) != 1 || mods[0].Name != "acme_decode" || mods[0].Format != core.FormatPTX || launch.CheckEntries(mods[0]) != nil {
		t.Fatalf("modules: %+v", mods)
	}
	h, plugin, ok := reg.Handler("acme_mla")
	if !ok || plugin != "acme_mla" {
		t.Fatalf("acme_mla: handler of %q, %v", plugin, ok)
	}

	mla := func(seq, q []int64, page int) core.PlanRequest {
		s := core.PlanShape{SeqLens: seq, QLens: q, PageSize: page, NumPages: 4096}
		return core.PlanRequest{Backend: "acme_mla", Method: core.MLA, DType: "bf16", Device: dev, Shape: s,
			Dims: core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352}}
	}
	graph := mla([]int64{8192, 8192, 8192, 8192}, []int64{1, 1, 1, 1}, 64)
	graph.Graph, graph.Shape.MaxSeqLen = true, 8192
	for _, tc := range []struct {
		name string
		req  core.PlanRequest
	}{
		{"decode", mla([]int64{1, 300, 5000}, []int64{1, 1, 1}, 64)},
		{"target verify", mla([]int64{9, 300, 2048}, []int64{2, 4, 3}, 1)},
		{"graph decode", graph},
	} {
		plan, err := reg.PlanKernel(ctx, &tc.req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		// What the registry did before answering; again here, so that the
		// test fails if the registry ever stops.
		if err := registry.CheckPlan(plan, &tc.req, h, mods); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if plan.Kernel != "acme_mla_decode" || len(plan.Launches) != 1 || plan.Launches[0].Entry != "acme_decode" {
			t.Errorf("%s: plan %+v", tc.name, plan)
		}
	}
	// The graph plan holds for its batch size: a later step with other
	// lengths gets the plan the registry kept, with no call to the plugin.
	first, _ := reg.PlanKernel(ctx, &graph)
	later := graph
	later.Shape.SeqLens = []int64{17, 4000, 8192, 1}
	if again, err := reg.PlanKernel(ctx, &later); err != nil || again != first || first.Reads != core.PlanReadsDeclared|core.PlanReadsQLens {
		t.Errorf("a later step of the graph's batch size: %p %v, want the kept plan %p reading %s", again, err, first, first.Reads)
	}

	fp8 := mla([]int64{100, 200}, []int64{1, 1}, 64)
	fp8.KVDType = "fp8_e4m3"
	chunked := mla([]int64{100, 200}, []int64{50, 20}, 0)
	chunked.Method, chunked.Dims.HeadDimQK, chunked.Dims.HeadDimV, chunked.Shape.ChunkCapacity = core.MHAChunkedKV, 192, 128, 8192
	for _, tc := range []struct {
		name string
		req  core.PlanRequest
		why  string
	}{
		{"an FP8 cache", fp8, "fp8_e4m3"},
		{"chunked-prefix MHA", chunked, "MHA_CHUNKED_KV"},
	} {
		if plan, err := reg.PlanKernel(ctx, &tc.req); !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: %+v, %v; want core.ErrNoPlan naming %s", tc.name, plan, err, tc.why)
		}
	}
}

// TestVendorDeviceCodeConforms runs `attnplug conform --arch sm_90` on the
// vendor's binary: its modules and every plan it answers for conform's
// batches pass the host's checks (what it refuses, it refuses with
// core.ErrNoPlan), and, with no GPU asked for, none ran, which the report
// says.
func TestVendorDeviceCodeConforms(t *testing.T) {
	r := host(t, "", nil, "conform", "--arch", "sm_90", "--json", "--max-requests", "100", acmeBin)
	var rep struct {
		Passed bool `json:"passed"`
		Checks []struct {
			Name   string `json:"name"`
			Status string `json:"status"`
		} `json:"checks"`
		DeviceCode *conformance.DeviceCodeReport `json:"device_code"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 || !rep.Passed {
		t.Fatalf("conform --arch sm_90: exit %d, %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	status := map[string]string{}
	for _, c := range rep.Checks {
		status[c.Name] = c.Status
	}
	dc := rep.DeviceCode
	if status["device-code"] != string(conformance.Pass) || status["device-run"] != string(conformance.NotRun) || dc == nil || len(dc.Modules) != 1 || dc.Modules[0].Name != "acme_decode" ||
		dc.Modules[0].Floor == nil || dc.Modules[0].Floor.PTXISA != "7.8" || dc.PlansChecked == 0 || dc.PlansRun != 0 {
		t.Errorf("device-code %s, report %+v; want acme_decode's module (PTX ISA 7.8) and its plans checked, none run", status["device-code"], dc)
	}
}

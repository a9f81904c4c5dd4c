package conformance_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/conformance"
	"github.com/attnplug/attnplug/core"
)

// TestDeviceCodeCatchesLies runs the suite on the liar plugin: honest, it
// passes every check; told to lie, the device-code check fails naming
// the lie, and nothing else does. The device code does not depend on the
// requests asked: the suite asks no probes.
func TestDeviceCodeCatchesLies(t *testing.T) {
	skipHeavy(t, "the suite on twelve lies of the liar plugin")
	for _, tc := range []struct{ lie, want string }{
		{"", ""},
		{"unknown_entry", `module "liar_mla" has no entry "liar_mla_split_v2"`},
		{"grid", "grid dimension 1 is 65536, the device allows 65535"},
		{"unbound", `parameter "lse" of liar_mla_combine is not bound`},
		{"schedule", "which has"},
		{"shape", `tensor "out" declared as bf16`},
		{"wrong_kernel", `the plan runs kernel "flash_attn_with_kvcache"`},
		{"hash", `the host refuses the modules: protocol violation: kernel module "liar_mla" declares sha256`},
		{"swapped_params", `the host refuses the modules: protocol violation: kernel module "liar_mla": entry liar_mla_combine: parameter 0 ("items", i32) is 4 bytes as declared, 8 bytes in the image (.u64 liar_mla_combine_param_0)`},
		{"holds_for_batch", "the plan declares it reads batch+q_lens, but another plan answers the same request with other seq_lens"},
		{"example_plan", "no launch binds seq_lens (nor metadata): with page size 64 the kernels cannot know a request's keys"},
		{"example_plan", "no launch binds qo_indptr (nor metadata): with "},
		// A plugin that never reads the cache dtype, or the top-k: the
		// probes ask it what its catalog does not list, and the plan it
		// makes for the request it knows is refused, naming the request.
		{"ignores_kv_dtype", `liar: probe a dense layer over an FP8 cache (kv_dtype fp8_e4m3): MLA plan for 3 requests (seq_lens [1 300 4097], q_lens [1 1 1]), page size 1, 16 heads, head dims 576/512, graph false, kv_dtype fp8_e4m3: plan refused: no launch binds tensor "kv_scale", and the request's KV cache is kv_dtype fp8_e4m3: the plan was not made for this request`},
		{"ignores_kv_dtype", `liar: probe an FP8 cache in a CUDA graph (shape.max_seq_len 8192): MLA plan for 3 requests (seq_lens [1 300 4097], q_lens [1 1 1]), page size 1, 16 heads, head dims 576/512, graph true, max_seq_len 8192, kv_dtype fp8_e4m3: plan refused: no launch binds tensor "kv_scale"`},
		{"ignores_top_k", `liar: probe a sparse layer (dims.top_k 2048) over a bf16 cache: MLA plan for 3 requests (seq_lens [1 300 4097], q_lens [1 1 1]), page size 1, 16 heads, head dims 576/512, graph false, top_k 2048: plan refused: no launch binds tensor "topk_indices", and the request is sparse (dims.top_k 2048): the plan was not made for this request`},
	} {
		t.Run("lie_"+tc.lie, func(t *testing.T) {
			t.Parallel()
			r := run(t, conformance.Options{Binary: liar, MaxRequests: 50, Probes: -1, Env: []string{"ATTNPLUG_LIE=" + tc.lie}})
			c, ok := r.Check(conformance.CheckDeviceCode)
			if !ok {
				t.Fatalf("no %s check:\n%s", conformance.CheckDeviceCode, text(r))
			}
			if tc.want == "" {
				if !r.Passed || c.Status != conformance.Pass || !strings.Contains(c.Detail, "pass the host's check; 24 plans pass it, 0 batches got no plan") {
					t.Fatalf("the honest liar does not pass:\n%s", text(r))
				}
				return
			}
			failed := r.Failed()
			if r.Passed || len(failed) != 1 || failed[0].Name != conformance.CheckDeviceCode || !strings.Contains(strings.Join(c.Problems, "\n"), tc.want) {
				t.Errorf("want only %s failed, naming %q:\n%s", conformance.CheckDeviceCode, tc.want, text(r))
			}
		})
	}
	t.Run("no_device_code_for_the_device", func(t *testing.T) {
		t.Parallel()
		r := run(t, conformance.Options{Binary: liar, MaxRequests: 50, Probes: -1, Env: []string{"ATTNPLUG_LIE=no_modules"}})
		c, _ := r.Check(conformance.CheckDeviceCode)
		if !r.Passed || c.Status != conformance.NotChecked || !strings.HasPrefix(c.Detail, "not checked: ") || !strings.Contains(c.Detail, "no device code, as asked") {
			t.Errorf("want a pass with device-code not checked, saying why:\n%s", text(r))
		}
		if s := r.Summary(); !strings.HasPrefix(s, "PASS: liar conforms (") || !strings.Contains(s, "; not checked here: device-code, device-run)") {
			t.Errorf("summary %q does not say device-code was not checked", s)
		}
		if !strings.Contains(text(r), "\nNOT CHECKED  device-code ") {
			t.Errorf("the text report does not say NOT CHECKED:\n%s", text(r))
		}
	})
	t.Run("crash", func(t *testing.T) {
		t.Parallel()
		r := run(t, conformance.Options{Binary: liar, MaxRequests: 50, Probes: -1, Env: []string{"ATTNPLUG_LIE=crash_plan"}})
		c, _ := r.Check(conformance.CheckDeviceCode)
		if r.Passed || c.Status != conformance.Fail || !strings.Contains(strings.Join(c.Problems, "\n"), "exited") {
			t.Errorf("want device-code failed, naming the exit:\n%s", text(r))
		}
	})
}

// TestDeviceRunSaysWhatRan: the plans the device-code check passes are
// run by the device-run check, which reports what ran. Without a GPU
// (no Options.Launch) it is NOT RUN, saying why, and no failure; the
// report's device_code counts the plans checked and none run
// (TestDeviceRunWithALaunch has a GPU stand-in).
func TestDeviceRunSaysWhatRan(t *testing.T) {
	opts := conformance.Options{Binary: liar, MaxRequests: 50, Probes: -1, NoLaunch: "no GPU here"}
	r := run(t, opts)
	c, ok := r.Check(conformance.CheckDeviceRun)
	dc, _ := r.Check(conformance.CheckDeviceCode)
	if !strings.HasPrefix(dc.Detail, "modules liar_mla (ptx for compute_90, PTX ISA 8.0, driver 525.60.13 or newer) for example sm_90 device pass the host's check") {
		t.Errorf("device-code does not say what the module needs of a driver: %s", dc.Detail)
	}
	if !ok || !r.Passed || dc.Status != conformance.Pass || c.Status != conformance.NotRun ||
		c.Detail != "not run: no GPU here: 36 plans checked, none run against the float64 reference" {
		t.Fatalf("without a GPU: want device-code passed and device-run not run, saying why:\n%s", text(r))
	}
	if s := r.Summary(); !strings.HasSuffix(s, "; not run here: device-run)") {
		t.Errorf("summary %q does not say device-run did not run", s)
	}
	if !hasLine(text(r), "NOT RUN", "device-run", "not run: no GPU here: 36 plans checked") {
		t.Errorf("the text report does not say NOT RUN:\n%s", text(r))
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Passed bool `json:"passed"`
		Checks []struct {
			Name   string `json:"name"`
			Status string `json:"status"`
		} `json:"checks"`
		DeviceCode *struct {
			Device            string `json:"device"`
			ComputeCapability int    `json:"compute_capability"`
			Modules           []struct {
				Name   string `json:"name"`
				Arch   string `json:"arch"`
				Format string `json:"format"`
				Floor  struct {
					PTXISA    string `json:"ptx_isa"`
					ImageArch string `json:"image_arch"`
					MinCUDA   string `json:"min_cuda"`
					MinDriver string `json:"min_driver"`
				} `json:"floor"`
			} `json:"modules"`
			PlansChecked          int    `json:"plans_checked"`
			NoPlan                *int   `json:"no_plan"`
			Probes                int    `json:"probes"`
			ProbePlans            int    `json:"probe_plans"`
			PlansRun              *int   `json:"plans_run"`
			PlansFailed           *int   `json:"plans_failed"`
			PlansWithoutReference *int   `json:"plans_without_reference"`
			RanOn                 string `json:"ran_on"`
			NotRun                string `json:"not_run"`
		} `json:"device_code"`
	}
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	d := back.DeviceCode
	if !back.Passed || d == nil || d.Device != "example sm_90 device" || d.ComputeCapability != 90 || d.PlansChecked != 24 ||
		d.NoPlan == nil || *d.NoPlan != 0 || d.Probes != 23 || d.ProbePlans != 12 || d.PlansRun == nil || *d.PlansRun != 0 || d.PlansFailed == nil || d.PlansWithoutReference == nil ||
		d.RanOn != "" || d.NotRun != "no GPU here" || len(d.Modules) != 1 || d.Modules[0].Name != "liar_mla" || d.Modules[0].Arch != "compute_90" ||
		d.Modules[0].Format != "ptx" || d.Modules[0].Floor.PTXISA != "8.0" || d.Modules[0].Floor.ImageArch != "sm_90" ||
		d.Modules[0].Floor.MinCUDA != "12.0" || d.Modules[0].Floor.MinDriver != "525.60.13" {
		t.Errorf("JSON device_code: %s", data)
	}
	for _, c := range back.Checks {
		if c.Name == conformance.CheckDeviceRun && c.Status != "not-run" {
			t.Errorf("JSON: device-run %q, want not-run", c.Status)
		}
	}
}

// TestDeviceRunWithALaunch: with a LaunchFunc (a GPU stand-in: each plan
// is asked again through the planner the check hands over, the plugin as
// a host sees it; the target-verify batches have no reference, and one
// batch of 64 requests fails) device-run counts the plans run, those
// without a reference and those that failed, and fails naming the batch
// of a failure.
func TestDeviceRunWithALaunch(t *testing.T) {
	opts := conformance.Options{Binary: liar, MaxRequests: 50, Probes: -1}
	var asked int
	opts.Launch = func(ctx context.Context, kp core.KernelPlanner, req *core.PlanRequest) error {
		if _, err := kp.KernelModules(ctx, req.Device); err != nil {
			return err
		}
		if _, err := kp.PlanKernel(ctx, req); err != nil {
			return err
		}
		asked++
		switch {
		case slices.Max(req.Shape.QLens) > 1:
			return conformance.ErrLaunchNotCovered
		case len(req.Shape.SeqLens) == 64 && req.Shape.PageSize == 64 && req.Dims.Heads == 128:
			return errors.New("the outputs differ from the float64 reference")
		}
		return nil
	}
	r := run(t, opts)
	c, _ := r.Check(conformance.CheckDeviceRun)
	d2 := r.DeviceCode
	if r.Passed || c.Status != conformance.Fail || asked != 36 || d2 == nil || d2.PlansRun+d2.PlansWithoutReference != 36 ||
		d2.PlansWithoutReference == 0 || d2.PlansFailed != 1 || d2.RanOn != "example sm_90 device" || d2.NotRun != "" ||
		!strings.Contains(strings.Join(c.Problems, "\n"), "liar: MLA plan for 64 requests") ||
		!strings.Contains(strings.Join(c.Problems, "\n"), "page size 64, 128 heads, head dims 576/512, graph false, run on the GPU: the outputs differ") {
		t.Errorf("with a GPU stand-in: asked %d plans, report %+v:\n%s", asked, d2, text(r))
	}
	if failed := r.Failed(); len(failed) != 1 || failed[0].Name != conformance.CheckDeviceRun {
		t.Errorf("want device-run alone failed:\n%s", text(r))
	}
}

// hasLine reports whether a line of the text report has the status, the
// check's name and then the detail's beginning, in columns.
func hasLine(report, status, name, detail string) bool {
	for _, line := range strings.Split(report, "\n") {
		rest, ok := strings.CutPrefix(line, status+" ")
		if !ok {
			continue
		}
		rest, ok = strings.CutPrefix(strings.TrimLeft(rest, " "), name+" ")
		if ok && strings.HasPrefix(strings.TrimLeft(rest, " "), detail) {
			return true
		}
	}
	return false
}

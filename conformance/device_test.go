package conformance_test

import (
	"strings"
	"testing"

	"github.com/attnplug/attnplug/conformance"
)

// TestDeviceCodeCatchesLies runs the suite on the liar plugin: honest, it
// passes every check; told to lie, the device-code check fails naming
// the lie, and nothing else does. The device code does not depend on the
// requests asked: the suite asks no probes.
func TestDeviceCodeCatchesLies(t *testing.T) {
	skipHeavy(t, "the suite on ten lies of the liar plugin")
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
		if s := r.Summary(); !strings.HasPrefix(s, "PASS: liar conforms (") || !strings.Contains(s, "; not checked here: device-code)") {
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

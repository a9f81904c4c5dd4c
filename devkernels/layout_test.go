package devkernels

import (
	"errors"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
)

// TestSharedConstants reads the <entry>_shared constants of a PTX module as
// nvcc and NVRTC write them, and nothing else.
func TestSharedConstants(t *testing.T) {
	ptx := `.version 8.7
.const .align 4 .u32 mla_decode_m16_shared = 95232;
.const .align 4 .b32 mha_prefill_wg_shared = 214144;
.global .align 4 .u32 other = 7;
.const .align 4 .u32 not_a_shared_count = 3;
`
	got := SharedConstants(ptx)
	if len(got) != 2 || got["mla_decode_m16"] != 95232 || got["mha_prefill_wg"] != 214144 {
		t.Errorf("SharedConstants: %v", got)
	}
}

// TestEveryPlannedEntryHasItsSharedMemory: the embedded images' manifest
// gives the shared memory of every decode and prefill entry a plan can
// launch, on every architecture built, so that no plan is made without it.
func TestEveryPlannedEntryHasItsSharedMemory(t *testing.T) {
	if why := Stale(); why != "" {
		t.Skipf("the images are stale (TestImagesAreCurrent says so): %s", why)
	}
	for _, cc := range []int{80, 90} {
		shared, err := Kernels.Shared(cc)
		if err != nil {
			t.Fatal(err)
		}
		entries := []string{EntryPrefill}
		if cc == hopperCC {
			entries = []string{EntryPrefillWG, EntryPrefillTMA}
		}
		for f := decodeForm(0); f < numForms; f++ {
			for _, batch := range []int{1, 2} {
				for _, v := range variantsFor(f, cc, batch) {
					entries = append(entries, v.entry(f))
				}
			}
		}
		for _, e := range entries {
			if n := shared[e]; n <= 0 || n > 232448 {
				t.Errorf("compute capability %d: %s: %d bytes of shared memory", cc, e, n)
			}
		}
	}
}

// TestPlansWithoutSharedMemoryAreRefused: a planner that does not know an
// entry's shared memory makes no plan, saying which.
func TestPlansWithoutSharedMemoryAreRefused(t *testing.T) {
	req := &core.PlanRequest{Method: core.MLA, Dims: core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1},
		Shape:  core.PlanShape{SeqLens: []int64{100}, QLens: []int64{1}, PageSize: 64, NumPages: 8},
		Device: core.DeviceInfo{Platform: core.PlatformCUDA, ComputeCapability: 90, SMs: 132, MaxSharedPerBlock: 232448}}
	_, err := planDecode(req, formDense, layouts{})
	if !errors.Is(err, core.ErrNoPlan) || err == nil {
		t.Fatalf("no shared memory known: %v", err)
	}
	if want := "mla_decode_wg16"; !strings.Contains(err.Error(), want) {
		t.Errorf("the error does not name %s: %v", want, err)
	}
	_, err = planPrefill(&core.PlanRequest{Method: core.MHAOneShot, Device: core.DeviceInfo{ComputeCapability: 80}}, nil, layouts{})
	if !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), EntryPrefill) {
		t.Errorf("a prefill without its shared memory: %v", err)
	}
}

package core_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
)

// TestDeviceCheck: a device described out of bounds is refused, naming
// the field and its value; a real one passes.
func TestDeviceCheck(t *testing.T) {
	h100 := core.DeviceInfo{Platform: core.PlatformCUDA, Name: "NVIDIA H100 80GB HBM3", ComputeCapability: 90, SMs: 132,
		MaxThreadsPerBlock: 1024, MaxSharedPerBlock: 232448, MaxGrid: [3]int{1<<31 - 1, 65535, 65535}}
	if err := h100.Check(); err != nil {
		t.Fatal(err)
	}
	for want, edit := range map[string]func(*core.DeviceInfo){
		"device.name: 300 bytes":                           func(d *core.DeviceInfo) { d.Name = strings.Repeat("x", 300) },
		"device.compute_capability: 4294967386 is outside": func(d *core.DeviceInfo) { d.ComputeCapability = 1<<32 + 90 },
		"device.sms: -1 is outside":                        func(d *core.DeviceInfo) { d.SMs = -1 },
		"device.max_threads_per_block: 1048576":            func(d *core.DeviceInfo) { d.MaxThreadsPerBlock = 1 << 20 },
		"device.max_shared_per_block: 2147483648":          func(d *core.DeviceInfo) { d.MaxSharedPerBlock = 1 << 31 },
		"device.max_grid[2]: 4294967296":                   func(d *core.DeviceInfo) { d.MaxGrid[2] = 1 << 32 },
	} {
		d := h100
		edit(&d)
		if err := d.Check(); !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an invalid request naming %q", err, want)
		}
	}
}

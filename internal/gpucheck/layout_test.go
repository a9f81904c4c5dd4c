package gpucheck

import (
	"encoding/binary"
	"testing"

	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devkernels"
)

// TestSharedMemoryOfTheEntries: the dynamic shared memory the plans give
// each entry (devkernels.Kernels.Shared: the images' manifest, or NVRTC's
// build where the images are stale) is what the module the device loads
// says of it, its <entry>_shared constant, for every module the device runs.
func TestSharedMemoryOfTheEntries(t *testing.T) {
	e := openEnv(t)
	dev := e.Host.Device()
	var b devkernels.Builder
	mods, err := b.Modules(dev)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := devkernels.Kernels.Shared(dev.ComputeCapability)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = e.Do(func(x *cuda.Ctx) error {
		for _, m := range mods {
			h, err := x.LoadModule(m.Image)
			if err != nil {
				return err
			}
			for _, entry := range m.Entries {
				want, listed := shared[entry.Name]
				p, n, err := x.Global(h, entry.Name+"_shared")
				switch {
				case !listed && err == nil:
					t.Errorf("%s (%s %s) exports its shared memory, which the plans do not know", entry.Name, m.Name, m.Arch)
					continue
				case !listed:
					continue // a scheduler, a combine: no dynamic shared memory
				case err != nil || n != 4:
					t.Errorf("%s (%s %s): the plans give %d bytes, the module exports no 4-byte %s_shared (%d bytes, %v)",
						entry.Name, m.Name, m.Arch, want, entry.Name, n, err)
					continue
				}
				buf := make([]byte, 4)
				if err := x.CopyOut(buf, p); err != nil {
					return err
				}
				if got := int(binary.LittleEndian.Uint32(buf)); got != want {
					t.Errorf("%s (%s %s): the module says %d bytes of shared memory, the plans %d", entry.Name, m.Name, m.Arch, got, want)
				}
				checked++
			}
			if err := x.UnloadModule(h); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 15 {
		t.Errorf("%d entries checked; the decode and prefill entries of compute capability %d are more", checked, dev.ComputeCapability)
	}
	t.Logf("%d entries' shared memory read from the loaded modules (%s)", checked, mods[0].Format)
}

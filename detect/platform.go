package detect

import (
	"context"
	"strings"

	"github.com/attnplug/attnplug/core"
)

// FilePlatform is the platform of the hardware under root ("" means "/"),
// read from files alone: asking libcuda costs about 200 ms, too much for
// the start-up of a command that answers one request. Without libcuda, an
// NVIDIA GPU missing from the device-ID table has no known compute
// capability; it still makes the platform cuda when it passed every other
// check. A root that cannot be read is core.PlatformCPU.
func FilePlatform(ctx context.Context, root string) core.Platform {
	r, err := Detect(ctx, Options{Root: root, NoDriverQuery: true})
	if err != nil {
		return core.PlatformCPU
	}
	if r.Platform == PlatformCPU {
		for _, d := range r.Devices {
			if d.Vendor == VendorNVIDIA && d.Check() == CheckCapable && strings.Contains(d.Reason, "unknown device id") {
				return core.PlatformCUDA
			}
		}
	}
	return r.HostInfo().Platform
}

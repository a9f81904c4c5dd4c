package devkernels

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/attnplug/attnplug/core"
)

// Device code built ahead of time. `make device-code` (devkernels/gen,
// run where nvcc is: a GPU machine) compiles every module's source, as
// Sources gives it, to PTX for compute_80 and compute_90 and to cubins for
// sm_80 and sm_90 (the Hopper module to compute_90a and sm_90a alone:
// Archs), and writes them with a manifest into images/, which is
// committed and embedded here. A plugin then hands the host the image for
// its device's architecture without compiling anything: the lock file pins
// the same hashes on every machine, `attnplug plugins --kernels --arch`
// lists them where there is no GPU and no NVRTC, and a first launch loads
// a cubin in milliseconds. NVRTC is only the fallback for images that are
// stale (the sources changed since they were built) or missing.

//go:embed images
var imagesFS embed.FS

// Kernels is the device code of the plugins' kernels: the modules of Spec,
// built from Sources for the architectures of Archs, embedded from
// images/.
var Kernels = &Set{
	Name:    "kernels",
	FS:      imagesFS,
	Sources: Sources,
	Archs:   Archs,
	Spec:    specFor,
	Virtual: virtualArch,
}

// Manifest is the file format of images/manifest.json.
type Manifest struct {
	// Compiler is the nvcc that built the images (its --version's last
	// line).
	Compiler string `json:"compiler"`
	// Sources maps each module to the SHA-256 of what was compiled: its
	// source (Sources) and the compiler flags (SourceSHA256).
	Sources map[string]string `json:"sources"`
	// Images are the built images.
	Images []ManifestImage `json:"images"`
	// Shared is each entry's dynamic shared memory in bytes, as its
	// source exports it (<entry>_shared: SharedConstants), read from the
	// PTX built.
	Shared map[string]int `json:"shared,omitempty"`
}

// ManifestImage is one image of the manifest.
type ManifestImage struct {
	Module string            `json:"module"`
	Arch   string            `json:"arch"` // compute_80 (PTX), sm_90 (cubin)
	Format core.ModuleFormat `json:"format"`
	File   string            `json:"file"`
	SHA256 string            `json:"sha256"`
}

// EnvDeviceCode, set to "nvrtc", makes a plugin compile its device code
// with NVRTC although images built ahead of time would serve: a way to
// measure and check the fallback.
const EnvDeviceCode = "ATTNPLUG_DEVICE_CODE"

// Flags are the flags every image is compiled with, by nvcc ahead of
// time and by NVRTC at run time.
var Flags = []string{"-std=c++17", "-lineinfo"}

// Sources returns each module's CUDA C source as it is compiled: the tile
// helpers (and wgmma's, for the Hopper modules), then the module's own
// source.
func Sources() map[string]string {
	return map[string]string{
		ModuleMLADecode:      TileHeader + "\n" + MLACommonSource + "\n" + MLADecodeSource,
		ModuleMHAPrefill:     TileHeader + "\n" + MHAPrefillSource,
		ModuleMLADecodeSM90:  TileHeader + "\n" + SM90Header + "\n" + MLACommonSource + "\n" + MLADecodeSM90Source,
		ModuleMHAPrefillSM90: TileHeader + "\n" + SM90Header + "\n" + MHAPrefillSM90Source,
	}
}

// SourceSHA256 is the hash a manifest records for a module's source src:
// of src and Flags, so that a change of either makes the images stale.
func SourceSHA256(src string) string {
	h := sha256.New()
	h.Write([]byte(src))
	for _, f := range Flags {
		h.Write([]byte{0})
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// AheadOfTime are the architectures the images are built for: PTX for the
// virtual ones (JIT-compiled by the driver for any newer GPU), cubins for
// the real ones.
var AheadOfTime = []string{"compute_80", "compute_90", "sm_80", "sm_90"}

// Archs returns the architectures module name is built for ahead of time:
// AheadOfTime, or for a Hopper module (sm_90a's own instructions) its
// PTX and cubin alone.
func Archs(name string) []string {
	if hopperOnly(name) {
		return []string{virtualArch(name, hopperCC), fmt.Sprintf("sm_%da", hopperCC)}
	}
	return AheadOfTime
}

// archNumber is the number of an architecture name: 90 for sm_90 and
// compute_90, 0 for a name that is neither.
func archNumber(arch string) int {
	for _, p := range []string{"sm_", "compute_"} {
		if rest, ok := strings.CutPrefix(arch, p); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(rest, "a"))
			if err == nil {
				return n
			}
		}
	}
	return 0
}

package devkernels

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
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

// embedded returns the manifest of the embedded images, and why they
// cannot be used for the current sources: none built, or built from other
// sources (stale). why is "" when they can.
func embedded() (m Manifest, why string) {
	data, err := fs.ReadFile(imagesFS, "images/manifest.json")
	if err != nil {
		return m, "no device code was built ahead of time (make device-code)"
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Sprintf("images/manifest.json: %v", err)
	}
	for name, src := range Sources() {
		if got := m.Sources[name]; got != SourceSHA256(src) {
			return m, fmt.Sprintf("the images of %s were built from other sources than these (make device-code)", name)
		}
	}
	return m, ""
}

// Stale returns why the embedded images cannot serve the current sources,
// or "" when they can: the check `make test` runs, so that images are
// rebuilt with every change of the sources.
func Stale() string {
	_, why := embedded()
	return why
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

// aheadOfTime returns the modules for a device of compute capability cc
// from the embedded images: for each module, the cubin of the same major
// architecture and the highest minor up to cc's (a cubin runs on any GPU
// of its major revision and as new a minor), else the PTX of the highest
// virtual architecture up to cc (the driver JIT-compiles it). ok is false
// when the images cannot serve cc, with why.
func aheadOfTime(cc int) (mods []core.KernelModule, why string) {
	if os.Getenv(EnvDeviceCode) == "nvrtc" {
		return nil, "$" + EnvDeviceCode + " is nvrtc"
	}
	m, why := embedded()
	if why != "" {
		return nil, why
	}
	mods = specFor(cc)
	for i := range mods {
		var best *ManifestImage
		score := func(im *ManifestImage) int { // higher is better; 0 unusable
			n := archNumber(im.Arch)
			if n == 0 || launch.ArchRuns(core.KernelModule{Name: im.Module, Arch: im.Arch, Format: im.Format}, cc) != nil {
				return 0 // the host's own rule (a cubin of cc's major revision, PTX up to cc)
			}
			if im.Format == core.FormatCUBIN {
				return 1000 + n
			}
			return n
		}
		for j := range m.Images {
			im := &m.Images[j]
			if im.Module == mods[i].Name && score(im) > 0 && (best == nil || score(im) > score(best)) {
				best = im
			}
		}
		if best == nil {
			return nil, fmt.Sprintf("no image of %s built ahead of time runs on compute capability %d.%d", mods[i].Name, cc/10, cc%10)
		}
		image, err := fs.ReadFile(imagesFS, "images/"+best.File)
		if err != nil {
			return nil, fmt.Sprintf("images/%s: %v", best.File, err)
		}
		if sum := core.ImageSHA256(image); sum != best.SHA256 {
			return nil, fmt.Sprintf("images/%s hashes to %s, the manifest says %s", best.File, sum, best.SHA256)
		}
		mods[i].Arch, mods[i].Format, mods[i].Image, mods[i].SHA256 = best.Arch, best.Format, image, best.SHA256
	}
	return mods, ""
}

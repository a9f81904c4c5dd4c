package launch

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/attnplug/attnplug/core"
)

// Floor is what a kernel module's image needs of the host's CUDA driver:
// the oldest CUDA release whose driver loads it, and that release's
// oldest Linux driver. ArchRuns says whether an image runs on a device;
// Floor says whether a driver can load it at all. DriverFloor reads it
// from the image; its JSON field names are those of attnplug plugins
// --kernels --json and attnplug conform --json, where the release and
// driver are absent when not known.
type Floor struct {
	// Format is the image's format: ptx or cubin.
	Format core.ModuleFormat `json:"-"`
	// PTXISA is a PTX image's ISA version, its .version line ("9.0");
	// empty for a cubin.
	PTXISA string `json:"ptx_isa,omitempty"`
	// ImageArch is the architecture the image itself names: a PTX
	// image's .target ("sm_90a"), a cubin's SM from its ELF header
	// ("sm_90", with the module's variant: "sm_90a", which the headers of
	// CUDA 12.8 and later do not carry).
	ImageArch string `json:"image_arch,omitempty"`
	// Toolkit is the CUDA release that built a cubin, from its ELF notes
	// ("13.0"); empty for PTX and for a cubin that does not record it.
	Toolkit string `json:"toolkit,omitempty"`
	// CUDA is the oldest CUDA release whose driver loads the image
	// ("13.0").
	CUDA string `json:"min_cuda,omitempty"`
	// Driver is the oldest Linux driver of that release ("580.65.06"; for
	// CUDA 12.7, which shipped no toolkit, its driver branch "565").
	Driver string `json:"min_driver,omitempty"`
	// Version is CUDA as cuDriverGetVersion reports a driver's release:
	// 1000*major + 10*minor (13000 for 13.0).
	Version int `json:"-"`
}

// String says what the image is and what it needs: "PTX ISA 9.0 for
// sm_90: CUDA 13.0, driver 580.65.06 or newer".
func (f Floor) String() string {
	return f.Describe() + ": " + f.Needs()
}

// Needs says what f needs of a driver: "CUDA 13.0, driver 580.65.06 or
// newer".
func (f Floor) Needs() string {
	return fmt.Sprintf("CUDA %s, driver %s or newer", f.CUDA, f.Driver)
}

// Describe says what the image is: "PTX ISA 9.0 for sm_90", "a cubin
// for sm_90a built by CUDA 13.0".
func (f Floor) Describe() string {
	if f.Format == core.FormatPTX {
		return fmt.Sprintf("PTX ISA %s for %s", f.PTXISA, f.ImageArch)
	}
	s := "a cubin for " + f.ImageArch
	if f.Toolkit != "" {
		s += " built by CUDA " + f.Toolkit
	}
	return s
}

// Loads reports whether a driver of CUDA version driver (as
// cuDriverGetVersion reports it: 12040 for 12.4) loads the image; a
// driver version of 0 (not known) loads it.
func (f Floor) Loads(driver int) bool { return driver == 0 || driver >= f.Version }

// cudaRelease is one CUDA release: its version as cuDriverGetVersion
// reports it, and the oldest Linux x86_64 driver of it.
type cudaRelease struct {
	version int
	driver  string
}

// cudaReleases are the oldest Linux x86_64 driver of each CUDA release
// (its GA), from NVIDIA's CUDA Toolkit release notes, table "CUDA Toolkit
// and Corresponding Driver Versions" (docs.nvidia.com/cuda/
// cuda-toolkit-release-notes, read as of CUDA 13.1; 9.x to 10.x from the
// same table of the 11.x notes). CUDA 12.7 shipped no toolkit: it is the
// release the R565 drivers report, and PTX ISA 8.6's.
var cudaReleases = map[string]cudaRelease{
	"9.0": {9000, "384.81"}, "9.1": {9010, "390.46"}, "9.2": {9020, "396.26"},
	"10.0": {10000, "410.48"}, "10.1": {10010, "418.39"}, "10.2": {10020, "440.33"},
	"11.0": {11000, "450.51.05"}, "11.1": {11010, "455.23"}, "11.2": {11020, "460.27.03"},
	"11.3": {11030, "465.19.01"}, "11.4": {11040, "470.42.01"}, "11.5": {11050, "495.29.05"},
	"11.6": {11060, "510.39.01"}, "11.7": {11070, "515.43.04"}, "11.8": {11080, "520.61.05"},
	"12.0": {12000, "525.60.13"}, "12.1": {12010, "530.30.02"}, "12.2": {12020, "535.54.03"},
	"12.3": {12030, "545.23.06"}, "12.4": {12040, "550.54.14"}, "12.5": {12050, "555.42.02"},
	"12.6": {12060, "560.28.03"}, "12.7": {12070, "565"}, "12.8": {12080, "570.26"},
	"12.9": {12090, "575.51.03"}, "13.0": {13000, "580.65.06"}, "13.1": {13010, "590.44.01"},
}

// ptxISAs maps each PTX ISA version to the CUDA release that introduced
// it, whose driver is the oldest that loads it: NVIDIA's PTX ISA
// document, "Release Notes: PTX ISA Version / CUDA Release"
// (docs.nvidia.com/cuda/parallel-thread-execution, release history; the
// same table as cuda-python's cuda.bindings.utils
// get_minimal_required_cuda_ver_from_ptx_ver). A driver reads PTX up to
// the ISA of its own release and refuses a newer one with
// CUDA_ERROR_UNSUPPORTED_PTX_VERSION.
var ptxISAs = map[string]string{
	"6.0": "9.0", "6.1": "9.1", "6.2": "9.2", "6.3": "10.0", "6.4": "10.1", "6.5": "10.2",
	"7.0": "11.0", "7.1": "11.1", "7.2": "11.2", "7.3": "11.3", "7.4": "11.4", "7.5": "11.5",
	"7.6": "11.6", "7.7": "11.7", "7.8": "11.8",
	"8.0": "12.0", "8.1": "12.1", "8.2": "12.2", "8.3": "12.3", "8.4": "12.4", "8.5": "12.5",
	"8.6": "12.7", "8.7": "12.8", "8.8": "12.9",
	"9.0": "13.0", "9.1": "13.1",
}

// cubinArchs maps each real architecture to the first CUDA release that
// compiles for it, whose driver is the oldest that knows it: the PTX ISA
// that introduced the target (LLVM's NVPTX.td, "def : Proc<sm_XY, [...,
// PTXnn]>", which follows the PTX ISA document's targets) at its CUDA
// release; sm_100, sm_101 and sm_120, introduced by PTX ISA 8.6 and 8.7,
// are first compiled by CUDA 12.8, the first release that shipped them.
// An architecture-specific target (sm_90a) needs what its base does, or
// more.
var cubinArchs = map[string]string{
	"sm_70": "9.0", "sm_72": "9.1", "sm_75": "10.0",
	"sm_80": "11.0", "sm_86": "11.1", "sm_87": "11.4", "sm_88": "13.0", "sm_89": "11.8",
	"sm_90": "11.8", "sm_90a": "12.0",
	"sm_100": "12.8", "sm_100a": "12.8", "sm_101": "12.8", "sm_101a": "12.8",
	"sm_103": "12.9", "sm_103a": "12.9", "sm_110": "13.0", "sm_110a": "13.0",
	"sm_120": "12.8", "sm_120a": "12.8", "sm_121": "12.9", "sm_121a": "12.9",
}

// toolkitFamilies are the oldest driver of each CUDA major release that
// runs what any toolkit of that release built (CUDA minor version
// compatibility: NVIDIA's release notes, table "CUDA Toolkit and Minimum
// Required Driver Version for CUDA Minor Version Compatibility": 11.x
// 450.80.02, 12.x 525.60.13, 13.x 580). A cubin built by CUDA 13.0 is not
// for a CUDA 12 driver, whatever its architecture.
var toolkitFamilies = map[int]cudaRelease{
	11: {11000, "450.80.02"}, 12: {12000, "525.60.13"}, 13: {13000, "580.65.06"},
}

// DriverFloor returns the oldest CUDA release and driver that load module
// m's image, read from the image itself: for PTX (core.FormatPTX) its ISA
// version (.version) and target (.target), the driver being the oldest
// of the ISA's release; for a cubin (core.FormatCUBIN) the architecture
// in its ELF header's e_flags and the CUDA release that built it (the
// .note.nv.cuinfo note), the driver being the newer of the oldest that
// knows the architecture and the oldest of the building release's major
// (minor version compatibility). The error says what could not be read,
// or that the ISA or architecture is outside this host's tables; the
// Floor then holds what was read (Format, PTXISA, ImageArch, Toolkit).
// Other formats have no CUDA driver floor: an error.
func DriverFloor(m core.KernelModule) (Floor, error) {
	f := Floor{Format: m.Format}
	switch m.Format {
	case core.FormatPTX:
		isa, target, err := ptxHeader(m.Image)
		if err != nil {
			return f, fmt.Errorf("kernel module %q: %w", m.Name, err)
		}
		f.PTXISA, f.ImageArch = isa, target
		release, ok := ptxISAs[isa]
		if !ok {
			return f, fmt.Errorf("kernel module %q: PTX ISA %s is not in this host's table (PTX ISA 6.0 to 9.1): which driver loads it is not known here", m.Name, isa)
		}
		return f.at(release), nil
	case core.FormatCUBIN:
		sm, toolkit, err := cubinHeader(m.Image)
		if err != nil {
			return f, fmt.Errorf("kernel module %q: %w", m.Name, err)
		}
		f.ImageArch, f.Toolkit = sm, toolkit
		if n, specific, virtual, ok := parseArch(m.Arch); ok && !virtual {
			if got, _, _, _ := parseArch(sm); got != n {
				return f, fmt.Errorf("kernel module %q is declared for %s, but its cubin's ELF header says %s", m.Name, m.Arch, sm)
			}
			if specific {
				f.ImageArch = m.Arch
			}
		}
		var floor Floor
		if release, ok := cubinArchs[f.ImageArch]; ok {
			floor = f.at(release)
		}
		if major, _, ok := strings.Cut(toolkit, "."); ok {
			n, _ := strconv.Atoi(major)
			if fam, ok := toolkitFamilies[n]; ok && fam.version >= floor.Version {
				floor = f
				floor.CUDA, floor.Driver, floor.Version = fmt.Sprintf("%d.0", n), fam.driver, fam.version
			}
		}
		if floor.Version == 0 {
			return f, fmt.Errorf("kernel module %q: %s: which driver loads it is not known here", m.Name, f.Describe())
		}
		return floor, nil
	}
	return f, fmt.Errorf("kernel module %q is %s: only ptx and cubin images have a CUDA driver floor", m.Name, m.Format)
}

// at returns f with the floor of CUDA release r (a key of cudaReleases).
func (f Floor) at(r string) Floor {
	c := cudaReleases[r]
	f.CUDA, f.Driver, f.Version = r, c.driver, c.version
	return f
}

// CheckDriver returns why a driver of CUDA version driver (as
// cuDriverGetVersion reports it: 12040 for 12.4) cannot load module m, or
// nil when it can, or when that is not known here (a driver version of 0,
// an image DriverFloor cannot place): the driver then decides. The error
// names the module, what its image is (its PTX ISA, or a cubin's
// architecture and building release), the CUDA release and driver it
// needs and the driver found.
func CheckDriver(m core.KernelModule, driver int) error {
	f, err := DriverFloor(m)
	if err != nil || f.Loads(driver) {
		return nil
	}
	return fmt.Errorf("kernel module %s (%s for %s) is %s, which needs %s; this driver is CUDA %s (cuDriverGetVersion %d): upgrade the driver, or ship an image built by an older CUDA",
		m.Name, m.Format, m.Arch, f.Describe(), f.Needs(), DriverRelease(driver), driver)
}

// DriverRelease writes a driver's CUDA version as cuDriverGetVersion
// reports it (12040) as its release ("12.4").
func DriverRelease(driver int) string {
	return fmt.Sprintf("%d.%d", driver/1000, driver%1000/10)
}

// ptxHeader returns the ISA version and the first target of a PTX image:
// its .version and .target directives, which come first; comments are
// skipped wherever they are.
func ptxHeader(image []byte) (isa, target string, err error) {
	s := string(bytes.TrimRight(image, "\x00"))
	var line []byte
	// directive reads one line of the header; done says both are read.
	directive := func() (done bool, err error) {
		fields := strings.Fields(strings.ReplaceAll(string(line), ",", " "))
		line = line[:0]
		if len(fields) == 0 {
			return false, nil
		}
		switch fields[0] {
		case ".version":
			if isa != "" || len(fields) != 2 || !isISAVersion(fields[1]) {
				return false, fmt.Errorf("ptx: %.60q: want one .version X.Y", strings.Join(fields, " "))
			}
			isa = fields[1]
			return false, nil
		case ".target":
			if isa == "" {
				return false, errors.New("ptx: .target before .version: a PTX module starts with its .version")
			}
			if len(fields) < 2 {
				return false, errors.New("ptx: .target without an architecture")
			}
			target = fields[1]
			return true, nil
		}
		if isa == "" {
			return false, fmt.Errorf("ptx: %.40q before .version: a PTX module starts with its .version", fields[0])
		}
		return false, fmt.Errorf("ptx: %.40q before .target", fields[0])
	}
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "//"):
			if j := strings.IndexByte(s[i:], '\n'); j >= 0 {
				i += j
			} else {
				i = len(s)
			}
		case strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				return "", "", errors.New("ptx: comment not closed")
			}
			i += j + 4
			line = append(line, ' ')
		case s[i] == '\n':
			i++
			if done, err := directive(); err != nil || done {
				return isa, target, err
			}
		default:
			if len(line) > 4096 {
				return "", "", errors.New("ptx: a line of more than 4096 bytes before .version and .target")
			}
			line = append(line, s[i])
			i++
		}
	}
	if done, err := directive(); err != nil || done {
		return isa, target, err
	}
	if isa == "" {
		return "", "", errors.New("ptx: no .version directive")
	}
	return "", "", errors.New("ptx: no .target directive")
}

// isISAVersion reports whether s is a PTX ISA version: digits, a dot,
// digits, at most 5 characters.
func isISAVersion(s string) bool {
	major, minor, ok := strings.Cut(s, ".")
	return ok && len(s) <= 5 && major != "" && minor != "" &&
		strings.Trim(major, "0123456789") == "" && strings.Trim(minor, "0123456789") == ""
}

// The CUDA ELF header's layout: its e_machine, and the fields of e_flags
// that hold the architecture (LLVM's llvm/BinaryFormat/ELF.h, EF_CUDA_*).
// Up to ABI version 7 (nvcc before 12.8) the SM is the low byte
// (EF_CUDA_SM) and EF_CUDA_ACCELERATORS_V1 marks an architecture-specific
// target; from ABI version 8 the SM is bits 8 to 15 (EF_CUDA_SM_MASK),
// and the variant is not told apart reliably (cuobjdump names sm_90a
// cubins whose EF_CUDA_ACCELERATORS bit is clear): DriverFloor takes it
// from the module's Arch.
const (
	emCUDA               = 190
	efCUDASM             = 0xff
	efCUDAAcceleratorsV1 = 0x800
	efCUDASMMask         = 0xff00
	efCUDASMOffset       = 8
)

// cubinHeader returns a cubin's architecture ("sm_90", "sm_90a" where
// the header says so) from its ELF header, and the CUDA release that
// built it ("13.0"): from its .note.nv.cuinfo note (ABI version 8), else
// from e_version, where nvcc before CUDA 12.8 writes it (118 for 11.8,
// as the fill images of devkernels/fill show); empty when neither says.
func cubinHeader(image []byte) (sm, toolkit string, err error) {
	if len(image) < 64 || !bytes.HasPrefix(image, []byte("\x7fELF")) {
		return "", "", errors.New("cubin: not an ELF image")
	}
	// debug/elf wants e_version 1 (EV_CURRENT); read the image with it.
	eVersion := binary.LittleEndian.Uint32(image[20:])
	f, err := elf.NewFile(evCurrent{image})
	if err != nil {
		return "", "", fmt.Errorf("cubin: not an ELF image: %w", err)
	}
	if f.Data != elf.ELFDATA2LSB || f.Machine != emCUDA {
		return "", "", fmt.Errorf("cubin: ELF for machine %v (%v), not a CUDA one (EM_CUDA, little-endian)", f.Machine, f.Data)
	}
	off := 48 // e_flags in an ELF64 header
	if f.Class == elf.ELFCLASS32 {
		off = 36
	}
	flags := f.ByteOrder.Uint32(image[off : off+4])
	var n int
	var specific bool
	if f.ABIVersion >= 8 {
		n = int(flags&efCUDASMMask) >> efCUDASMOffset
	} else {
		n, specific = int(flags&efCUDASM), flags&efCUDAAcceleratorsV1 != 0
	}
	if n < 10 {
		return "", "", fmt.Errorf("cubin: ELF flags %#x (ABI version %d) name no architecture", flags, f.ABIVersion)
	}
	sm = fmt.Sprintf("sm_%d", n)
	if specific {
		sm += "a"
	}
	if s := f.Section(".note.nv.cuinfo"); s != nil {
		if data, err := s.Data(); err == nil {
			toolkit = cuinfoToolkit(data, f.ByteOrder)
		}
	}
	if toolkit == "" && f.ABIVersion < 8 && eVersion >= 90 && eVersion <= 999 {
		toolkit = fmt.Sprintf("%d.%d", eVersion/10, eVersion%10)
	}
	return sm, toolkit, nil
}

// evCurrent reads an ELF image as debug/elf wants it: with e_version 1,
// where a cubin may hold the CUDA release that built it.
type evCurrent struct{ image []byte }

func (r evCurrent) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= int64(len(r.image)) {
		return 0, io.EOF
	}
	n := copy(p, r.image[off:])
	for i := int64(20); i < 24; i++ { // e_version, little-endian
		if i >= off && i < off+int64(n) {
			p[i-off] = 0
			if i == 20 {
				p[i-off] = 1
			}
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// cuinfoToolkit reads the CUDA release that built a cubin from its
// .note.nv.cuinfo note ("NVIDIA Corp"): a 16-bit note version, the 16-bit
// virtual architecture, and the 32-bit toolkit version, 10*major+minor
// (130 for 13.0). It returns "" when the note is not one.
func cuinfoToolkit(note []byte, order binary.ByteOrder) string {
	if len(note) < 12 {
		return ""
	}
	namesz, descsz := int(order.Uint32(note)), int(order.Uint32(note[4:]))
	desc := 12 + (namesz+3)/4*4
	if namesz < 1 || namesz > 64 || descsz < 8 || len(note) < desc+8 ||
		string(bytes.TrimRight(note[12:12+namesz], "\x00")) != "NVIDIA Corp" {
		return ""
	}
	v := int(order.Uint32(note[desc+4:]))
	if v < 10 || v > 999 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/10, v%10)
}

package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// nvrtc holds the entry points of one loaded libnvrtc.
type nvrtc struct {
	path         string
	major, minor int

	nvrtcVersion           func(major, minor *int32) int32
	nvrtcGetErrorString    func(rc int32) string
	nvrtcCreateProgram     func(prog *uintptr, src, name string, nHeaders int32, headers, includeNames **byte) int32
	nvrtcCompileProgram    func(prog uintptr, nOpts int32, opts **byte) int32
	nvrtcGetPTXSize        func(prog uintptr, n *uintptr) int32
	nvrtcGetPTX            func(prog uintptr, buf *byte) int32
	nvrtcGetProgramLogSize func(prog uintptr, n *uintptr) int32
	nvrtcGetProgramLog     func(prog uintptr, buf *byte) int32
	nvrtcDestroyProgram    func(prog *uintptr) int32
}

// NVRTCEnv names the environment variable that, when set, is the path of the NVRTC
// library to load (for example /opt/cuda/lib64/libnvrtc.so.12); no other is tried then.
const NVRTCEnv = "ATTNPLUG_NVRTC"

type nvrtcResult struct {
	nv  *nvrtc
	err error
}

var (
	nvrtcMu    sync.Mutex
	nvrtcCache = map[int]nvrtcResult{} // by driver version
)

// getNVRTC loads NVRTC once per process. Among the libraries found it takes the newest
// whose version the driver supports (driverVersion as cuDriverGetVersion reports it,
// 12040 for CUDA 12.4; 0 means unknown), else the newest found.
func getNVRTC(driverVersion int) (*nvrtc, error) {
	nvrtcMu.Lock()
	defer nvrtcMu.Unlock()
	r, ok := nvrtcCache[driverVersion]
	if !ok {
		r.nv, r.err = findNVRTC(driverVersion)
		nvrtcCache[driverVersion] = r
	}
	return r.nv, r.err
}

// NVRTCCandidates returns, in the order they are tried, the NVRTC libraries this
// package would load: $ATTNPLUG_NVRTC alone when set; otherwise the libnvrtc.so* files
// in the CUDA toolkit, system and pip (nvidia-cuda-nvrtc) directories, newest version
// first, then the bare sonames for the dynamic loader's search path.
func NVRTCCandidates() []string {
	if p := os.Getenv(NVRTCEnv); p != "" {
		return []string{p}
	}
	return append(libraryCandidates("libnvrtc", "cuda_nvrtc"), "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so")
}

// libraryCandidates returns the files lib.so* in the CUDA toolkit, system
// and pip (nvidia-<pipdir>, cu13, cu12) directories, newest version first.
func libraryCandidates(lib, pipDir string) []string {
	var dirs []string
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"} {
		if p := os.Getenv(v); p != "" {
			dirs = append(dirs, filepath.Join(p, "lib64"), filepath.Join(p, "lib"))
		}
	}
	dirs = append(dirs,
		"/usr/local/cuda/lib64", "/usr/local/cuda/targets/*/lib",
		"/usr/local/cuda-*/lib64", "/usr/local/cuda-*/targets/*/lib",
		"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
		"/opt/cuda/lib64", "/opt/conda/lib",
	)
	pyRoots := []string{"/usr/local/lib/python3*", "/usr/lib/python3*", "/opt/conda/lib/python3*", "/opt/*/.venv/lib/python3*"}
	if h, err := os.UserHomeDir(); err == nil {
		pyRoots = append(pyRoots, filepath.Join(h, ".local/lib/python3*"))
	}
	if v := os.Getenv("VIRTUAL_ENV"); v != "" {
		pyRoots = append(pyRoots, filepath.Join(v, "lib/python3*"))
	}
	for _, r := range pyRoots {
		for _, pk := range []string{"site-packages", "dist-packages"} {
			for _, sub := range []string{pipDir + "/lib", "cu13/lib", "cu12/lib"} {
				dirs = append(dirs, filepath.Join(r, pk, "nvidia", sub))
			}
		}
	}
	type cand struct {
		path string
		ver  []int
	}
	var found []cand
	seen := map[string]bool{}
	for _, d := range dirs {
		matches, _ := filepath.Glob(filepath.Join(d, lib+".so*"))
		for _, m := range matches {
			real, err := filepath.EvalSymlinks(m)
			if err != nil || seen[real] {
				continue
			}
			seen[real] = true
			found = append(found, cand{m, soVersion(real)})
		}
	}
	slices.SortStableFunc(found, func(a, b cand) int { return -slices.Compare(a.ver, b.ver) })
	var out []string
	for _, c := range found {
		out = append(out, c.path)
	}
	return out
}

// soVersion parses the numbers after ".so." in a library file name.
func soVersion(path string) []int {
	_, rest, ok := strings.Cut(filepath.Base(path), ".so.")
	if !ok {
		return nil
	}
	var v []int
	for _, f := range strings.Split(rest, ".") {
		n, err := strconv.Atoi(f)
		if err != nil {
			break
		}
		v = append(v, n)
	}
	return v
}

func findNVRTC(driverVersion int) (*nvrtc, error) {
	var first *nvrtc
	var errs []error
	for _, name := range NVRTCCandidates() {
		nv, err := loadNVRTCLib(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var maj, min int32
		if rc := nv.nvrtcVersion(&maj, &min); rc != 0 {
			errs = append(errs, fmt.Errorf("%s: nvrtcVersion: %d", name, rc))
			continue
		}
		nv.major, nv.minor = int(maj), int(min)
		if driverVersion == 0 || nv.major*1000+nv.minor*10 <= driverVersion {
			return nv, nil
		}
		if first == nil {
			first = nv
		}
	}
	if first != nil {
		return first, nil
	}
	if len(errs) > 3 {
		errs = append(errs[:3], fmt.Errorf("and %d more", len(errs)-3))
	}
	return nil, fmt.Errorf("%w: %w", ErrNoNVRTC, joinErrs(errs...))
}

func (nv *nvrtc) check(call string, rc int32) error {
	if rc == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(rc), Name: nv.nvrtcGetErrorString(rc)}
}

// compile compiles src to PTX with the given NVRTC options.
func (nv *nvrtc) compile(src, name string, opts []string) (string, error) {
	var prog uintptr
	if err := nv.check("nvrtcCreateProgram", nv.nvrtcCreateProgram(&prog, src, name, 0, nil, nil)); err != nil {
		return "", err
	}
	defer nv.nvrtcDestroyProgram(&prog)
	var pin runtime.Pinner
	defer pin.Unpin()
	cs := make([]*byte, len(opts))
	for i, o := range opts {
		b := append([]byte(o), 0)
		cs[i] = &b[0]
		pin.Pin(cs[i])
	}
	var optp **byte
	if len(cs) > 0 {
		optp = &cs[0]
		pin.Pin(optp)
	}
	rc := nv.nvrtcCompileProgram(prog, int32(len(cs)), optp)
	if rc != 0 {
		e := &Error{Call: "nvrtcCompileProgram", Code: int(rc), Name: nv.nvrtcGetErrorString(rc)}
		var n uintptr
		if nv.nvrtcGetProgramLogSize(prog, &n) == 0 && n > 1 {
			buf := make([]byte, n)
			if nv.nvrtcGetProgramLog(prog, &buf[0]) == 0 {
				e.Log = strings.TrimSpace(cString(buf))
			}
		}
		return "", e
	}
	var n uintptr
	if err := nv.check("nvrtcGetPTXSize", nv.nvrtcGetPTXSize(prog, &n)); err != nil {
		return "", err
	}
	if n == 0 {
		return "", &Error{Call: "nvrtcGetPTXSize", Name: "empty PTX"}
	}
	buf := make([]byte, n)
	if err := nv.check("nvrtcGetPTX", nv.nvrtcGetPTX(prog, &buf[0])); err != nil {
		return "", err
	}
	return cString(buf), nil
}

// CompilePTX compiles CUDA C source to PTX with NVRTC, passing opts (for example
// "--gpu-architecture=compute_90"); it needs no GPU, only an NVRTC library (see
// NVRTCCandidates). The error of a failed compilation is an *Error whose Log holds the
// compiler's messages.
func CompilePTX(src, name string, opts ...string) (string, error) {
	nv, err := getNVRTC(0)
	if err != nil {
		return "", err
	}
	return nv.compile(src, name, opts)
}

// NVRTCVersion returns the path and version of the NVRTC library CompilePTX uses.
func NVRTCVersion() (path string, major, minor int, err error) {
	nv, err := getNVRTC(0)
	if err != nil {
		return "", 0, 0, err
	}
	return nv.path, nv.major, nv.minor, nil
}

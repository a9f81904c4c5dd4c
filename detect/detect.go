package detect

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// Options configures Detect.
type Options struct {
	// Root is the directory that holds sys/, proc/ and dev/; "" means "/".
	Root string
	// TPSize is the tensor-parallel size the default backends are computed
	// for (it matters on ROCm); 0 means 1.
	TPSize int
	// NoDriverQuery skips asking libcuda for compute capabilities on the
	// real root, leaving only the PCI device-ID table.
	NoDriverQuery bool
}

// env is everything Detect reads that is not a plain file under the root,
// so tests can replace it.
type env struct {
	root   string
	real   bool // root is "/": libcuda and arch_prctl apply
	goarch string
	// open opens a device node (an absolute path under root) and closes it.
	open func(path string) error
	// cuda asks the NVIDIA driver for its devices; nil skips it.
	cuda func(ctx context.Context) ([]cudaDevice, error)
	// xcomp returns the kernel's ARCH_GET_XCOMP_SUPP mask; nil skips it.
	xcomp func() (uint64, error)
}

// cudaDevice is what libcuda reports for one device.
type cudaDevice struct {
	pciAddress   string
	major, minor int
	name         string
}

// Detect reads the hardware under opts.Root and returns a report with a
// verdict for every accelerator, the platform and the default backends.
// Missing files are normal and only make devices unusable; Detect fails
// only when the root itself cannot be read or ctx is done.
func Detect(ctx context.Context, opts Options) (*Report, error) {
	root := opts.Root
	if root == "" {
		root = "/"
	}
	e := &env{root: root, open: openNode}
	if abs, err := filepath.Abs(root); err == nil && abs == "/" {
		e.real = true
		e.goarch = runtime.GOARCH
		e.xcomp = xcompSupported
		if !opts.NoDriverQuery {
			e.cuda = queryCUDA
		}
	}
	return detect(ctx, opts, e)
}

func detect(ctx context.Context, opts Options, e *env) (*Report, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("detect: %w", err)
	}
	fi, err := os.Stat(e.root)
	if err != nil {
		return nil, fmt.Errorf("detect: root: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("detect: root %s is not a directory", e.root)
	}
	if opts.TPSize < 0 {
		return nil, fmt.Errorf("detect: tp size %d is negative", opts.TPSize)
	}

	pcis := scanPCI(e)
	byVendor := map[uint16][]pciDev{}
	var unlisted []pciDev
	for _, p := range pcis {
		if p.unlisted {
			unlisted = append(unlisted, p)
			continue
		}
		byVendor[p.vendor] = append(byVendor[p.vendor], p)
	}
	devices := []Device{}
	devices = append(devices, nvidiaDevices(ctx, e, byVendor[pciVendorNVIDIA])...)
	devices = append(devices, amdDevices(e, byVendor[pciVendorAMD])...)
	devices = append(devices, ascendDevices(e, byVendor[pciVendorHuawei])...)
	devices = append(devices, intelDevices(e, byVendor[pciVendorIntel])...)
	devices = append(devices, unlistedDevices(e, unlisted)...)
	drivers := map[string]string{}
	for _, p := range pcis {
		drivers[p.addr] = p.driver
	}
	for i := range devices {
		d := &devices[i]
		d.VendorID, d.DeviceID, _ = strings.Cut(d.PCIID, ":")
		d.Driver = drivers[d.PCIAddress]
	}
	sort.SliceStable(devices, func(i, j int) bool { return devices[i].PCIAddress < devices[j].PCIAddress })
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("detect: %w", err)
	}

	tp := opts.TPSize
	if tp == 0 {
		tp = 1
	}
	r := &Report{
		Devices: devices,
		CPU:     detectCPU(e),
		Plugins: []PluginInfo{},
		Root:    e.root,
		TPSize:  tp,
	}
	r.Platform = choosePlatform(r.Devices)
	r.DefaultBackend = defaults(r)
	return r, nil
}

// path returns the file for a root-relative path such as "proc/cpuinfo".
func (e *env) path(rel string) string { return filepath.Join(e.root, filepath.FromSlash(rel)) }

// disp returns how a root-relative path is shown in reasons: as it is on
// the machine, "/dev/nvidia0", whatever the root.
func disp(rel string) string { return "/" + rel }

// readFile reads a root-relative file.
func (e *env) readFile(rel string) ([]byte, error) { return os.ReadFile(e.path(rel)) }

// exists reports whether a root-relative path exists.
func (e *env) exists(rel string) bool {
	_, err := os.Stat(e.path(rel))
	return err == nil
}

// openRel opens a root-relative device node and returns a reason-ready
// description of the failure, or "" when it opened.
func (e *env) openRel(rel string) string {
	err := e.open(e.path(rel))
	if err == nil {
		return ""
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return disp(rel) + " missing"
	case errors.Is(err, fs.ErrPermission):
		return disp(rel) + ": permission denied"
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return disp(rel) + ": " + err.Error()
}

// openNode opens and closes a device node.
func openNode(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return f.Close()
}

// firstLine returns the trimmed first line of b.
func firstLine(b []byte) string {
	s := string(b)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// reason formats "<check>: <detail>".
func reason(check, format string, args ...any) string {
	return check + ": " + fmt.Sprintf(format, args...)
}

// driverReason checks the bound driver against the accepted names and
// returns a reason, or "" when one of them is bound.
func driverReason(p pciDev, accepted ...string) string {
	switch {
	case p.driver == "":
		return reason(CheckDriver, "no kernel driver bound to %s", p.addr)
	case p.driver == "vfio-pci":
		return reason(CheckDriver, "bound to vfio-pci (passed through to a VM), not usable here")
	}
	for _, a := range accepted {
		if p.driver == a {
			return ""
		}
	}
	if len(accepted) == 0 {
		return ""
	}
	return reason(CheckDriver, "bound to %s, expected %s", p.driver, strings.Join(accepted, " or "))
}

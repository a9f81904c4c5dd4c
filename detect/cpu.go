package detect

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// xfeatureXTileData is the XSAVE feature bit of AMX tile data.
const xfeatureXTileData = 18

// cpuInfo is what Detect takes from /proc/cpuinfo: the first value of
// each key, as the first processor lists them.
type cpuInfo struct {
	vendor      string // vendor_id (x86)
	model       string // model name (x86)
	flags       []string
	hasFlags    bool
	features    []string // arm64 "Features"
	implementer string   // arm64 "CPU implementer", e.g. "0x41"
	part        string   // arm64 "CPU part"
}

// parseCPUInfo parses /proc/cpuinfo. It fails when no line has the
// "key : value" form.
func parseCPUInfo(b []byte) (cpuInfo, error) {
	var c cpuInfo
	seen := map[string]bool{}
	lines := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		key = strings.TrimSpace(key)
		val = strings.TrimSpace(val)
		if key == "" {
			continue
		}
		lines++
		if seen[key] {
			continue
		}
		seen[key] = true
		switch key {
		case "vendor_id":
			c.vendor = val
		case "model name":
			c.model = val
		case "flags":
			c.flags, c.hasFlags = strings.Fields(val), true
		case "Features":
			c.features = strings.Fields(val)
		case "CPU implementer":
			c.implementer = val
		case "CPU part":
			c.part = val
		}
	}
	if err := sc.Err(); err != nil {
		return c, fmt.Errorf("reading cpuinfo: %w", err)
	}
	if lines == 0 {
		return c, errors.New("no \"key : value\" lines")
	}
	return c, nil
}

// arch returns "amd64" for x86 (a "flags" line), "arm64" for Arm (a
// "Features" or "CPU implementer" line), else "".
func (c cpuInfo) arch() string {
	switch {
	case c.hasFlags:
		return "amd64"
	case c.features != nil || c.implementer != "":
		return "arm64"
	}
	return ""
}

// amxFlags returns the amx_* flags.
func (c cpuInfo) amxFlags() []string {
	var out []string
	for _, f := range c.flags {
		if strings.HasPrefix(f, "amx_") {
			out = append(out, f)
		}
	}
	return out
}

// hasAMX reports amx_tile plus amx_bf16 or amx_int8.
func (c cpuInfo) hasAMX() bool {
	has := map[string]bool{}
	for _, f := range c.flags {
		has[f] = true
	}
	return has["amx_tile"] && (has["amx_bf16"] || has["amx_int8"])
}

// armImplementer names the common arm64 implementer codes.
func armImplementer(code string) string {
	switch strings.ToLower(code) {
	case "0x41":
		return "ARM"
	case "0x48":
		return "HiSilicon"
	case "0x4e":
		return "NVIDIA"
	case "0x61":
		return "Apple"
	case "0xc0":
		return "Ampere"
	}
	return code
}

// detectCPU reads proc/cpuinfo and, on the real root, asks the kernel
// whether it supports AMX tile data.
func detectCPU(e *env) CPU {
	var c CPU
	b, err := e.readFile("proc/cpuinfo")
	var info cpuInfo
	if err == nil {
		info, err = parseCPUInfo(b)
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", disp("proc/cpuinfo"), err)
	}
	c.Arch = info.arch()
	if c.Arch == "" && e.real {
		c.Arch = e.goarch
	}
	switch c.Arch {
	case "arm64":
		c.Vendor = armImplementer(info.implementer)
		if info.part != "" {
			c.Model = "part " + info.part
		}
	default:
		c.Vendor, c.Model = info.vendor, info.model
	}
	c.AMXFlags = info.amxFlags()
	c.AMXKernel = "not checked"
	switch {
	case err != nil:
		c.Reason = fmt.Sprintf("CPU features unknown (%v)", err)
	case c.Arch == "arm64":
		c.Reason = "AMX is an x86 feature; this CPU is arm64"
	case !info.hasAMX():
		c.Reason = "CPU lacks AMX (no amx_tile with amx_bf16 or amx_int8 in /proc/cpuinfo flags)"
	case e.xcomp == nil:
		c.AMX = true // a fixture root: the flags are all there is
	default:
		mask, xerr := e.xcomp()
		switch {
		case xerr != nil:
			c.AMXKernel = "unsupported"
			c.Reason = fmt.Sprintf("kernel does not grant AMX (arch_prctl ARCH_GET_XCOMP_SUPP: %v); AMX needs Linux >= 5.16", xerr)
		case mask&(1<<xfeatureXTileData) == 0:
			c.AMXKernel = "unsupported"
			c.Reason = fmt.Sprintf("kernel XSAVE features %#x lack XTILEDATA (bit %d); AMX needs Linux >= 5.16", mask, xfeatureXTileData)
		default:
			c.AMXKernel = "supported"
			c.AMX = true
		}
	}
	return c
}

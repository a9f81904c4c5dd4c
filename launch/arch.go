package launch

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/attnplug/attnplug/core"
)

// ArchRuns returns why module m's image cannot run on a CUDA device of
// compute capability cc, or nil when it can, by its Arch and Format: a
// cubin for sm_XY runs on major revision X at minor Y or newer; PTX for
// compute_XY is compiled by the driver for XY or newer; an
// architecture-specific target (sm_XYa, compute_XYa: sm_90a's wgmma and
// setmaxnreg) runs on compute capability XY alone. An Arch it does not
// read (not sm_ or compute_ and a number, or another platform's) is left
// to the driver: nil.
func ArchRuns(m core.KernelModule, cc int) error {
	n, specific, virtual, ok := parseArch(m.Arch)
	if !ok || virtual != (m.Format == core.FormatPTX) {
		return nil
	}
	at := fmt.Sprintf("compute capability %d.%d", cc/10, cc%10)
	switch {
	case specific && n != cc:
		return fmt.Errorf("kernel module %q is built for %s, which runs on compute capability %d.%d alone, not on %s",
			m.Name, m.Arch, n/10, n%10, at)
	case !virtual && (n/10 != cc/10 || n > cc):
		return fmt.Errorf("kernel module %q is a cubin for %s, which runs on compute capability %d.%d to %d.9, not on %s",
			m.Name, m.Arch, n/10, n%10, n/10, at)
	case virtual && n > cc:
		return fmt.Errorf("kernel module %q is PTX for %s, which needs compute capability %d.%d or newer, not %s",
			m.Name, m.Arch, n/10, n%10, at)
	}
	return nil
}

// parseArch reads sm_XY[a] (virtual false) or compute_XY[a] (virtual
// true); specific is the "a" suffix.
func parseArch(arch string) (n int, specific, virtual, ok bool) {
	rest, isSM := strings.CutPrefix(arch, "sm_")
	if !isSM {
		if rest, virtual = strings.CutPrefix(arch, "compute_"); !virtual {
			return 0, false, false, false
		}
	}
	rest, specific = strings.CutSuffix(rest, "a")
	n, err := strconv.Atoi(rest)
	if err != nil || n < 10 || n > 999 {
		return 0, false, false, false
	}
	return n, specific, virtual, true
}

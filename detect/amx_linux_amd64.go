//go:build linux && amd64

package detect

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// archGetXCompSupp is ARCH_GET_XCOMP_SUPP: the XSAVE features the kernel
// supports for user space (Linux >= 5.16).
const archGetXCompSupp = 0x1021

// xcompSupported returns the kernel's ARCH_GET_XCOMP_SUPP mask.
func xcompSupported() (uint64, error) {
	var mask uint64
	_, _, errno := unix.Syscall(unix.SYS_ARCH_PRCTL, archGetXCompSupp, uintptr(unsafe.Pointer(&mask)), 0)
	if errno != 0 {
		return 0, errno
	}
	return mask, nil
}

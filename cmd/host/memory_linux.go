package main

import "golang.org/x/sys/unix"

// physicalMemory returns the bytes of this machine's memory, or 0 when
// the kernel does not say.
func physicalMemory() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

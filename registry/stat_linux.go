//go:build linux

package registry

import (
	"fmt"
	"os"
	"syscall"
)

// fileIdentity is a file's device, inode, size, modification and change
// times, or "" when the platform gives none.
func fileIdentity(st os.FileInfo) string {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d:%d:%d:%d.%d:%d.%d", sys.Dev, sys.Ino, sys.Size, sys.Mtim.Sec, sys.Mtim.Nsec, sys.Ctim.Sec, sys.Ctim.Nsec)
}

// procAttr makes the plugin die with the host (Pdeathsig) and puts it in
// a process group of its own, so a terminal's Ctrl-C reaches the host only,
// which then ends the plugin itself.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

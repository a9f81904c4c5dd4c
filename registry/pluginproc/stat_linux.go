//go:build linux

package pluginproc

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

//go:build unix

package localsock

import (
	"os"
	"syscall"
)

// owner is the uid that owns the file of st, when the system says.
func owner(st os.FileInfo) (int, bool) {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(sys.Uid), true
	}
	return 0, false
}

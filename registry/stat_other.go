//go:build !linux

package registry

import (
	"os"
	"syscall"
)

// fileIdentity gives no identity here: every start hashes the binary.
func fileIdentity(os.FileInfo) string { return "" }

// procAttr puts the plugin in a process group of its own; the
// parent-death pipe ends it with the host (there is no Pdeathsig here).
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

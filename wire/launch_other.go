//go:build !linux

package wire

import "syscall"

// procAttr puts the plugin in a process group of its own; the parent-death
// pipe ends it with the host (there is no Pdeathsig here).
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// execByFD says that a process can be run from an open descriptor of its
// binary (LaunchConfig.File).
const execByFD = false

//go:build linux

package wire

import "syscall"

// procAttr makes the plugin die with the host's thread (Pdeathsig) and puts
// it in a process group of its own, so a terminal's Ctrl-C reaches the host
// only, which then ends the plugin itself.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// execByFD says that a process can be run from an open descriptor of its
// binary (LaunchConfig.File).
const execByFD = true

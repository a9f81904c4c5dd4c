//go:build linux

package localsock

import "syscall"

func peerOfFD(fd int) (Peer, error) {
	c, err := syscall.GetsockoptUcred(fd, syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	if err != nil {
		return Peer{}, err
	}
	return Peer{PID: int(c.Pid), UID: int(c.Uid), GID: int(c.Gid)}, nil
}

//go:build darwin || freebsd

package localsock

import "golang.org/x/sys/unix"

func peerOfFD(fd int) (Peer, error) {
	c, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return Peer{}, err
	}
	p := Peer{UID: int(c.Uid), GID: -1}
	if c.Ngroups > 0 {
		p.GID = int(c.Groups[0])
	}
	return p, nil
}

//go:build !linux && !darwin && !freebsd

package localsock

func peerOfFD(int) (Peer, error) { return Peer{}, ErrNoPeerCredentials }

package localsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// Dir is the private directory of the user's attnplug sockets, where
// attnplug serve listens by default (serve.sock) and each host makes the
// directory of its plugins' sockets: $XDG_RUNTIME_DIR/attnplug when
// XDG_RUNTIME_DIR is an absolute path, else <os.TempDir()>/attnplug-<uid>
// ($TMPDIR, else /tmp). The Python client computes the same path.
func Dir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "attnplug")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("attnplug-%d", os.Getuid()))
}

// MakePrivateDir makes dir with mode 0700 when it is absent (its parent
// must exist), and checks it as CheckPrivateDir does: one that another
// user made first is refused, never used.
func MakePrivateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("private directory: %w", err)
	}
	return CheckPrivateDir(dir)
}

// CheckPrivateDir refuses dir unless it is a directory (not a symbolic
// link) that the caller owns and that no other user may enter, list or
// write (no group or other permission bits): what it holds would be open
// to them, or theirs.
func CheckPrivateDir(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("private directory: %w", err)
	}
	uid, known := owner(st)
	switch {
	case !st.IsDir():
		return fmt.Errorf("private directory %s is not a directory (%s)", dir, st.Mode().Type())
	case known && uid != os.Getuid():
		return fmt.Errorf("private directory %s is owned by %s, not by you (uid %d): another user may have made it to take your place", dir, Describe(uid), os.Getuid())
	case st.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("private directory %s has mode %s, want 0700 (no access for group or others)", dir, st.Mode().Perm())
	}
	return nil
}

// CheckOwnedDir refuses dir unless it is a directory (not a symbolic
// link) that the caller owns and that no other user may write: what it
// holds is trusted (a cache). Others may read it.
func CheckOwnedDir(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	uid, known := owner(st)
	switch {
	case !st.IsDir():
		return fmt.Errorf("%s is not a directory (%s)", dir, st.Mode().Type())
	case known && uid != os.Getuid():
		return fmt.Errorf("%s is owned by %s, not by you (uid %d)", dir, Describe(uid), os.Getuid())
	case st.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s has mode %s: group or others may write it", dir, st.Mode().Perm())
	}
	return nil
}

// Peer is the credentials of the process at the other end of a Unix
// socket, as the kernel recorded them when it connected (or listened).
type Peer struct {
	PID int // 0 when the system does not say
	UID int
	GID int
}

// ErrNoPeerCredentials is returned by PeerOf on a system where the
// kernel does not say who the peer is.
var ErrNoPeerCredentials = errors.New("this system does not tell the credentials of a Unix socket's peer")

// PeerOf returns the credentials of the peer of conn, a Unix socket
// connection.
func PeerOf(conn net.Conn) (Peer, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return Peer{}, fmt.Errorf("peer credentials: %T is not a socket", conn)
	}
	if _, ok := conn.LocalAddr().(*net.UnixAddr); !ok {
		return Peer{}, fmt.Errorf("peer credentials: %s is not a Unix socket", conn.LocalAddr())
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	var p Peer
	var perr error
	if err := raw.Control(func(fd uintptr) { p, perr = peerOfFD(int(fd)) }); err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	if perr != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", perr)
	}
	return p, nil
}

// Policy says which peers may be at the other end of a socket: the
// caller's own user and root always, and the members of Group when
// Group is not negative (attnplug serve's --socket-group).
type Policy struct {
	Group int
}

// Self is the Policy of the caller's own user and root alone.
var Self = Policy{Group: -1}

// Allows reports whether p may be at the other end: its uid is the
// caller's or root's, or Group is its group or one its user belongs to.
func (pol Policy) Allows(p Peer) bool {
	if p.UID == os.Getuid() || p.UID == 0 {
		return true
	}
	if pol.Group < 0 {
		return false
	}
	if p.GID == pol.Group {
		return true
	}
	return memberOf(p.UID, pol.Group)
}

// memberOf reports whether the user uid belongs to group gid by the
// user database (/etc/group).
func memberOf(uid, gid int) bool {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return false
	}
	ids, err := u.GroupIds()
	if err != nil {
		return false
	}
	return slices.Contains(ids, strconv.Itoa(gid))
}

// LookupGroup returns the gid of the group name, a group name or a
// numeric gid.
func LookupGroup(name string) (int, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		if _, nerr := strconv.Atoi(name); nerr == nil {
			g, err = user.LookupGroupId(name)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("group %q: %w", name, err)
	}
	return strconv.Atoi(g.Gid)
}

// Describe names the user of uid for an error: "uid 65534 (nobody)".
func Describe(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" {
		return fmt.Sprintf("uid %d (%s)", uid, u.Username)
	}
	return fmt.Sprintf("uid %d", uid)
}

package engine

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// setSocketMode gives the socket file made at path (made: its Lstat at
// bind) mode, and group gid when gid >= 0, through a descriptor of that
// very file (O_PATH, no symlink followed): the path swapped for a link
// between the bind and now changes nothing but the socket, and is an
// error.
func setSocketMode(path string, made os.FileInfo, mode os.FileMode, gid int) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	was, ok := made.Sys().(*syscall.Stat_t)
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || !ok || uint64(st.Dev) != uint64(was.Dev) || st.Ino != was.Ino {
		return fmt.Errorf("%s is no longer the socket this server bound (replaced after the bind)", path)
	}
	if gid >= 0 {
		if err := unix.Fchownat(fd, "", -1, gid, unix.AT_EMPTY_PATH); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	// chmod of an O_PATH descriptor goes through its /proc link, which
	// names this inode whatever the path now is.
	if err := unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), uint32(mode.Perm())); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

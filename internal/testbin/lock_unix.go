//go:build unix

package testbin

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes the exclusive lock of dir (a file lock on dir/lock), waiting
// for it; the function returned releases it.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("testbin: lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// checkOwned refuses a directory that another user owns or may write to:
// the tests run what it holds.
func checkOwned(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || (ok && int(sys.Uid) != os.Getuid()) || st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("testbin: %s is not a directory of this user that only it may write to; set $%s", dir, EnvCacheDir)
	}
	return nil
}

//go:build unix

package testbin

import (
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Nobody returns the credentials of the user nobody, for a test that
// starts a process as a second local user (exec.Cmd's
// SysProcAttr.Credential), or skips t, saying why: only root may start a
// process as another user (the tests run as root on CI), and the user
// must exist.
func Nobody(t testing.TB) *syscall.Credential {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skipf("starts a process as the user nobody, which only root may do (running as uid %d)", os.Getuid())
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("starts a process as the user nobody: %v", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil || uid == 0 {
		t.Skipf("starts a process as the user nobody, whose ids are %q:%q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
}

// Shareable copies the executable at path into a new directory that
// every user may enter and run, removed at the end of t, and returns the
// copy: a process started as nobody cannot reach the private temporary
// directories where the tests keep their binaries.
func Shareable(t testing.TB, path string) string {
	t.Helper()
	dir := SharedDir(t)
	dst := filepath.Join(dir, filepath.Base(path))
	src, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// SharedDir makes a new directory that every user may enter and read
// (mode 0755, in the system's temporary directory), removed at the end
// of t.
func SharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "attnplug-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// DirOf makes a new directory owned by the user of cred with mode 0700,
// in a directory every user may enter, removed at the end of t: the
// private directory of a process started as that user.
func DirOf(t testing.TB, cred *syscall.Credential) string {
	t.Helper()
	dir := filepath.Join(SharedDir(t), "home")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		t.Fatal(err)
	}
	return dir
}

package localsock_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/internal/testbin"
	"github.com/attnplug/attnplug/localsock"
)

// TestDir: $XDG_RUNTIME_DIR/attnplug when it is an absolute path, else
// attnplug-<uid> in the temporary directory.
func TestDir(t *testing.T) {
	own := fmt.Sprintf("attnplug-%d", os.Getuid())
	for _, tc := range []struct{ xdg, tmp, want string }{
		{"/run/user/7", "/x", "/run/user/7/attnplug"},
		{"", "/x", "/x/" + own},
		{"relative", "/x", "/x/" + own},
		{"", "", "/tmp/" + own},
	} {
		t.Setenv("XDG_RUNTIME_DIR", tc.xdg)
		t.Setenv("TMPDIR", tc.tmp)
		if got := localsock.Dir(); got != tc.want {
			t.Errorf("XDG_RUNTIME_DIR=%q TMPDIR=%q: Dir() = %q, want %q", tc.xdg, tc.tmp, got, tc.want)
		}
	}
}

// TestPrivateDir: MakePrivateDir makes a directory of mode 0700 whatever
// the umask, and refuses one open to others, a symbolic link, a file and
// (as root) one another user made first, naming what is wrong.
func TestPrivateDir(t *testing.T) {
	base := t.TempDir()
	made := filepath.Join(base, "made")
	if err := localsock.MakePrivateDir(made); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(made); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("made %v, %v; want mode 0700", st.Mode(), err)
	}
	if err := localsock.MakePrivateDir(made); err != nil {
		t.Errorf("made again: %v", err)
	}

	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o750)
	link := filepath.Join(base, "link")
	os.Symlink(made, link)
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	cases := map[string]string{
		open: "has mode -rwxr-x---, want 0700",
		link: "is not a directory",
		file: "is not a directory",
	}
	if os.Getuid() == 0 {
		cred := testbin.Nobody(t)
		theirs := filepath.Join(base, "theirs")
		os.Mkdir(theirs, 0o700)
		if err := os.Chown(theirs, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
		cases[theirs] = fmt.Sprintf("is owned by uid %d", cred.Uid)
	}
	for dir, want := range cases {
		err := localsock.MakePrivateDir(dir)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), dir) {
			t.Errorf("%s: %v, want an error naming it and saying %q", filepath.Base(dir), err, want)
		}
	}
}

// TestOwnedDir: a cache directory others may read, but not write.
func TestOwnedDir(t *testing.T) {
	base := t.TempDir()
	for _, tc := range []struct {
		mode os.FileMode
		want string
	}{
		{0o700, ""}, {0o755, ""}, {0o775, "group or others may write it"}, {0o757, "group or others may write it"},
	} {
		dir := filepath.Join(base, tc.mode.String())
		os.Mkdir(dir, 0o700)
		os.Chmod(dir, tc.mode)
		err := localsock.CheckOwnedDir(dir)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("mode %s: %v, want %q", tc.mode, err, tc.want)
		}
	}
}

// TestPeerOf: both ends of a connection see the other's process: this
// one, here.
func TestPeerOf(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := lis.Accept()
		accepted <- c
	}()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	defer s.Close()
	for _, conn := range []net.Conn{c, s} {
		p, err := localsock.PeerOf(conn)
		if err != nil || p.UID != os.Getuid() || p.GID != os.Getgid() || p.PID != os.Getpid() {
			t.Errorf("PeerOf = %+v, %v; want uid %d gid %d pid %d", p, err, os.Getuid(), os.Getgid(), os.Getpid())
		}
		if !localsock.Self.Allows(p) {
			t.Errorf("Self does not allow this process: %+v", p)
		}
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	go func() {
		if c, err := tcp.Accept(); err == nil {
			c.Close()
		}
	}()
	tc, err := net.Dial("tcp", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if p, err := localsock.PeerOf(tc); err == nil {
		t.Errorf("PeerOf a TCP connection = %+v, want an error", p)
	}
}

// TestPolicy: the caller's user and root always; another user only as a
// member of the policy's group, by its group or by the user database.
func TestPolicy(t *testing.T) {
	other := os.Getuid() + 12345
	for _, tc := range []struct {
		pol  localsock.Policy
		peer localsock.Peer
		want bool
	}{
		{localsock.Self, localsock.Peer{UID: os.Getuid()}, true},
		{localsock.Self, localsock.Peer{UID: 0}, true},
		{localsock.Self, localsock.Peer{UID: other, GID: 4242}, false},
		{localsock.Policy{Group: 4242}, localsock.Peer{UID: other, GID: 4242}, true},
		{localsock.Policy{Group: 4243}, localsock.Peer{UID: other, GID: 4242}, false},
	} {
		if got := tc.pol.Allows(tc.peer); got != tc.want {
			t.Errorf("%+v allows %+v: %v, want %v", tc.pol, tc.peer, got, tc.want)
		}
	}
}

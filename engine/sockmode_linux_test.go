package engine

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSocketModeFollowsNoLink: the socket's path swapped for a link to
// another file after the bind (a directory others can write) is refused,
// and the file it points at keeps its mode; the socket itself gets it.
func TestSocketModeFollowsNoLink(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	made, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := setSocketMode(path, made, 0o600, -1); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Lstat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %s, want 0600", st.Mode().Perm())
	}
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(dir, "moved.sock")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	err = setSocketMode(path, made, 0o666, -1)
	if err == nil || !strings.Contains(err.Error(), "s.sock") {
		t.Fatalf("a link in the socket's place: %v, want an error", err)
	}
	if st, _ := os.Stat(victim); st.Mode().Perm() != 0o600 {
		t.Errorf("the link's target got mode %s", st.Mode().Perm())
	}
}

package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/attnplug/attnplug/internal/testbin"
)

// socketsUnder lists the Unix sockets under dir.
func socketsUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSocket != 0 {
			out = append(out, path)
		}
		return nil
	})
	return out
}

// TestPluginSocketsDoNotLeakAfterSIGKILL kills a host that runs every
// plugin with SIGKILL: the plugins' sockets stay in the host's private
// directory, never loose in the temporary directory, and the next host
// removes that directory; a host that ends normally leaves nothing.
func TestPluginSocketsDoNotLeakAfterSIGKILL(t *testing.T) {
	tmp := t.TempDir()
	env := []string{"TMPDIR=" + tmp, "XDG_RUNTIME_DIR="}
	private := filepath.Join(tmp, fmt.Sprintf("attnplug-%d", os.Getuid()))
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var in strings.Builder
	for name := range served {
		in.WriteString(`{"backend":"` + name + `","forward_mode":"DECODE"}` + "\n")
	}
	lastPID := 0
	for kill := 0; kill < 2; kill++ {
		h := startHost(t, tree, env, "dispatch")
		lastPID = h.cmd.Process.Pid
		if _, err := io.WriteString(h.stdin, in.String()); err != nil {
			t.Fatal(err)
		}
		for range served {
			if _, err := h.stdout.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
		socks := socketsUnder(t, tmp)
		if len(socks) < len(tree.Plugins) {
			t.Fatalf("%d sockets under %s with %d plugins running: %v", len(socks), tmp, len(tree.Plugins), socks)
		}
		own := filepath.Join(private, fmt.Sprintf("%d-", h.cmd.Process.Pid))
		for _, s := range socks {
			if !strings.HasPrefix(s, own) {
				t.Errorf("socket %s is outside the host's private directory %s*", s, own)
			}
		}
		if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		h.wait()
		waitNoPlugins(t, tree)
	}
	// The second host removed the first one's directory.
	if left, _ := os.ReadDir(private); len(left) != 1 || !strings.HasPrefix(left[0].Name(), fmt.Sprint(lastPID)+"-") {
		t.Errorf("after two SIGKILLs %s holds %v, want the last host's directory alone", private, left)
	}
	if loose, _ := filepath.Glob(filepath.Join(tmp, "plugin*")); len(loose) > 0 {
		t.Errorf("loose plugin files in the temporary directory: %v", loose)
	}

	// The next host removes the dead hosts' directories, and its own at
	// the end.
	h := startHost(t, tree, env, "dispatch")
	io.WriteString(h.stdin, `{"backend":"fa3","forward_mode":"DECODE"}`+"\n")
	h.stdin.Close()
	if code := h.wait(); code != 0 {
		t.Fatalf("exit %d: %s", code, h.stderr)
	}
	if left, _ := os.ReadDir(private); len(left) != 0 {
		t.Errorf("after a normal run %s still holds %v", private, left)
	}
	if socks := socketsUnder(t, tmp); len(socks) != 0 {
		t.Errorf("sockets left: %v", socks)
	}
}

// waitNoPlugins waits until no process of tree runs.
func waitNoPlugins(t *testing.T, tree *testbin.Bins) {
	t.Helper()
	ctx := testContext(t)
	for left := testbin.ProcessesUnder(tree.Dir); len(left) > 0; left = testbin.ProcessesUnder(tree.Dir) {
		select {
		case <-ctx.Done():
			t.Fatalf("processes still running: %v", left)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

package engine

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/engine/client"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
)

// TestListenSocketMode: the socket gets mode 0600 whatever the umask, and
// 0660 with the group of SocketGroup.
func TestListenSocketMode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	g, err := user.LookupGroupId(strconv.Itoa(os.Getgid()))
	if err != nil {
		t.Skipf("the test's own group: %v", err)
	}
	for _, tc := range []struct {
		group string
		mode  os.FileMode
	}{{"", 0o600}, {g.Name, 0o660}, {g.Gid, 0o660}} {
		sock := filepath.Join(t.TempDir(), "s.sock")
		l, err := Listen(ListenOptions{Listen: "unix://" + sock, SocketGroup: tc.group})
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(sock)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != tc.mode {
			t.Errorf("--socket-group %q, umask 000: mode %s, want %s", tc.group, st.Mode().Perm(), tc.mode)
		}
		if gid := st.Sys().(*syscall.Stat_t).Gid; int(gid) != os.Getgid() {
			t.Errorf("--socket-group %q: group %d, want %d", tc.group, gid, os.Getgid())
		}
		l.Close()
		if _, err := os.Lstat(sock); !os.IsNotExist(err) {
			t.Errorf("the socket is still there after Close: %v", err)
		}
	}
}

// TestListenChecks: what the caller gets wrong is refused before anything
// is bound, naming the flag to change.
func TestListenChecks(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	for _, tc := range []struct {
		o    ListenOptions
		want string
	}{
		{ListenOptions{Listen: "unix://@attnplug-test"}, "pass --allow-abstract-socket"},
		{ListenOptions{Listen: "127.0.0.1:0", SocketGroup: "0"}, "--socket-group 0 applies to a Unix socket"},
		{ListenOptions{Listen: DefaultSocket(), SocketGroup: "0"}, "lies in your private directory"},
		{ListenOptions{Listen: "unix:///tmp/x.sock", SocketGroup: "no-such-group-attnplug"}, `--socket-group: group "no-such-group-attnplug"`},
		{ListenOptions{Listen: "unix://"}, "names no socket path"},
	} {
		_, err := Listen(tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
	name := fmt.Sprintf("@attnplug-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	l, err := Listen(ListenOptions{Listen: "unix://" + name, AllowAbstractSocket: true})
	if err != nil {
		t.Fatalf("an abstract socket asked for: %v", err)
	}
	defer l.Close()
	if l.Addr() != "unix://"+name {
		t.Errorf("Addr() = %q", l.Addr())
	}
}

// TestListenDefaultDirectory: the default socket's directory is made with
// mode 0700, and one open to others is refused, naming it.
func TestListenDefaultDirectory(t *testing.T) {
	run := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", run)
	dir := filepath.Join(run, "attnplug")
	l, err := Listen(ListenOptions{Listen: DefaultSocket()})
	if err != nil {
		t.Fatal(err)
	}
	if want := "unix://" + filepath.Join(dir, "serve.sock"); l.Addr() != want {
		t.Errorf("Addr() = %q, want %q", l.Addr(), want)
	}
	l.Close()
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v, %v; want mode 0700", dir, st.Mode(), err)
	}
	os.Chmod(dir, 0o711)
	if _, err := Listen(ListenOptions{Listen: DefaultSocket()}); err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "want 0700") {
		t.Errorf("a directory others may enter: %v", err)
	}
}

// TestListenerRemovesOnlyItsSocket: a server that closes after another
// took its socket's path (it stopped accepting, the next one started)
// leaves the other's socket in place.
func TestListenerRemovesOnlyItsSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	a, err := Listen(ListenOptions{Listen: sock})
	if err != nil {
		t.Fatal(err)
	}
	a.grpc.Close() // as the gRPC server does when it stops: A drains
	b, err := Listen(ListenOptions{Listen: sock})
	if err != nil {
		t.Fatalf("the next server: %v", err)
	}
	defer b.Close()
	a.Close()
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("the first server's Close removed the next one's socket: %v", err)
	}
	go func() {
		if c, err := b.grpc.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("the next server's socket: %v", err)
	}
	c.Close()
}

// TestListenAndServe: the library's one-call server (what a Go host embeds
// in place of attnplug serve) listens where its options say, serves
// dispatches and its metrics once Ready is called, and when its context
// ends returns nil and removes its socket. ServeMetrics alone serves the
// same metrics until stopped.
func TestListenAndServe(t *testing.T) {
	reg, err := registry.New(testContext(t), registry.Config{PluginDirs: []string{t.TempDir()}, Platform: core.PlatformCUDA,
		CallTimeout: 2 * time.Second, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	s := NewServer(reg, Config{})
	sock := filepath.Join(t.TempDir(), "s.sock")
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	type ready struct{ addr, metrics string }
	readyc := make(chan ready, 1)
	done := make(chan error, 1)
	go func() {
		done <- s.ListenAndServe(ctx, ListenOptions{Listen: "unix://" + sock, Metrics: "127.0.0.1:0",
			Ready: func(addr, metrics string) { readyc <- ready{addr, metrics} }})
	}()
	var r ready
	select {
	case r = <-readyc:
	case err := <-done:
		t.Fatalf("ListenAndServe returned before it served: %v", err)
	case <-ctx.Done():
		t.Fatal("never ready")
	}
	if r.addr != "unix://"+sock || !strings.HasPrefix(r.metrics, "http://127.0.0.1:") {
		t.Errorf("ready at %q, metrics %q", r.addr, r.metrics)
	}
	c, err := client.Dial(r.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := core.NewRequest("triton", core.ModeDecode)
	if a, err := c.Dispatch(ctx, &req); err != nil || a.Method != core.MLA {
		t.Fatalf("dispatch: %+v, %v", a, err)
	}
	for _, url := range []string{r.metrics, ""} {
		if url == "" {
			var stop func() error
			if url, stop, err = s.ServeMetrics("127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			defer stop()
		}
		body := get(t, url)
		if !strings.Contains(body, `attnplug_dispatches_total{backend="triton"`) {
			t.Errorf("%s: no dispatch counted:\n%s", url, body)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ListenAndServe after its context ended: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ListenAndServe did not return after its context ended")
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is still there: %v", err)
	}
}

// get returns the body of a GET of url, failing t on any error.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(b)
}

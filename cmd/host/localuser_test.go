package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/engine/client"
	"github.com/attnplug/attnplug/internal/testbin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// envReloadAs names the address a re-run of the test binary calls
// Admin.Reload on (reloadMain), as another user would.
const envReloadAs = "ATTNPLUG_TEST_RELOAD_ADDRESS"

// reloadMain calls Admin.Reload on the server at addr (a socket path, or
// @name for an abstract one) with a plain gRPC client, and says
// "reloaded" or the error on stdout.
func reloadMain(addr string) int {
	target := "unix://" + addr
	if name, ok := strings.CutPrefix(addr, "@"); ok {
		target = "unix-abstract:" + name
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := dispatchv1.NewAdminClient(conn).Reload(ctx, &dispatchv1.ReloadRequest{}); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("reloaded")
	return 0
}

// reloadAs calls Admin.Reload on the server at addr from a process of
// the user of cred (the test binary, copied where that user can run it),
// and returns its error, nil when the call succeeded.
func reloadAs(t *testing.T, exe string, cred *syscall.Credential, addr string) error {
	t.Helper()
	cmd := exec.CommandContext(testContext(t), exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envReloadAs+"="+addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	if strings.TrimSpace(string(out)) == "reloaded" && err == nil {
		return nil
	}
	return fmt.Errorf("%s (%v)", strings.TrimSpace(string(out)), err)
}

// shellServe is the command of attnplug serve with args and umask 000, on
// an empty plugin directory.
func shellServe(t *testing.T, host string, args ...string) *exec.Cmd {
	t.Helper()
	args = append([]string{"-c", `umask 000 && exec "$0" "$@"`, host, "serve", "--metrics-listen", "", "--match-hardware=false",
		"--log-level", "info", "--plugin-dir", t.TempDir()}, args...)
	cmd := exec.CommandContext(testContext(t), "/bin/sh", args...)
	cmd.Env = append(os.Environ(), "ATTNPLUG_CACHE_DIR="+t.TempDir())
	return cmd
}

// TestServeDefaultSocketIsPrivate: without --listen and without
// XDG_RUNTIME_DIR, serve listens on serve.sock in attnplug-<uid> of the
// temporary directory, made with mode 0700, the socket 0600, where the Go
// client looks by default; a directory there that is open to others, or
// (as root) that another user made first, is refused, naming it.
func TestServeDefaultSocketIsPrivate(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("TMPDIR", tmp)
	dir := filepath.Join(tmp, fmt.Sprintf("attnplug-%d", os.Getuid()))
	s := startServerCmd(t, shellServe(t, bins.Host))
	if want := filepath.Join(dir, "serve.sock"); s.socket != want {
		t.Fatalf("default socket %s, want %s", s.socket, want)
	}
	if want := "unix://" + s.socket; client.DefaultAddress() != want {
		t.Errorf("client.DefaultAddress() = %q, want %q", client.DefaultAddress(), want)
	}
	for path, mode := range map[string]os.FileMode{dir: 0o700, s.socket: 0o600} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v, %v; want mode %s", path, st.Mode(), err, mode)
		}
	}
	c, err := client.Dial(client.DefaultAddress(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := core.NewRequest("triton", core.ModeDecode)
	if a, err := c.Dispatch(testContext(t), &req); err != nil || a.Method != core.MLA {
		t.Errorf("the default address: %+v, %v", a, err)
	}

	refused := func(dir, want string) {
		t.Helper()
		t.Setenv("TMPDIR", filepath.Dir(dir))
		cmd := shellServe(t, bins.Host)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), dir) || !strings.Contains(string(out), want) {
			t.Errorf("serve with %s: %v\n%s\nwant exit status 1 naming it and %q", dir, err, out, want)
		}
	}
	open := filepath.Join(t.TempDir(), fmt.Sprintf("attnplug-%d", os.Getuid()))
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o755)
	refused(open, "want 0700")
	if os.Getuid() == 0 {
		cred := testbin.Nobody(t)
		theirs := filepath.Join(testbin.SharedDir(t), "attnplug-0")
		os.Mkdir(theirs, 0o700)
		if err := os.Chown(theirs, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
		refused(theirs, fmt.Sprintf("owned by uid %d", cred.Uid))
	}
}

// TestServeRefusesOtherUsers: another local user (nobody) cannot call
// Admin.Reload: not on a socket served under umask 000 (mode 0600
// whatever the umask), not on an abstract socket (refused without
// --allow-abstract-socket, and with it every connection of another user
// is closed by the server); with --socket-group, the group's members may.
func TestServeRefusesOtherUsers(t *testing.T) {
	cred := testbin.Nobody(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := testbin.Shareable(t, self)
	shared := testbin.SharedDir(t) // others may reach the sockets in it

	s := startServerCmd(t, shellServe(t, bins.Host, "--listen", "unix://"+filepath.Join(shared, "umask.sock")))
	if st, err := os.Stat(s.socket); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("socket under umask 000: %v, %v; want mode 0600", st.Mode(), err)
	}
	if err := reloadAs(t, exe, cred, s.socket); err == nil {
		t.Errorf("uid %d called Admin.Reload on a socket served under umask 000", cred.Uid)
	}
	if _, err := dispatchv1.NewAdminClient(s.conn).Reload(testContext(t), &dispatchv1.ReloadRequest{}); err != nil {
		t.Errorf("the server's own user: %v", err)
	}

	name := fmt.Sprintf("@attnplug-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	out, err := shellServe(t, bins.Host, "--listen", "unix://"+name, "--log-level", "debug").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--allow-abstract-socket") || strings.Contains(string(out), "registry") {
		t.Errorf("an abstract socket without --allow-abstract-socket: %v\n%s\nwant exit status 2 naming the flag, before any plugin", err, out)
	}
	s = startServerCmd(t, shellServe(t, bins.Host, "--listen", "unix://"+name, "--allow-abstract-socket"))
	if err := reloadAs(t, exe, cred, name); err == nil {
		t.Errorf("uid %d called Admin.Reload on the abstract socket", cred.Uid)
	}
	s.stderr.await(testContext(t), "refused a connection of another user", 0)
	if log := s.stderr.String(); !strings.Contains(log, "refused a connection of another user") || !strings.Contains(log, fmt.Sprintf("uid=%d", cred.Uid)) {
		t.Errorf("the refusal is not logged:\n%s", log)
	}

	g, err := user.LookupGroupId(strconv.Itoa(int(cred.Gid)))
	if err != nil {
		t.Skipf("the group of uid %d: %v", cred.Uid, err)
	}
	s = startServerCmd(t, shellServe(t, bins.Host, "--listen", "unix://"+filepath.Join(shared, "group.sock"), "--socket-group", g.Name))
	st, err := os.Stat(s.socket)
	if err != nil || st.Mode().Perm() != 0o660 || st.Sys().(*syscall.Stat_t).Gid != cred.Gid {
		t.Errorf("--socket-group %s: %v, %v; want mode 0660, gid %d", g.Name, st.Mode(), err, cred.Gid)
	}
	if err := reloadAs(t, exe, cred, s.socket); err != nil {
		t.Errorf("a member of --socket-group %s: %v", g.Name, err)
	}
}

// TestConnectRefusesAServerOfAnotherUser: an attnplug serve run by
// another local user (nobody) at the address root's dispatch --connect
// and Go client ask is not believed: the error names the socket, the
// server's uid and the one expected.
func TestConnectRefusesAServerOfAnotherUser(t *testing.T) {
	cred := testbin.Nobody(t)
	host := testbin.Shareable(t, bins.Host)
	home := testbin.DirOf(t, cred)
	sock := filepath.Join(home, "s.sock")
	cmd := exec.Command(host, "serve", "--listen", "unix://"+sock, "--metrics-listen", "", "--match-hardware=false",
		"--plugin-dir", filepath.Dir(host), "--no-cache", "--log-level", "info")
	cmd.Env = append(os.Environ(), "TMPDIR="+home, "XDG_RUNTIME_DIR=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	s := startServerCmd(t, cmd)

	r := host2(t, "dispatch", "--connect", "unix://"+s.socket)
	for _, want := range []string{s.socket, fmt.Sprintf("uid %d", cred.Uid), fmt.Sprintf("not by you (uid %d)", os.Getuid())} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("dispatch --connect to a server of uid %d: exit %d, stdout %q, stderr %q; want it to say %q", cred.Uid, r.code, r.stdout, r.stderr, want)
		}
	}
	if r.code != 1 || r.stdout != "" {
		t.Errorf("dispatch --connect to a server of uid %d: exit %d, stdout %q; want exit status 1 and no answer", cred.Uid, r.code, r.stdout)
	}
}

// host2 runs dispatch with one request line on the package's binaries.
func host2(t *testing.T, args ...string) result {
	t.Helper()
	return host(t, bins, `{"backend":"fa3","forward_mode":"EXTEND","extend_prefix_lens":[0],"seq_lens":[100]}`+"\n", args...)
}

// TestServeDrainingKeepsTheNextServersSocket: a server draining after
// SIGTERM (a call holds it, for the drain's 5 s at most; the test stops
// it with SIGSTOP once its listener is closed, so that a slow start of the
// next server cannot outlast the drain) while the next server starts on
// its socket's path leaves the next server's socket in place when it ends.
func TestServeDrainingKeepsTheNextServersSocket(t *testing.T) {
	plugins := t.TempDir()
	reached := filepath.Join(t.TempDir(), "reached") // the plugin creates it as the call comes in
	if err := testbin.FaultScript(plugins, faultPlugin(t), "slow", "name=slow,names=slow,sleep=8s,mark="+reached); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	a := startServer(t, bins, nil, "--listen", "unix://"+sock, "--plugin-dir", plugins, "--timeout", "60s")
	held := make(chan error, 1)
	go func() {
		_, err := dispatchv1.NewDispatcherClient(a.conn).Dispatch(testContext(t), &dispatchv1.DispatchRequest{Request: pbRequest("slow", core.ModeDecode)})
		held <- err
	}()
	for { // the call reached the plugin (a plugin process alone may be another test's, or started before the call)
		if _, err := os.Stat(reached); err == nil {
			break
		}
		select {
		case err := <-held:
			t.Fatalf("the call ended before it was held: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { a.cmd.Wait(); close(exited) }()
	for { // A stopped accepting
		c, err := net.Dial("unix", sock)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	// Hold A where it is (draining, its listener closed) while B starts,
	// however long B takes on a loaded machine: A's drain is bounded (5 s).
	if err := testbin.Stop(a.cmd.Process.Pid, 10*time.Second); err != nil {
		select {
		case <-exited:
			t.Fatal("the first server ended before it could be held: nothing was shown")
		default:
		}
		t.Fatal(err)
	}
	b := startServer(t, bins, nil, "--listen", "unix://"+sock, "--plugin-dir", t.TempDir())
	select {
	case <-exited:
		t.Fatal("the first server ended before the second one started: nothing was shown")
	default:
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	<-exited // the held call ended with it, answered or cut off by the drain's bound
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("the second server's socket is gone after the first one ended: %v", err)
	}
	req := core.NewRequest("triton", core.ModeDecode)
	c, err := client.Dial("unix://"+sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if a, err := c.Dispatch(testContext(t), &req); err != nil || a.Method != core.MLA {
		t.Errorf("the second server after the first ended: %+v, %v; stderr:\n%s", a, err, b.stderr)
	}
}

// TestServeBindsBeforePlugins: an address that cannot be served on (a
// socket another server answers on, a metrics port in use) fails at once
// with exit status 1, naming it, before the registry opens or any plugin
// starts.
func TestServeBindsBeforePlugins(t *testing.T) {
	s := startServer(t, bins, nil)
	metrics := strings.TrimSuffix(strings.TrimPrefix(s.metrics, "http://"), "/metrics")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "unix://" + s.socket}, "another server is listening on " + s.socket},
		{[]string{"--listen", "unix://" + filepath.Join(t.TempDir(), "s.sock"), "--metrics-listen", metrics}, "metrics listen " + metrics},
	} {
		// A cold description cache: the old order started every plugin
		// to describe it before binding.
		args := append([]string{"serve", "--match-hardware=false", "--log-level", "debug", "--plugin-dir", bins.PluginDir}, tc.args...)
		r := hostEnv(t, bins, []string{"ATTNPLUG_CACHE_DIR=" + t.TempDir()}, "", args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit status 1 and %q", tc.args, r.code, r.stderr, tc.want)
		}
		if strings.Contains(r.stderr, "registry") || strings.Contains(r.stderr, "plugin") {
			t.Errorf("%v: the registry opened before the listen error:\n%s", tc.args, r.stderr)
		}
	}
}

// TestConnectHonoursTimeout: dispatch --connect --timeout bounds the
// connection and the call: a stopped server fails it within a bound that
// gRPC's own connect timeout (20 s) would pass.
func TestConnectHonoursTimeout(t *testing.T) {
	s := startServer(t, bins, nil, "--plugin-dir", t.TempDir())
	if err := testbin.Stop(s.cmd.Process.Pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(s.cmd.Process.Pid, syscall.SIGCONT)
	t0 := time.Now()
	r := host2(t, "dispatch", "--connect", "unix://"+s.socket, "--timeout", "1s")
	if took := time.Since(t0); took > 15*time.Second {
		t.Errorf("dispatch --connect --timeout 1s on a stopped server took %s", took)
	}
	if r.code != 1 || !strings.Contains(r.stderr, "deadline") {
		t.Errorf("exit %d, stderr %q; want exit status 1 and the deadline", r.code, r.stderr)
	}
}

// procKB reads a field of /proc/<pid>/status in kB (VmRSS, VmHWM).
func procKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field+":" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestServeRefusesAnImpossibleDispatchCheaply: a 63 MB Dispatch, which no
// valid request reaches (it cost the server 400 MB and its memory stayed
// taken), is refused as invalid before it is decoded, costs the server
// about its size, and the server gives the memory back once idle.
func TestServeRefusesAnImpossibleDispatchCheaply(t *testing.T) {
	s := startServer(t, bins, nil, "--plugin-dir", t.TempDir())
	pid := s.cmd.Process.Pid
	base := procKB(t, pid, "VmRSS")
	seq := make([]int64, 21<<20)
	for i := range seq {
		seq[i] = 1 << 20 // 3 bytes on the wire: 63 MB
	}
	req := &dispatchv1.DispatchRequest{Request: &dispatchv1.Request{Backend: "fa3",
		Batch: &dispatchv1.Batch{ForwardMode: dispatchv1.ForwardMode(core.ModeDecode), SeqLens: seq, SeqLensKnown: true}}}
	_, err := dispatchv1.NewDispatcherClient(s.conn).Dispatch(testContext(t), req, grpc.MaxCallSendMsgSize(64<<20))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "more than any valid Dispatch request has") {
		t.Fatalf("a 63 MB Dispatch: %v, want INVALID_ARGUMENT saying it is larger than any valid one", err)
	}
	if grew := procKB(t, pid, "VmHWM") - base; grew > 200<<10 {
		t.Errorf("the server's peak RSS grew by %d MB for one refused request of 63 MB", grew>>10)
	}
	for end := time.Now().Add(30 * time.Second); procKB(t, pid, "VmRSS") > base+(40<<10); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the server's RSS stays at %d MB after the refusal (%d MB before)", procKB(t, pid, "VmRSS")>>10, base>>10)
		}
	}
}

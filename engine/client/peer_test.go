package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/engine/client"
	"github.com/attnplug/attnplug/internal/testbin"
	"google.golang.org/grpc"
)

// envHostile names the socket a re-run of the test binary serves as a
// hostile server on (hostileMain), instead of running the tests.
const envHostile = "ATTNPLUG_TEST_HOSTILE_SOCKET"

func TestMain(m *testing.M) {
	if sock := os.Getenv(envHostile); sock != "" {
		os.Exit(hostileMain(sock))
	}
	os.Exit(m.Run())
}

// hostile is a server that answers every request with MHA_CHUNKED_KV
// from "fa3", whatever sglang's rules say: what another local user
// serving at your socket's path could answer.
type hostile struct {
	dispatchv1.UnimplementedDispatcherServer
}

func (hostile) Dispatch(context.Context, *dispatchv1.DispatchRequest) (*dispatchv1.DispatchResponse, error) {
	return &dispatchv1.DispatchResponse{Answer: &dispatchv1.Answer{Method: dispatchv1.Method_METHOD_MHA_CHUNKED_KV, Handler: "fa3", Plugin: "fa3"}}, nil
}

// hostileMain serves hostile on the Unix socket sock and says "ready" on
// stdout.
func hostileMain(sock string) int {
	lis, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if !strings.HasPrefix(sock, "@") {
		os.Chmod(sock, 0o777) // the path is the test's to reach
	}
	g := grpc.NewServer()
	dispatchv1.RegisterDispatcherServer(g, hostile{})
	fmt.Println("ready")
	g.Serve(lis)
	return 0
}

// startHostile runs the test binary as a hostile server on sock, as the
// user of cred (nil: this one).
func startHostile(t *testing.T, exe, sock string, cred *syscall.Credential) {
	t.Helper()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envHostile+"="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the hostile server did not start: %q, %v; stderr: %s", line, err, stderr.String())
	}
}

// TestDialRefusesAServerOfAnotherUser: a server run by another local user
// (nobody) at a socket the client dials, by path or as an abstract
// socket, is refused before any answer of it is trusted, with an error
// naming the socket, its uid and the one expected; the same server run by
// the client's own user answers.
func TestDialRefusesAServerOfAnotherUser(t *testing.T) {
	cred := testbin.Nobody(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := testbin.Shareable(t, self)
	req := core.NewRequest("fa3", core.ModeExtend)
	req.Batch.ExtendPrefixLens, req.Batch.SeqLens = []int64{0}, []int64{100}

	dir := testbin.DirOf(t, cred)
	abstract := fmt.Sprintf("@attnplug-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	for _, sock := range []string{filepath.Join(dir, "s.sock"), abstract} {
		t.Run(strings.TrimPrefix(filepath.Base(sock), "@"), func(t *testing.T) {
			startHostile(t, exe, sock, cred)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := client.Dial("unix://"+sock, nil, client.WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			a, err := c.Dispatch(ctx, &req)
			if err == nil {
				t.Fatalf("the server of uid %d answered %+v, and the client took it", cred.Uid, a)
			}
			for _, want := range []string{sock, fmt.Sprintf("uid %d", cred.Uid), fmt.Sprintf("not by you (uid %d)", os.Getuid())} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if !errors.Is(err, core.ErrUnavailable) {
				t.Errorf("error %v does not wrap core.ErrUnavailable", err)
			}
		})
	}

	// The same server run by this user is trusted: the check is of the
	// user, not of the server.
	own := filepath.Join(t.TempDir(), "own.sock")
	startHostile(t, exe, own, nil)
	c, err := client.Dial("unix://"+own, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if a, err := c.Dispatch(ctx, &req); err != nil || a.Method != core.MHAChunkedKV {
		t.Errorf("own user's server: %+v, %v", a, err)
	}
}

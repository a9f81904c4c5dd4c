package wire_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/testbin"
	"github.com/attnplug/attnplug/wire"
	"github.com/hashicorp/go-plugin"
)

// TestLaunch starts the real fault-injection plugin with the host's
// launcher, and shell scripts that are no plugin at all.
func TestLaunch(t *testing.T) {
	dir := t.TempDir()
	fault, err := testbin.BuildFault(dir)
	if err != nil {
		t.Fatal(err)
	}
	launchRunning(t, dir, fault)
	launchStartFailures(t, dir, fault)
	launchScripts(t, dir, fault)
}

// launchPlugin launches path with env added to the environment and kills
// it when t ends.
func launchPlugin(t *testing.T, ctx context.Context, path string, env ...string) (*wire.Process, error) {
	t.Helper()
	p, err := wire.Launch(ctx, wire.LaunchConfig{Path: path, Env: append(os.Environ(), env...), StartTimeout: time.Minute})
	if err == nil {
		t.Cleanup(p.Kill)
	}
	return p, err
}

// launchRunning checks a started fault plugin: its handshake, its process,
// its parent-death pipe and messages beyond gRPC's default limit.
func launchRunning(t *testing.T, dir, fault string) {
	t.Run("connects_and_kills", func(t *testing.T) {
		p, err := launchPlugin(t, context.Background(), fault)
		if err != nil {
			t.Fatal(err)
		}
		d, err := p.Client().Describe(context.Background())
		if err != nil || d.Name != "fault" || d.ProtocolVersion != wire.ProtocolVersion {
			t.Fatalf("describe: %+v, %v", d, err)
		}
		if p.ProtocolVersion() != wire.ProtocolVersion || p.PID() <= 0 || p.Exited() {
			t.Fatalf("protocol %d, pid %d, exited %v", p.ProtocolVersion(), p.PID(), p.Exited())
		}
		if pids := testbin.ProcessesUnder(dir); len(pids) != 1 || pids[0] != p.PID() {
			t.Fatalf("processes of the plugin binary: %v, want [%d]", pids, p.PID())
		}
		p.Kill()
		p.Kill() // a second Kill is harmless
		if !p.Exited() {
			t.Error("the process has not exited after Kill")
		}
		if pids := testbin.ProcessesUnder(dir); len(pids) != 0 {
			t.Errorf("processes left after Kill: %v", pids)
		}
	})

	t.Run("parent_death_pipe", func(t *testing.T) {
		// The fault plugin exits at start without the pipe on descriptor 3.
		p, err := launchPlugin(t, context.Background(), fault, "ATTNPLUG_FAULT=parent_pipe")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Client().Describe(context.Background()); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("messages_over_4MiB", func(t *testing.T) {
		const pad = 5 << 20 // gRPC's default limit is 4 MiB
		p, err := launchPlugin(t, context.Background(), fault, "ATTNPLUG_FAULT=describe_pad=5242880")
		if err != nil {
			t.Fatal(err)
		}
		d, err := p.Client().Describe(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := d.Handler("fault_padded"); !ok || len(h.Deprecated) != pad {
			t.Fatalf("the padded alias: %v, %d bytes", ok, len(h.Deprecated))
		}
		// A batch of 20 MB: 200 requests with long length arrays.
		reqs := make([]core.Request, 200)
		for i := range reqs {
			reqs[i] = core.NewRequest("fault", core.ModeDecode)
			reqs[i].Runtime.Platform = core.PlatformCUDA
			reqs[i].Batch.SeqLens = make([]int64, core.MaxBatchSize/2)
			for j := range reqs[i].Batch.SeqLens {
				reqs[i].Batch.SeqLens[j] = 1 << 20
			}
		}
		out := make([]core.Result, len(reqs))
		if err := p.Client().DispatchBatch(context.Background(), reqs, out); err != nil {
			t.Fatal(err)
		}
		for i, r := range out {
			if r.Err != nil || r.Method != core.MLA {
				t.Fatalf("answer %d: %s, %v", i, r.Method, r.Err)
			}
		}
	})
}

// launchStartFailures checks starts that fail: one-line errors and a
// checksum that does not match.
func launchStartFailures(t *testing.T, dir, fault string) {
	t.Run("start_errors_are_one_line", func(t *testing.T) {
		for _, tc := range []struct{ fault, want string }{
			{"crash_at_start", "no go-plugin handshake: the plugin wrote nothing on stdout before it exited " +
				"(it crashed at start, expects another magic cookie than attnplug's, or is built for another system); " +
				"it wrote on stderr: fault: crashing at start, as asked"},
			{"stdout_noise", `no go-plugin handshake: the plugin's first line on stdout is "this line is not a go-plugin handshake", ` +
				"not the handshake (a plugin must write nothing else on stdout)"},
			{"protocol=2", "incompatible API version with plugin. Plugin version: 2, Client versions: [1]"},
		} {
			_, err := launchPlugin(t, context.Background(), fault, "ATTNPLUG_FAULT="+tc.fault)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: %v\nwant one line starting %q", tc.fault, err, tc.want)
			}
		}
		if pids := testbin.ProcessesUnder(dir); len(pids) != 0 {
			t.Errorf("processes left after failed starts: %v", pids)
		}
	})

	t.Run("checksum", func(t *testing.T) {
		wrong := sha256.Sum256([]byte("another binary"))
		_, err := wire.Launch(context.Background(), wire.LaunchConfig{
			Path: fault, Env: os.Environ(), SecureConfig: &plugin.SecureConfig{Checksum: wrong[:], Hash: sha256.New()},
		})
		if !errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
			t.Fatalf("a binary that does not match its checksum: %v", err)
		}
	})
}

// launchScripts checks starts and stops of plugins that misbehave: scripts
// that fork and never shake hands, a stopped plugin, an orphan holding the pipes.
func launchScripts(t *testing.T, dir, fault string) {
	// A script that forks a child (a copy of sleep, so that it can be
	// found) and never shakes hands.
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command")
	}
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	mySleep := filepath.Join(dir, "sleep")
	if err := os.WriteFile(mySleep, data, 0o755); err != nil {
		t.Fatal(err)
	}
	script := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}

	t.Run("failed_start_kills_the_process_group", func(t *testing.T) {
		path := script("noisy", mySleep+" 300 &\necho not-a-handshake\nexec "+mySleep+" 300\n")
		_, err := launchPlugin(t, context.Background(), path)
		if err == nil || !strings.Contains(err.Error(), `first line on stdout is "not-a-handshake"`) {
			t.Fatalf("err = %v", err)
		}
		if pids := testbin.ProcessesUnder(dir); len(pids) != 0 {
			t.Errorf("the script's children live on: %v", pids)
		}
	})

	t.Run("ctx_ends_the_start", func(t *testing.T) {
		path := script("silent", "exec "+mySleep+" 300\n")
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := launchPlugin(t, ctx, path) // StartTimeout is a minute
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the context's", err)
		}
		if pids := testbin.ProcessesUnder(dir); len(pids) != 0 {
			t.Errorf("processes left after the context ended: %v", pids)
		}
	})

	t.Run("stop_is_bounded_for_a_stopped_plugin", func(t *testing.T) {
		// A plugin stopped by SIGSTOP never answers go-plugin's Shutdown:
		// Stop still ends it, by SIGKILL after the grace.
		p, err := launchPlugin(t, context.Background(), fault)
		if err != nil {
			t.Fatal(err)
		}
		if err := testbin.Stop(p.PID(), 30*time.Second); err != nil {
			syscall.Kill(p.PID(), syscall.SIGKILL)
			t.Fatal(err)
		}
		stopped := make(chan struct{})
		go func() { p.Stop(100 * time.Millisecond); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			syscall.Kill(p.PID(), syscall.SIGCONT)
			t.Fatal("Stop did not return for a stopped plugin")
		}
		if pids := testbin.ProcessesUnder(dir); len(pids) != 0 {
			t.Errorf("processes left after Stop: %v", pids)
		}
	})

	t.Run("start_timeout_bounds_a_start_whose_orphan_holds_the_pipes", func(t *testing.T) {
		// The plugin exits at once, but a child of it in a session of its
		// own keeps its stdout open for two minutes: go-plugin never sees
		// the exit, and the start timeout must bound the whole start.
		defer func() {
			for _, pid := range testbin.ProcessesUnder(dir) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}()
		start := time.Now()
		_, err := wire.Launch(context.Background(), wire.LaunchConfig{
			Path: fault, Env: append(os.Environ(), "ATTNPLUG_FAULT=orphan_child"), StartTimeout: time.Second,
		})
		if err == nil {
			t.Fatal("a plugin that exits at start started")
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("the start took %s with a start timeout of 1s", took)
		}
	})
}

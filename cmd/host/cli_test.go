package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"github.com/attnplug/attnplug/jsonl"
)

// TestMaxLineBytesAnyLimitIsSafe: every --max-line-bytes a user can type
// either works or is a usage error; none makes a reader report lines that
// are not there (a limit near 2^63 once printed "line too long" forever).
func TestMaxLineBytesAnyLimitIsSafe(t *testing.T) {
	lines := map[string]string{
		"dispatch": `{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4]}`,
		"run":      `{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4],"tensors":{"random":1}}`,
	}
	outOfRange := func(n string) string {
		return fmt.Sprintf("--max-line-bytes: %s is out of range (want 1 to %d)", n, jsonl.MaxLimit)
	}
	for _, cmd := range []string{"dispatch", "run"} {
		for _, tc := range []struct {
			limit   string
			code    int
			stderr  string // wanted in stderr
			answers int
			answer  string // wanted in the first answer
		}{
			{"9223372036854775807", 2, outOfRange("9223372036854775807"), 0, ""},
			{"9223372036854775806", 2, outOfRange("9223372036854775806"), 0, ""},
			{fmt.Sprint(jsonl.MaxLimit + 1), 2, outOfRange(fmt.Sprint(jsonl.MaxLimit + 1)), 0, ""},
			{"0", 2, outOfRange("0"), 0, ""},
			{"-1", 2, outOfRange("-1"), 0, ""},
			{"9223372036854775808", 2, "invalid value", 0, ""},
			{fmt.Sprint(jsonl.MaxLimit), 0, "", 1, `"method":"MLA"`},
			{"10", 1, "", 1, "line 1: line too long: longer than the limit of 10 bytes"},
		} {
			t.Run(cmd+"/"+tc.limit, func(t *testing.T) {
				res := host(t, bins, lines[cmd]+"\n", cmd, "--max-line-bytes", tc.limit)
				if res.code != tc.code || !strings.Contains(res.stderr, tc.stderr) {
					t.Errorf("exit %d, want %d; stderr lacks %q:\n%s", res.code, tc.code, tc.stderr, res.stderr)
				}
				got := strings.Split(strings.TrimSpace(res.stdout), "\n")
				if res.stdout == "" {
					got = nil
				}
				if len(got) != tc.answers {
					t.Fatalf("%d answers, want %d:\n%.2000s", len(got), tc.answers, res.stdout)
				}
				if tc.answers > 0 && !strings.Contains(got[0], tc.answer) {
					t.Errorf("answer %s lacks %q", got[0], tc.answer)
				}
			})
		}
	}
}

// TestMissingPluginDirIsAUsageError: a plugin directory the user names
// that does not exist, or is not a directory, is a usage error naming it,
// in every command that loads plugins, from the flag or the environment.
func TestMissingPluginDirIsAUsageError(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs every command that loads plugins, twice each (make test runs it)")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const req = `{"backend":"fa3","forward_mode":"DECODE"}` + "\n"
	for _, cmd := range []string{"dispatch", "run", "plugins", "lock", "detect", "demo", "serve", "bench"} {
		for _, tc := range []struct {
			name string
			args []string
			env  []string
			want string
		}{
			{"flag", []string{"--plugin-dir", "/nonexistent"}, nil, "--plugin-dir: plugin directory /nonexistent does not exist"},
			{"second_of_list", []string{"--plugin-dir", bins.PluginDir + ":/nonexistent/typo"}, nil, "--plugin-dir: plugin directory /nonexistent/typo does not exist"},
			{"env", nil, []string{"ATTNPLUG_PLUGIN_DIR=/nonexistent"}, "$ATTNPLUG_PLUGIN_DIR: plugin directory /nonexistent does not exist"},
			{"file", []string{"--plugin-dir", file}, nil, "--plugin-dir: " + file + " is not a directory"},
			{"empty_list", []string{"--plugin-dir", ":"}, nil, `--plugin-dir: ":" names no directory`},
		} {
			t.Run(cmd+"/"+tc.name, func(t *testing.T) {
				res := hostEnv(t, bins, tc.env, req, append([]string{cmd}, tc.args...)...)
				if res.code != 2 || !strings.Contains(res.stderr, tc.want) {
					t.Errorf("exit %d, want 2; stderr lacks %q:\n%s", res.code, tc.want, res.stderr)
				}
				if res.stdout != "" {
					t.Errorf("stdout: %.500s, want nothing", res.stdout)
				}
			})
		}
	}
	// A directory that exists, empty or not, is fine.
	res := host(t, bins, req, "dispatch", "--plugin-dir", t.TempDir())
	if res.code != 0 || !strings.Contains(res.stdout, `"plugin":"core"`) {
		t.Errorf("empty plugin directory: exit %d: %s%s", res.code, res.stdout, res.stderr)
	}
}

// TestConnectSocketPath: --connect takes a socket path without unix://,
// absolute or relative.
func TestConnectSocketPath(t *testing.T) {
	srv := startServer(t, bins, nil)
	const req = `{"backend":"fa3","forward_mode":"DECODE"}` + "\n"
	for _, tc := range []struct{ dir, addr string }{
		{"", srv.socket},
		{filepath.Dir(srv.socket), "./" + filepath.Base(srv.socket)},
		{"", "unix://" + srv.socket},
		{filepath.Dir(srv.socket), "unix:" + filepath.Base(srv.socket)},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			cmd := exec.CommandContext(testContext(t), bins.Host, "dispatch", "--connect", tc.addr)
			cmd.Dir = tc.dir
			cmd.Stdin = strings.NewReader(req)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil || !strings.Contains(string(out), `"method":"MLA"`) {
				t.Errorf("got %s, %v; stderr:\n%s", out, err, stderr.String())
			}
		})
	}
}

// TestConnectLostServerSaysHowFarItGot: a dispatch --connect whose server
// dies keeps the answers it had, and says how many lines were answered
// and from which line on none was.
func TestConnectLostServerSaysHowFarItGot(t *testing.T) {
	srv := startServer(t, bins, nil)
	h := startHost(t, bins, nil, "dispatch", "--connect", srv.socket)
	const req = `{"backend":"fa3","forward_mode":"DECODE"}` + "\n"
	for i := 1; i <= 3; i++ {
		if _, err := io.WriteString(h.stdin, req); err != nil {
			t.Fatal(err)
		}
		if line, err := h.stdout.ReadString('\n'); err != nil || !strings.Contains(line, `"method":"MLA"`) {
			t.Fatalf("answer %d: %q, %v; stderr:\n%s", i, line, err, h.stderr)
		}
	}
	srv.cmd.Process.Kill()
	srv.cmd.Wait()
	io.WriteString(h.stdin, req+req)
	h.stdin.Close()
	rest, _ := io.ReadAll(h.stdout)
	if code := h.wait(); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if len(rest) != 0 {
		t.Errorf("answers after the server died: %s", rest)
	}
	if want := "(3 request lines answered; none from line 4 on)"; !strings.Contains(h.stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, h.stderr)
	}
}

// TestVersion: --version and -v print what version prints, and the
// version is a real one: the linker's, else the module's, else the VCS
// revision, else a devel string that says how to get one.
func TestVersion(t *testing.T) {
	want := host(t, bins, "", "version")
	if want.code != 0 || !strings.HasPrefix(want.stdout, "attnplug ") || !strings.Contains(want.stdout, "plugin protocol") {
		t.Fatalf("version: exit %d: %s%s", want.code, want.stdout, want.stderr)
	}
	for _, flag := range []string{"--version", "-v", "-version"} {
		if got := host(t, bins, "", flag); got.code != 0 || got.stdout != want.stdout {
			t.Errorf("%s: exit %d, %q; want %q", flag, got.code, got.stdout, want.stdout)
		}
	}
	settings := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name, linked string
		bi           *debug.BuildInfo
		want         string
	}{
		{"linked", "v1.2.3", &debug.BuildInfo{Main: debug.Module{Version: "v9.9.9"}}, "v1.2.3"},
		{"go_install", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, "v0.3.0"},
		{"vcs", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", "0123456789abcdef0123", "vcs.time", "2026-01-02T03:04:05Z", "vcs.modified", "false")},
			"devel-0123456789ab 2026-01-02T03:04:05"},
		{"vcs_dirty", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", "abc", "vcs.modified", "true")}, "devel-abc-dirty"},
		{"nothing", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel (built without version information; make build sets it)"},
		{"no_build_info", "", nil, "devel (no build information)"},
	} {
		if got := versionOf(tc.linked, tc.bi); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestHelpLists: each command's help lists only the flags it reads, and
// states each default once.
func TestHelpLists(t *testing.T) {
	for _, tc := range []struct {
		cmd         string
		has, hasNot []string
	}{
		{"dispatch", []string{"-strict", "-platform", "-max-line-bytes", "-connect"}, nil},
		{"run", []string{"-strict", "-platform", "-max-line-bytes", "-top-k"}, nil},
		{"plugins", []string{"-plugin-dir", "-kernels", "-lock"}, []string{"-strict", "-platform"}},
		{"lock", []string{"-plugin-dir", "-lock"}, []string{"-strict", "-platform"}},
		{"detect", []string{"-plugin-dir", "-tp-size", "-root"}, []string{"-strict", "-platform"}},
		{"bench", []string{"-plugin-dir", "-stream"}, []string{"-no-cache"}},
		{"serve", []string{"-listen", "-tp-size", "-strict"}, nil},
		{"demo", []string{"-plugin-dir"}, nil},
		{"conform", []string{"-max-requests"}, []string{"-plugin-dir"}},
		{"doctor", []string{"-root"}, []string{"-plugin-dir"}},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			var out bytes.Buffer
			if code := run([]string{tc.cmd, "-h"}, strings.NewReader(""), &out, &out); code != 0 {
				t.Fatalf("exit %d: %s", code, out.String())
			}
			help := out.String()
			for _, f := range tc.has {
				if !strings.Contains(help, "  "+f+" ") && !strings.Contains(help, "  "+f+"\n") {
					t.Errorf("help lacks %s:\n%s", f, help)
				}
			}
			for _, f := range tc.hasNot {
				if strings.Contains(help, "  "+f+" ") || strings.Contains(help, "  "+f+"\n") {
					t.Errorf("help lists %s, which %s ignores:\n%s", f, tc.cmd, help)
				}
			}
			for _, entry := range strings.Split(help, "\n  -") {
				if strings.Count(entry, "(default") > 1 {
					t.Errorf("a default stated twice: -%s", entry)
				}
			}
		})
	}
}

// TestLogsSayEachThingOnce: the deprecated nsa is warned of once per
// process, not by demo; plugin lines carry no second timestamp; a hot
// swap is logged at Info and nothing at Warn; binaries that never start
// are reported once, without go-plugin's "failed to exit gracefully", and
// one that forks a child holding its pipes does not hold the host.
func TestLogsSayEachThingOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs a dozen hosts, a hot swap and plugins that never start (make test runs it)")
	}
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nsa := `{"backend":"nsa","forward_mode":"DECODE"}` + "\n"
	res := host(t, tree, nsa+nsa+nsa, "dispatch", "--log-level", "debug")
	if n := strings.Count(res.stderr, "[WARN]  attnplug.registry: deprecated backend name: backend=nsa use=dsa"); n != 1 || res.code != 0 {
		t.Errorf("dispatch of nsa three times: exit %d, %d deprecation warnings, want 1:\n%s", res.code, n, res.stderr)
	}
	if strings.Contains(res.stderr, "timestamp=") || strings.Contains(res.stderr, "@module=") {
		t.Errorf("plugin lines carry their own timestamp or module:\n%s", res.stderr)
	}
	if res := host(t, tree, "", "demo"); res.code != 0 || strings.Contains(res.stderr, "deprecated") {
		t.Errorf("demo: exit %d, stderr:\n%s", res.code, res.stderr)
	}

	srv := startServer(t, tree, nil, "--plugin-dir", tree.PluginDir)
	replaceBinary(t, bins.Plugin("fa3"), tree.Plugin("fa3"), []byte("rebuilt"))
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	srv.stderr.await(testContext(t), "plugin swapped", 0)
	log := srv.stderr.String()
	if !strings.Contains(log, "[INFO]  attnplug.registry: plugin swapped: plugin=fa3") {
		t.Errorf("no swap logged at Info:\n%s", log)
	}
	if strings.Contains(log, "[WARN]") || strings.Contains(log, "[ERROR]") {
		t.Errorf("a successful swap logged a warning or an error:\n%s", log)
	}

	for name, script := range map[string]string{"broken": "#!/bin/sh\nexit 1\n", "chatty": "#!/bin/sh\necho hello\nsleep 600\n"} {
		if err := os.WriteFile(filepath.Join(tree.PluginDir, "attnplug-backend-"+name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	res = host(t, tree, "", "plugins", "--no-cache")
	if res.code != 0 {
		t.Fatalf("plugins: exit %d: %s", res.code, res.stderr)
	}
	for _, no := range []string{"failed to exit gracefully", "[ERROR]"} {
		if strings.Contains(res.stderr, no) {
			t.Errorf("plugins logged %q:\n%s", no, res.stderr)
		}
	}
	if n := strings.Count(res.stderr, "plugin not usable"); n != 2 {
		t.Errorf("%d lines say a plugin is not usable, want 2:\n%s", n, res.stderr)
	}
}

// TestLockNamesTheLockFile: a lock file in a directory that does not exist
// is an error naming the file given and its missing directory, not the
// temporary file written beside it.
func TestLockNamesTheLockFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing", "dir")
	path := filepath.Join(dir, "x.lock")
	r := host(t, bins, "", "lock", "--plugin-dir", bins.PluginDir, "--lock", path)
	want := "attnplug: lock file " + path + ": directory " + dir + ": no such file or directory"
	if r.code != 1 || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, ".tmp") {
		t.Errorf("exit %d, stderr %q; want 1 and %q", r.code, r.stderr, want)
	}
}

// TestPluginMemoryFlag: --plugin-memory-mib outside [0, 2^30] is a usage
// error naming it; within, the plugins run under it.
func TestPluginMemoryFlag(t *testing.T) {
	const req = `{"backend":"fa3","forward_mode":"DECODE"}` + "\n"
	for _, v := range []string{"-1", "1073741825", "9223372036854775807"} {
		res := host(t, bins, req, "dispatch", "--plugin-memory-mib", v)
		if res.code != 2 || !strings.Contains(res.stderr, "--plugin-memory-mib: "+v+" is outside [0, 1073741824]") {
			t.Errorf("--plugin-memory-mib %s: exit %d, want 2 naming the flag:\n%s", v, res.code, res.stderr)
		}
	}
	for _, v := range []string{"0", "1024"} {
		res := host(t, bins, req, "dispatch", "--plugin-memory-mib", v)
		if res.code != 0 || !strings.Contains(res.stdout, `"plugin":"fa3"`) {
			t.Errorf("--plugin-memory-mib %s: exit %d: %s%s", v, res.code, res.stdout, res.stderr)
		}
	}
}

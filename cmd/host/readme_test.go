package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/detect"
)

// readmeExample returns the request line of the README's first dispatch
// example and the answer the README shows for it.
func readmeExample(t *testing.T) (request, answer string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		const prefix, suffix = "$ echo '", "' | bin/attnplug dispatch"
		if strings.HasPrefix(l, prefix) && strings.HasSuffix(l, suffix) && i+1 < len(lines) {
			return strings.TrimSuffix(strings.TrimPrefix(l, prefix), suffix), lines[i+1]
		}
	}
	t.Fatal("README.md has no example of the form $ echo '...' | bin/attnplug dispatch")
	return "", ""
}

// TestReadmeExampleWithoutAGPU runs the README's dispatch example through
// dispatch and through serve on a machine without a GPU, and checks what
// the README says each gives there: dispatch the rules' answer (the
// README's), serve, which matches the plugins to the detected hardware,
// the triton rules' with a plugin_unsupported_hardware fallback, and
// serve --match-hardware=false the rules' answer again.
func TestReadmeExampleWithoutAGPU(t *testing.T) {
	report, err := detect.Detect(context.Background(), detect.Options{Root: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if p := report.HostInfo().Platform; p != core.PlatformCPU {
		t.Skipf("this machine serves on %s: the README's words are about a machine without a GPU", p)
	}
	req, want := readmeExample(t)
	if got := strings.TrimSpace(host(t, bins, req+"\n", "dispatch").stdout); got != want {
		t.Errorf("dispatch: %s, want the README's %s", got, want)
	}

	s := startServer(t, bins, nil, "--match-hardware=true")
	a := connectAnswer(t, s, req)
	if a.Method != "MHA" || a.Handler != "triton" || a.Plugin != "core" ||
		!strings.HasPrefix(a.Fallback, "plugin_unsupported_hardware: plugin fa3 does not run on this host: fa3: needs platform cuda, host is cpu") {
		t.Errorf("serve: %+v, want MHA by the triton rules with a plugin_unsupported_hardware fallback naming fa3's platform", a)
	}

	s = startServer(t, bins, nil) // --match-hardware=false
	if got := strings.TrimSpace(host(t, bins, req+"\n", "dispatch", "--connect", "unix://"+s.socket).stdout); got != want {
		t.Errorf("serve --match-hardware=false: %s, want the README's %s", got, want)
	}
}

// connectAnswer sends req through dispatch --connect to s and returns the
// answer.
func connectAnswer(t *testing.T, s *server, req string) answer {
	t.Helper()
	r := host(t, bins, req+"\n", "dispatch", "--connect", "unix://"+s.socket)
	as := parseAnswers(t, r.stdout)
	if r.code != 0 || len(as) != 1 {
		t.Fatalf("dispatch --connect: exit %d, %d answers\n%s\n%s", r.code, len(as), r.stdout, r.stderr)
	}
	return as[0]
}

// readmeServe returns the arguments of the README's first attnplug serve
// example (its lines joined where they end with a backslash).
func readmeServe(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cmd string
	for _, l := range strings.Split(string(data), "\n") {
		if cmd == "" && !strings.HasPrefix(l, "bin/attnplug serve ") {
			continue
		}
		cmd += strings.TrimSuffix(l, "\\") + " "
		if !strings.HasSuffix(l, "\\") {
			break
		}
	}
	if cmd == "" {
		t.Fatal("README.md has no example starting bin/attnplug serve")
	}
	return strings.Fields(cmd)[1:]
}

// TestReadmeServeExampleWithoutAGPU: on a machine without a GPU, the
// README's serve example forcing fa3 fails, naming --match-hardware=false
// as the README says, and serves with it.
func TestReadmeServeExampleWithoutAGPU(t *testing.T) {
	report, err := detect.Detect(context.Background(), detect.Options{Root: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if p := report.HostInfo().Platform; p != core.PlatformCPU {
		t.Skipf("this machine serves on %s: the README's words are about a machine without a GPU", p)
	}
	args := readmeServe(t)
	if !slices.Contains(args, "fa3") {
		t.Fatalf("the README's serve example forces no fa3: %v", args)
	}
	here := []string{"--listen", "unix://" + filepath.Join(t.TempDir(), "s.sock"), "--metrics-listen", ""}
	r := host(t, bins, "", append(slices.Clone(args), here...)...)
	if r.code != 1 || !strings.Contains(r.stderr, "--match-hardware=false") {
		t.Errorf("the README's serve example without a GPU: exit %d, stderr %q; want exit status 1 naming --match-hardware=false", r.code, r.stderr)
	}
	cmd := exec.Command(bins.Host, append(append(slices.Clone(args), here...), "--match-hardware=false")...)
	cmd.Env = append(os.Environ(), "ATTNPLUG_CACHE_DIR="+warmCacheDir(t), "ATTNPLUG_PLUGIN_DIR=")
	startServerCmd(t, cmd)
}

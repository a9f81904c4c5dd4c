package testbin

import (
	"fmt"
	"github.com/attnplug/attnplug/internal/modroot"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Bins is a built tree: Host is the attnplug binary, PluginDir the plugins
// beside it.
type Bins struct {
	Dir       string
	Host      string
	PluginDir string
	Plugins   []string // family names
}

// Plugin returns the path of the named plugin binary.
func (b *Bins) Plugin(family string) string {
	return filepath.Join(b.PluginDir, "attnplug-backend-"+family)
}

// ModuleRoot returns the repository root above dir (modroot.Find).
func ModuleRoot(dir string) (string, error) { return modroot.Find(dir) }

// Build puts the host (when withHost) and the plugins into dir/bin, laid
// out as make build lays out bin/: copies of the binaries of the cache
// (Cached), built there first when they are not current.
func Build(dir string, withHost bool) (*Bins, error) {
	c, err := Cached()
	if err != nil {
		return nil, err
	}
	b := &Bins{Dir: filepath.Join(dir, "bin"), Plugins: c.Plugins}
	b.Host = filepath.Join(b.Dir, "attnplug")
	b.PluginDir = filepath.Join(b.Dir, "plugins")
	if err := os.MkdirAll(b.PluginDir, 0o755); err != nil {
		return nil, err
	}
	var files [][2]string
	for _, p := range c.Plugins {
		files = append(files, [2]string{c.Plugin(p), b.Plugin(p)})
	}
	if withHost {
		files = append(files, [2]string{c.Host, b.Host})
	}
	return b, c.Copy(files...)
}

// Main is the TestMain of a package whose tests run the real binaries: it
// puts the plugins (and the host when withHost) into a new temporary
// directory (Build), hands them to set, runs the tests, removes the
// directory and exits with the tests' status. When the build or set fails
// it says why on stderr and exits with status 1 before any test runs.
func Main(m *testing.M, withHost bool, set func(*Bins) error) {
	os.Exit(mainCode(m, withHost, set))
}

func mainCode(m *testing.M, withHost bool, set func(*Bins) error) int {
	dir, err := os.MkdirTemp("", "attnplug-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	b, err := Build(dir, withHost)
	if err == nil {
		err = set(b)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// goBuild runs go build -o out pkgs... in dir, without cgo, with env over
// the caller's environment. With several packages out is a directory.
func goBuild(dir string, env []string, out string, pkgs ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", out}, pkgs...)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", strings.Join(pkgs, " "), err, strings.TrimSpace(string(msg)))
	}
	return nil
}

// CopyTree copies the built tree to dir, leaving out the plugins named in
// without; it returns the copy.
func (b *Bins) CopyTree(dir string, without ...string) (*Bins, error) {
	c := &Bins{Dir: filepath.Join(dir, "bin")}
	c.Host = filepath.Join(c.Dir, "attnplug")
	c.PluginDir = filepath.Join(c.Dir, "plugins")
	if err := os.MkdirAll(c.PluginDir, 0o755); err != nil {
		return nil, err
	}
	if _, err := os.Stat(b.Host); err == nil {
		if err := copyFile(b.Host, c.Host); err != nil {
			return nil, err
		}
	}
	for _, p := range b.Plugins {
		skip := false
		for _, w := range without {
			skip = skip || w == p
		}
		if skip {
			continue
		}
		if err := copyFile(b.Plugin(p), c.Plugin(p)); err != nil {
			return nil, err
		}
		c.Plugins = append(c.Plugins, p)
	}
	return c, nil
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o755)
}

// ProcessesUnder returns the PIDs of live processes whose executable path
// lies under dir, read from /proc: the plugin processes a test started.
func ProcessesUnder(dir string) []int {
	var pids []int
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		if strings.HasPrefix(exe, dir+string(filepath.Separator)) {
			stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if isZombie(stat) {
				continue
			}
			pids = append(pids, pid)
		}
	}
	return pids
}

func isZombie(stat []byte) bool { return taskState(string(stat)) == 'Z' }

// BuildFault builds the fault-injection plugin into dir as
// attnplug-backend-fault and returns its path.
func BuildFault(dir string) (string, error) { return BuildTestPlugin(dir, "fault") }

// FaultScript writes into dir a plugin named family that runs the fault
// plugin fault with ATTNPLUG_FAULT=spec, so that one plugin directory can
// hold several faults.
func FaultScript(dir, fault, family, spec string) error {
	script := fmt.Sprintf("#!/bin/sh\nATTNPLUG_FAULT=%s exec %s \"$@\"\n", spec, fault)
	return os.WriteFile(filepath.Join(dir, "attnplug-backend-"+family), []byte(script), 0o755)
}

// BuildTestPlugin puts the test plugin internal/testplugins/<name> into
// dir as attnplug-backend-<name>, a copy of the cache's (Cached), and
// returns its path: "fault" misbehaves on command, "liar" hands device code
// whose plans lie on command, "lab" reads every kind of quantity and breaks
// on command.
func BuildTestPlugin(dir, name string) (string, error) {
	c, err := Cached()
	if err != nil {
		return "", err
	}
	src, ok := c.TestPlugins[name]
	if !ok {
		return "", fmt.Errorf("testbin: no test plugin %q under internal/testplugins", name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "attnplug-backend-"+name)
	return out, c.Copy([2]string{src, out})
}

// Served is which plugin family the tests expect to answer each backend
// name of this repository's plugins: the expectation, written down, that
// the hosts' answers are checked against.
func Served() map[string]string {
	return map[string]string{
		"fa3": "fa3", "fa4": "fa3",
		"flashinfer": "flashinfer", "flashmla": "flashinfer", "cutlass_mla": "flashinfer",
		"trtllm_mla": "flashinfer", "tokenspeed_mla": "flashinfer",
		"aiter": "aiter", "ascend": "ascend", "dsa": "dsa", "nsa": "dsa", "intel_xpu": "intel_xpu",
		"intel_amx": "intel_xpu",
	}
}

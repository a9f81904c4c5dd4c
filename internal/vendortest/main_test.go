package vendortest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/internal/testbin"
)

// The binaries, built once for the package's tests.
var (
	root      string // the repository root
	hostBin   string // the unchanged attnplug host
	acmeBin   string // examples/vendor-backend
	v1Bin     string // testdata/protocol/v1fixture
	faultBin  string // internal/testplugins/fault
	buildRoot string
)

func TestMain(m *testing.M) {
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if buildRoot != "" {
		os.RemoveAll(buildRoot)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	var err error
	if root, err = testbin.ModuleRoot("."); err != nil {
		return 1, err
	}
	if buildRoot, err = os.MkdirTemp("", "attnplug-vendortest-"); err != nil {
		return 1, err
	}
	// Copies of the binaries the tests share across packages (testbin's
	// cache), each built there only when its inputs changed.
	c, err := testbin.Cached()
	if err != nil {
		return 1, err
	}
	hostBin = filepath.Join(buildRoot, "attnplug-host")
	if err := c.Copy([2]string{c.Host, hostBin}); err != nil {
		return 1, err
	}
	acmeBin = filepath.Join(buildRoot, "acme", "attnplug-backend-acme_mla")
	if err := testbin.BuildModule(filepath.Join(root, "examples", "vendor-backend"), acmeBin); err != nil {
		return 1, err
	}
	v1Bin = filepath.Join(buildRoot, "v1", "attnplug-backend-v1fixture")
	if err := testbin.BuildModule(filepath.Join(root, "testdata", "protocol", "v1fixture"), v1Bin); err != nil {
		return 1, err
	}
	if faultBin, err = testbin.BuildFault(filepath.Join(buildRoot, "fault")); err != nil {
		return 1, err
	}
	return m.Run(), nil
}

// pluginDir returns a fresh plugin directory holding copies of bins.
func pluginDir(t *testing.T, bins ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range bins {
		data, err := os.ReadFile(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(b)), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type result struct {
	stdout, stderr string
	code           int
}

// host runs the attnplug host with args, stdin and extra environment.
func host(t *testing.T, stdin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostBin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "ATTNPLUG_CACHE_DIR="+t.TempDir(), "ATTNPLUG_PLUGIN_DIR=")
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

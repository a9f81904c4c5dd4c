// Package scripts holds the repository's shell scripts; its tests run
// them as make runs them.
package scripts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// shim writes an executable shell script name into dir.
func shim(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// runDeps runs deps.sh with PATH holding bin alone (and the commands it
// needs besides those it is tested on), and python the python3 it tries.
func runDeps(t *testing.T, bin, python string) (stderr string, err error) {
	t.Helper()
	sh, lookErr := exec.LookPath("sh")
	if lookErr != nil {
		t.Skip("no sh here")
	}
	for _, tool := range []string{"cat", "cp"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("no %s here", tool)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(sh, "deps.sh")
	cmd.Env = []string{"PATH=" + bin, "ATTNPLUG_DEPS_PYTHONS=" + python, "HOME=" + t.TempDir()}
	var buf bytes.Buffer
	cmd.Stderr = &buf
	err = cmd.Run()
	return buf.String(), err
}

// TestMissingPythonStopsFirstNamingThePackages: without the Python
// packages, and without apt-get to install them, make test stops before
// any test, naming what to install.
func TestMissingPythonStopsFirstNamingThePackages(t *testing.T) {
	bin := t.TempDir()
	shim(t, bin, "id", "echo 0")
	stderr, err := runDeps(t, bin, filepath.Join(bin, "no-python3"))
	if err == nil {
		t.Fatalf("deps.sh passed with no python3; stderr:\n%s", stderr)
	}
	for _, want := range []string{"apt-get install python3 python3-grpcio python3-protobuf python3-venv python3-wheel", "make test-go"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not name %q:\n%s", want, stderr)
		}
	}
}

// TestMissingPythonIsInstalledWithAptGet: as root with apt-get, the
// packages are installed (the optional ones only where the archive has
// them), and the check passes once they are.
func TestMissingPythonIsInstalledWithAptGet(t *testing.T) {
	bin := t.TempDir()
	log := filepath.Join(bin, "apt.log")
	python := filepath.Join(bin, "python3")
	shim(t, bin, "id", "echo 0")
	// apt-get records its arguments; an install makes the python3 that
	// imports everything.
	shim(t, bin, "apt-get", `echo "$@" >> `+log+`
case "$1" in install) cp `+filepath.Join(bin, "ready")+` `+python+`;; esac`)
	shim(t, bin, "ready", "exit 0")
	shim(t, bin, "apt-cache", `[ "$2" = python3-numpy ]`) // the archive has numpy, not torch
	stderr, err := runDeps(t, bin, python)
	if err != nil {
		t.Fatalf("deps.sh: %v; stderr:\n%s", err, stderr)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(data)), "\n")
	want := []string{"update -qq", "install -y -qq python3 python3-grpcio python3-protobuf python3-venv python3-wheel", "install -y -qq python3-numpy"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("apt-get ran\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestNotRootWithoutSudoDoesNotInstall: a user who cannot install is told
// what to install, and apt-get is not run.
func TestNotRootWithoutSudoDoesNotInstall(t *testing.T) {
	bin := t.TempDir()
	log := filepath.Join(bin, "apt.log")
	shim(t, bin, "id", "echo 1000")
	shim(t, bin, "sudo", "exit 1")
	shim(t, bin, "apt-get", `echo "$@" >> `+log)
	stderr, err := runDeps(t, bin, filepath.Join(bin, "no-python3"))
	if err == nil {
		t.Fatalf("deps.sh passed with no python3; stderr:\n%s", stderr)
	}
	if _, err := os.Stat(log); err == nil {
		t.Error("apt-get ran for a user who cannot install")
	}
	if !strings.Contains(stderr, "apt-get install python3 python3-grpcio") {
		t.Errorf("stderr does not name the packages:\n%s", stderr)
	}
}

// TestReadyPythonPassesAtOnce: with a python3 that imports everything,
// nothing is installed.
func TestReadyPythonPassesAtOnce(t *testing.T) {
	bin := t.TempDir()
	log := filepath.Join(bin, "apt.log")
	shim(t, bin, "python3", "exit 0")
	shim(t, bin, "apt-get", `echo "$@" >> `+log)
	if stderr, err := runDeps(t, bin, filepath.Join(bin, "python3")); err != nil {
		t.Fatalf("deps.sh: %v; stderr:\n%s", err, stderr)
	}
	if _, err := os.Stat(log); err == nil {
		t.Error("apt-get ran although python3 was ready")
	}
}

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSDKCompatible is the API compatibility check of make test: the SDK's
// API against the snapshot of the last release.
func TestSDKCompatible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the SDK's export data")
	}
	cur, err := features("../..", sdkPackages())
	if err != nil {
		t.Fatal(err)
	}
	res, err := check("../..", cur)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Summary())
	if len(res.Missing()) > 0 {
		t.Fatal(res.Summary())
	}
}

// breaksV1 is the first version of TestCheckFindsBreaks's package.
const breaksV1 = `package p

// Mode is a mode.
type Mode uint8

// Fast is a mode.
const Fast Mode = 1

// Backend is an interface.
type Backend interface{ Decide(int) Mode }

// Request is a struct.
type Request struct{ Name string }

// New is a function.
func New(name string) *Request { return &Request{Name: name} }

// Gone is removed later.
func Gone() {}
`

// breaksV2 is the second version: a changed constant, a method added to an
// interface, a changed signature, a function removed and one added.
const breaksV2 = `package p

// Mode is a mode.
type Mode uint8

// Fast is a mode.
const Fast Mode = 2

// Backend is an interface.
type Backend interface {
	Decide(int) Mode
	Close() error
}

// Request is a struct.
type Request struct {
	Name string
	Size int
}

// New is a function.
func New(name string, size int) *Request { return &Request{Name: name, Size: size} }

// Added is new.
func Added() {}
`

// TestCheckFindsBreaks runs the check on a module of its own, before and
// after changes: a removed function, a changed signature, a method added
// to an interface and a changed constant fail it; additions, and removals
// that except.txt lists, do not.
func TestCheckFindsBreaks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		writeFile(t, dir, name, text)
	}
	write("go.mod", "module example.com/m\n\ngo 1.22\n")
	write("p/p.go", breaksV1)
	pkgs := []string{"example.com/m/p"}
	base, err := features(dir, pkgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"pkg p, const Fast Mode = 1",
		"pkg p, func New(string) *Request",
		"pkg p, type Backend interface { Decide }",
		"pkg p, type Request struct, Name string",
	} {
		if !slices.Contains(base, want) {
			t.Errorf("features lack %q:\n%s", want, strings.Join(base, "\n"))
		}
	}
	write("sdkapi/v0.1.0.txt", snapshotHeader("v0.1.0")+strings.Join(base, "\n")+"\n")
	write("p/p.go", breaksV2)
	cur, err := features(dir, pkgs)
	if err != nil {
		t.Fatal(err)
	}
	res, err := check(dir, cur)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"pkg p, const Fast Mode = 1",
		"pkg p, func Gone()",
		"pkg p, func New(string) *Request",
		"pkg p, type Backend interface { Decide }",
	}
	if !slices.Equal(res.Missing(), want) {
		t.Errorf("missing:\n%s\nwant:\n%s", strings.Join(res.Missing(), "\n"), strings.Join(want, "\n"))
	}
	if !slices.Contains(res.added, "pkg p, func Added()") || !slices.Contains(res.added, "pkg p, type Request struct, Size int") {
		t.Errorf("added: %v", res.added)
	}
	if !strings.Contains(res.Summary(), "except.txt") {
		t.Errorf("summary does not say how to proceed:\n%s", res.Summary())
	}
	write("sdkapi/except.txt", "# deliberate\npkg p, func Gone()\n")
	if res, err = check(dir, cur); err != nil || len(res.Missing()) != 3 || len(res.excepted) != 1 {
		t.Errorf("with except.txt: %v, missing %v, excepted %v", err, res.Missing(), res.excepted)
	}
	// A later snapshot is the baseline.
	write("sdkapi/v0.10.0.txt", strings.Join(cur, "\n")+"\n")
	if res, err = check(dir, cur); err != nil || res.baseline != "v0.10.0.txt" || len(res.Missing()) != 0 {
		t.Errorf("against v0.10.0: %v, %+v", err, res)
	}
}

// writeFile writes text to name under dir, making its directories.
func writeFile(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestParseVersion(t *testing.T) {
	for s, ok := range map[string]bool{"v0.1.0": true, "v1.20.3": true, "0.1.0": false, "v1.2": false, "v1.02.0": false, "v1.2.x": false} {
		if _, got := parseVersion(s); got != ok {
			t.Errorf("parseVersion(%q) = %v, want %v", s, got, ok)
		}
	}
}

// TestSDKNamesOnlyItsOwnPackages: every package of the module that an SDK
// signature names is in the SDK, so that the compatibility check covers
// every type a plugin can reach through it (refkernels' tensors were
// package kernels' types, outside it).
func TestSDKNamesOnlyItsOwnPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the SDK's export data")
	}
	_, names, err := featuresNaming("../..", sdkPackages())
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/attnplug/attnplug"
	for path := range names {
		if (path == mod || strings.HasPrefix(path, mod+"/")) && !slices.Contains(sdkPackages(), path) {
			t.Errorf("an SDK signature names package %s, which is not in the SDK (sdkPackages): add it, or keep its types out of the SDK's API", path)
		}
	}
}

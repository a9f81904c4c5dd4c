package registry_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry"
)

// lockTree is a plugin directory with fa3, aiter and the fault plugin, and
// the lock of all three written in it.
func lockTree(t *testing.T) (dir string, lock *registry.Lock) {
	t.Helper()
	dir = faultDir(t)
	for _, family := range []string{"fa3", "aiter"} {
		data, err := os.ReadFile(bins.Plugin(family))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "attnplug-backend-"+family), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("ATTNPLUG_FAULT", "")
	r, _ := open(t, registry.Config{PluginDirs: []string{dir}})
	path := filepath.Join(dir, registry.LockFileName)
	if err := registry.LockOf(r.Plugins()).Write(path); err != nil {
		t.Fatal(err)
	}
	r.Close()
	lock, err := registry.ReadLock(path)
	if err != nil {
		t.Fatal(err)
	}
	return dir, lock
}

func sha256Of(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// tamper appends a byte to the binary at path: it still runs, but its hash
// changed.
func tamper(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func listing(r *registry.Registry) map[string]registry.PluginInfo {
	out := map[string]registry.PluginInfo{}
	for _, p := range r.Plugins() {
		out[p.Name] = p
	}
	return out
}

func TestLockPinsEveryPluginReadably(t *testing.T) {
	dir, lock := lockTree(t)
	files := []string{"attnplug-backend-aiter", "attnplug-backend-fa3", "attnplug-backend-fault"}
	if len(lock.Plugins) != len(files) {
		t.Fatalf("lock %+v, want %d entries", lock, len(files))
	}
	for i, e := range lock.Plugins {
		if e.File != files[i] || e.SHA256 != sha256Of(t, filepath.Join(dir, e.File)) || e.Version == "" || len(e.Names) == 0 {
			t.Errorf("entry %d: %+v, want %s with its hash, version and names", i, e, files[i])
		}
		if !slices.IsSorted(e.Names) {
			t.Errorf("entry %d: names %v not sorted", i, e.Names)
		}
	}
	if e, _ := lock.Entry("attnplug-backend-fa3"); !slices.Equal(e.Names, []string{"fa3", "fa4"}) {
		t.Errorf("fa3 pinned with names %v", e.Names)
	}
	text, err := os.ReadFile(lock.Path)
	if err != nil {
		t.Fatal(err)
	}
	// One field a line, so that a change diffs as the lines it touches.
	for _, want := range []string{"\"format\": 1,\n", "\"file\": \"attnplug-backend-fa3\",\n", "\"sha256\": \"" + lock.Plugins[1].SHA256 + "\",\n"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("lock file lacks %q:\n%s", want, text)
		}
	}
	r, _ := open(t, registry.Config{PluginDirs: []string{dir}, Lock: lock})
	for name, p := range listing(r) {
		if p.Status != registry.StatusReady {
			t.Errorf("%s under its own lock: %+v", name, p)
		}
	}
	if a, err := r.Dispatch(testContext(t), decode("fa3")); err != nil || a.Plugin != "fa3" || a.Fallback != "" {
		t.Errorf("fa3 under the lock: %+v, %v", a, err)
	}
}

func TestLockRefusesATamperedBinary(t *testing.T) {
	dir, lock := lockTree(t)
	bin := filepath.Join(dir, "attnplug-backend-fault")
	pinned, _ := lock.Entry("attnplug-backend-fault")
	tamper(t, bin)
	actual := sha256Of(t, bin)
	eachMode(t, func(t *testing.T, strict bool) {
		r, logs := open(t, registry.Config{PluginDirs: []string{dir}, Lock: lock, Strict: strict})
		p := listing(r)["fault"]
		for _, want := range []string{"refused by the lock file", bin, pinned.SHA256, actual, lock.Path, "pin it with attnplug lock --plugin-dir " + dir, "else put the pinned build back"} {
			if !strings.Contains(p.Reason, want) {
				t.Errorf("reason %q lacks %q", p.Reason, want)
			}
		}
		if p.Status != registry.StatusBroken {
			t.Errorf("tampered binary listed %s", p.Status)
		}
		if !strings.Contains(logs.String(), actual) {
			t.Errorf("refusal not logged with the hash:\n%s", logs)
		}
		// The names it was pinned for fall back (or are refused): they do
		// not silently become triton's.
		a, err := r.Dispatch(testContext(t), faultReq(1))
		if strict {
			if !errors.Is(err, core.ErrRefused) || !strings.Contains(err.Error(), string(registry.ReasonPluginBroken)) {
				t.Errorf("strict: %+v, %v; want refused with %s", a, err, registry.ReasonPluginBroken)
			}
		} else if err != nil || !strings.HasPrefix(a.Fallback, string(registry.ReasonPluginBroken)) {
			t.Errorf("tampered plugin's name: %+v, %v; want a %s fallback", a, err, registry.ReasonPluginBroken)
		}
		if a, err := r.Dispatch(testContext(t), decode("fa4")); err != nil || a.Plugin != "fa3" {
			t.Errorf("the other plugins still serve: %+v, %v", a, err)
		}
	})
}

func TestLockRefusesAnUnknownBinaryAndReportsAMissingOne(t *testing.T) {
	dir, lock := lockTree(t)
	data, err := os.ReadFile(bins.Plugin("dsa"))
	if err != nil {
		t.Fatal(err)
	}
	unknown := filepath.Join(dir, "attnplug-backend-dsa")
	if err := os.WriteFile(unknown, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "attnplug-backend-aiter")); err != nil {
		t.Fatal(err)
	}
	r, _ := open(t, registry.Config{PluginDirs: []string{dir}, Lock: lock})
	list := listing(r)
	if p := list["dsa"]; p.Status != registry.StatusBroken || !strings.Contains(p.Reason, unknown+" is not pinned in "+lock.Path) {
		t.Errorf("unpinned binary: %+v", p)
	}
	if p := list["aiter"]; p.Status != registry.StatusBroken || !strings.Contains(p.Reason, "pinned in "+lock.Path+" but not found") {
		t.Errorf("missing pinned binary: %+v", p)
	}
	ctx := testContext(t)
	// dsa's binary is there but refused: broken. aiter's is not there, and
	// nothing says which binary serves nsa: missing, naming the refused
	// binary that may.
	for name, want := range map[string]registry.Reason{"dsa": registry.ReasonPluginBroken, "nsa": registry.ReasonPluginMissing, "aiter": registry.ReasonPluginMissing} {
		if a, err := r.Dispatch(ctx, decode(name)); err != nil || !strings.HasPrefix(a.Fallback, string(want)) {
			t.Errorf("%s: %+v, %v; want a %s fallback", name, a, err, want)
		}
	}
	if a, _ := r.Dispatch(ctx, decode("nsa")); !strings.Contains(a.Fallback, unknown) {
		t.Errorf("nsa's fallback %q does not name the refused binary %s", a.Fallback, unknown)
	}
}

// TestLockChecksTheBinaryAgainAtStart changes a binary in place after the
// registry verified it: its start is refused, naming both hashes, and its
// names fall back as broken.
func TestLockChecksTheBinaryAgainAtStart(t *testing.T) {
	dir, lock := lockTree(t)
	r, _ := open(t, registry.Config{PluginDirs: []string{dir}, Lock: lock, NoAnswerCache: true})
	bin := filepath.Join(dir, "attnplug-backend-fa3")
	pinned, _ := lock.Entry("attnplug-backend-fa3")
	tamper(t, bin)
	a, err := r.Dispatch(testContext(t), decode("fa3"))
	if err != nil || !strings.HasPrefix(a.Fallback, string(registry.ReasonPluginBroken)) {
		t.Fatalf("got %+v, %v; want a %s fallback", a, err, registry.ReasonPluginBroken)
	}
	for _, want := range []string{"changed in place", bin, pinned.SHA256, sha256Of(t, bin)} {
		if !strings.Contains(a.Fallback, want) {
			t.Errorf("fallback %q lacks %q", a.Fallback, want)
		}
	}
}

func TestLockFileErrors(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ body, want string }{
		"not json":   {"{", "lock file"},
		"format":     {`{"format":2,"plugins":[]}`, "format 2, want 1"},
		"short hash": {`{"format":1,"plugins":[{"file":"attnplug-backend-x","sha256":"abc"}]}`, `entry 1 (attnplug-backend-x): sha256 "abc" is not 64 hex digits`},
		"not hex":    {`{"format":1,"plugins":[{"file":"attnplug-backend-x","sha256":"` + strings.Repeat("z", 64) + `"}]}`, "is not 64 hex digits"},
		"bad name":   {`{"format":1,"plugins":[{"file":"x","sha256":"` + strings.Repeat("0", 64) + `"}]}`, `file "x" is not a plugin binary's name`},
		"no file":    {`{"format":1,"plugins":[{"sha256":"` + strings.Repeat("0", 64) + `"}]}`, "entry 1"},
		"module hash": {`{"format":1,"plugins":[{"file":"attnplug-backend-x","sha256":"` + strings.Repeat("0", 64) + `","modules":[{"name":"m","sha256":"12"}]}]}`,
			`entry 1 (attnplug-backend-x): module 1: want a name and a sha256 of 64 hex digits, got "m" and "12"`},
		"module name": {`{"format":1,"plugins":[{"file":"attnplug-backend-x","sha256":"` + strings.Repeat("0", 64) + `","modules":[{"sha256":"` + strings.Repeat("1", 64) + `"}]}]}`,
			"module 1: want a name"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".lock")
			if err := os.WriteFile(path, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := registry.ReadLock(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
	if _, err := registry.ReadLock(filepath.Join(dir, "absent.lock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent lock file: %v", err)
	}
}

// TestLockModulePins checks the module pins of the lock file: written and
// read back, added without duplicates, kept for an unchanged binary when
// the binaries are pinned again, dropped for a changed one, and absent
// from the file of a lock without them (a lock file older hosts read).
func TestLockModulePins(t *testing.T) {
	hash := func(c string) string { return strings.Repeat(c, 64) }
	entry := func(file, sum string) registry.LockEntry {
		return registry.LockEntry{File: "attnplug-backend-" + file, SHA256: sum, Version: "1.0.0", Names: []string{file}}
	}
	mods := []core.KernelModule{{Name: "mla", Arch: "sm_90a", Format: core.FormatCUBIN, SHA256: hash("1")}}
	pins := registry.ModulePins(mods, core.DeviceInfo{Name: "NVIDIA H200", ComputeCapability: 90})
	if want := (registry.ModulePin{Name: "mla", Arch: "sm_90a", Format: "cubin", SHA256: hash("1"), Device: "NVIDIA H200"}); len(pins) != 1 || pins[0] != want {
		t.Fatalf("ModulePins: %+v, want %+v", pins, want)
	}
	old := &registry.Lock{Format: 1, Plugins: []registry.LockEntry{entry("fa3", hash("a")), entry("flashinfer", hash("b")), entry("aiter", hash("c"))}}
	for _, file := range []string{"attnplug-backend-fa3", "attnplug-backend-fa3", "attnplug-backend-flashinfer"} { // fa3's twice
		if !old.AddModules(file, pins) {
			t.Fatalf("AddModules(%s): the entry was not found", file)
		}
	}
	if old.AddModules("attnplug-backend-nope", pins) {
		t.Error("AddModules of an unknown file reported success")
	}
	if e, _ := old.Entry("attnplug-backend-fa3"); len(e.Modules) != 1 {
		t.Errorf("the same pin added twice: %+v", e.Modules)
	}
	path := filepath.Join(t.TempDir(), registry.LockFileName)
	if err := old.Write(path); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if strings.Count(string(data), `"modules"`) != 2 {
		t.Errorf("the lock file has %d modules lists, want 2 (none for aiter):\n%s", strings.Count(string(data), `"modules"`), data)
	}
	back, err := registry.ReadLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := back.Entry("attnplug-backend-flashinfer"); len(e.Modules) != 1 || e.Modules[0] != pins[0] {
		t.Errorf("read back: %+v", e.Modules)
	}
	// Pinning the binaries again: fa3 unchanged, flashinfer rebuilt.
	next := &registry.Lock{Format: 1, Plugins: []registry.LockEntry{entry("fa3", hash("a")), entry("flashinfer", hash("d")), entry("aiter", hash("c"))}}
	dropped := next.KeepModules(back)
	if len(dropped) != 1 || dropped[0] != "attnplug-backend-flashinfer" {
		t.Errorf("KeepModules dropped %v, want flashinfer's", dropped)
	}
	if e, _ := next.Entry("attnplug-backend-fa3"); len(e.Modules) != 1 {
		t.Errorf("fa3's pins were not kept: %+v", e)
	}
	if e, _ := next.Entry("attnplug-backend-flashinfer"); len(e.Modules) != 0 {
		t.Errorf("the rebuilt flashinfer kept its pins: %+v", e)
	}
}

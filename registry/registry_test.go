package registry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/testbin"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
)

// served is which plugin family the tests expect to answer each name.
var served = testbin.Served()

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// syncBuffer is a log sink safe for the registry's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func open(t *testing.T, cfg registry.Config) (*registry.Registry, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
	}
	if cfg.PluginDirs == nil {
		cfg.PluginDirs = []string{bins.PluginDir}
	}
	r, err := registry.New(testContext(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, logs
}

func decode(name string) *core.Request {
	r := core.NewRequest(name, core.ModeDecode)
	r.Batch.ExtendPrefixLens = []int64{10}
	r.Batch.SeqLens = []int64{11}
	return &r
}

func TestEveryNameAnsweredByItsPlugin(t *testing.T) {
	r, _ := open(t, registry.Config{})
	ctx := testContext(t)
	for name, family := range served {
		t.Run(name, func(t *testing.T) {
			a, err := r.Dispatch(ctx, decode(name))
			if err != nil {
				t.Fatal(err)
			}
			if a.Plugin != family || a.Handler != name || a.Fallback != "" {
				t.Errorf("got %+v, want handler %s from plugin %s without fallback", a, name, family)
			}
		})
	}
}

func TestNamesNobodyServesGetTritonWithoutFallback(t *testing.T) {
	r, _ := open(t, registry.Config{})
	ctx := testContext(t)
	for _, name := range []string{"triton", "FA3", "torch_native", "no_such", "fa3 "} {
		t.Run(name, func(t *testing.T) {
			req := core.NewRequest(name, core.ModeExtend)
			a, err := r.Dispatch(ctx, &req)
			if err != nil {
				t.Fatal(err)
			}
			want := core.Answer{Method: core.MHA, Handler: "triton", Plugin: "core"}
			if a != want {
				t.Errorf("got %+v, want %+v", a, want)
			}
		})
	}
}

func TestMissingPluginFallsBackWithReason(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir(), "fa3")
	if err != nil {
		t.Fatal(err)
	}
	r, logs := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}})
	ctx := testContext(t)
	for _, name := range []string{"fa3", "fa4"} {
		req := core.NewRequest(name, core.ModeExtend)
		a, err := r.Dispatch(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		if a.Handler != "triton" || a.Plugin != "core" || a.Method != core.MHA {
			t.Errorf("%s: got %+v, want the triton rules", name, a)
		}
		if !strings.HasPrefix(a.Fallback, string(registry.ReasonPluginMissing)+": ") {
			t.Errorf("%s: fallback %q, want it to start with %s", name, a.Fallback, registry.ReasonPluginMissing)
		}
	}
	if !strings.Contains(logs.String(), "[WARN]") || !strings.Contains(logs.String(), "plugin_missing") {
		t.Errorf("no warning logged for the fallback; logs:\n%s", logs)
	}

	strict, _ := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}, Strict: true})
	req := core.NewRequest("fa3", core.ModeExtend)
	if _, err := strict.Dispatch(ctx, &req); !errors.Is(err, core.ErrRefused) {
		t.Errorf("strict: got %v, want an error wrapping ErrRefused", err)
	}
	// Strict allows no silent fallback: a name nobody serves is refused
	// too (without strict it gets the triton rules, as in sglang).
	req = core.NewRequest("FA3", core.ModeExtend)
	if _, err := strict.Dispatch(ctx, &req); !errors.Is(err, core.ErrRefused) || !strings.Contains(err.Error(), string(registry.ReasonUnknownBackend)) {
		t.Errorf("strict FA3: got %v; want a refusal with %s", err, registry.ReasonUnknownBackend)
	}
	if a, err := r.Dispatch(ctx, &req); err != nil || a.Handler != "triton" || a.Fallback != "" {
		t.Errorf("FA3: got %+v, %v; want the triton rules without a fallback", a, err)
	}
}

func TestInvalidRequestIsAnErrorNotAFallback(t *testing.T) {
	r, _ := open(t, registry.Config{})
	req := decode("fa3")
	req.Batch.SeqLens = []int64{-1}
	req.Batch.ExtendPrefixLens = nil
	_, err := r.Dispatch(testContext(t), req)
	if !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "seq_lens[0]") {
		t.Errorf("got %v, want ErrInvalidRequest naming seq_lens[0]", err)
	}
}

func pidOf(t *testing.T, r *registry.Registry, family string) int {
	t.Helper()
	for _, p := range r.Plugins() {
		if p.Name == family {
			return p.PID
		}
	}
	t.Fatalf("plugin %s not listed", family)
	return 0
}

// TestKilledPluginRestartsWithoutAFallback SIGKILLs a plugin: the next
// request, which no cache answers, waits for the restart within the call
// deadline and is the plugin's, with no fallback.
func TestKilledPluginRestartsWithoutAFallback(t *testing.T) {
	r, _ := open(t, registry.Config{NoAnswerCache: true})
	ctx := testContext(t)
	if a, err := r.Dispatch(ctx, decode("aiter")); err != nil || a.Plugin != "aiter" {
		t.Fatalf("got %+v, %v", a, err)
	}
	pid := pidOf(t, r, "aiter")
	if pid == 0 {
		t.Fatal("aiter has no PID while running")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if a, err := r.Dispatch(ctx, decode("aiter")); err != nil || a.Plugin != "aiter" || a.Fallback != "" {
			t.Fatalf("request %d after the kill: %+v, %v; want aiter's answer", i, a, err)
		}
	}
	if now := pidOf(t, r, "aiter"); now == pid || now == 0 {
		t.Errorf("aiter's PID %d after the kill, was %d", now, pid)
	}
	for _, p := range r.Plugins() {
		if p.Name == "aiter" && (p.Restarts != 1 || p.LastError == "") {
			t.Errorf("aiter listing %+v, want one restart and the last error", p)
		}
	}
}

func TestCloseEndsEveryPluginProcess(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, _ := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}})
	ctx := testContext(t)
	for name := range served {
		if _, err := r.Dispatch(ctx, decode(name)); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(testbin.ProcessesUnder(tree.Dir)); got != len(tree.Plugins) {
		t.Fatalf("%d plugin processes running, want %d", got, len(tree.Plugins))
	}
	r.Close()
	if left := testbin.ProcessesUnder(tree.Dir); len(left) > 0 {
		t.Errorf("processes left after Close: %v", left)
	}
	a, err := r.Dispatch(ctx, decode("fa3"))
	if err != nil || !strings.HasPrefix(a.Fallback, string(registry.ReasonClosed)) {
		t.Errorf("after Close: got %+v, %v; want a %s fallback", a, err, registry.ReasonClosed)
	}
}

func TestBrokenPluginsAreListedNotFatal(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("attnplug-backend-noexec", "x", 0o644)
	write("attnplug-backend-script", "#!/bin/sh\necho not a plugin\n", 0o755)
	write("attnplug-backend-crash", "#!/bin/sh\nexit 3\n", 0o755)
	write("attnplug-backend-bad.name", "x", 0o755)
	write("unrelated", "x", 0o755)
	if err := os.Mkdir(filepath.Join(dir, "attnplug-backend-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, _ := open(t, registry.Config{PluginDirs: []string{dir, bins.PluginDir}, StartTimeout: 5 * time.Second})
	want := map[string]string{
		"noexec":   "not executable",
		"script":   "start",
		"crash":    "start",
		"bad.name": "file name",
		"dir":      "not a regular file",
	}
	got := map[string]registry.PluginInfo{}
	for _, p := range r.Plugins() {
		got[p.Name] = p
	}
	for name, reason := range want {
		p, ok := got[name]
		if !ok {
			t.Errorf("%s not listed", name)
			continue
		}
		if p.Status != registry.StatusBroken || !strings.Contains(p.Reason, reason) {
			t.Errorf("%s: got status %s reason %q, want broken with %q", name, p.Status, p.Reason, reason)
		}
	}
	if _, ok := got["unrelated"]; ok {
		t.Error("a file without the plugin prefix was listed")
	}
	if p := got["fa3"]; p.Status != registry.StatusReady || p.Version == "" || len(p.Names) != 2 {
		t.Errorf("fa3 listing %+v, want ready with a version and two names", p)
	}
}

func TestEarlierDirectoryShadowsLater(t *testing.T) {
	first, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, _ := open(t, registry.Config{PluginDirs: []string{first.PluginDir, bins.PluginDir}})
	var shadowed int
	for _, p := range r.Plugins() {
		if p.Status == registry.StatusShadowed {
			shadowed++
			if !strings.Contains(p.Reason, first.PluginDir) {
				t.Errorf("shadowed %s: reason %q does not name the first one", p.Name, p.Reason)
			}
		} else if !strings.HasPrefix(p.Path, first.PluginDir) {
			t.Errorf("%s served from %s, want the first directory", p.Name, p.Path)
		}
	}
	if shadowed != len(bins.Plugins) {
		t.Errorf("%d shadowed, want %d", shadowed, len(bins.Plugins))
	}
}

func TestDescriptionCacheSavesStarts(t *testing.T) {
	cache := t.TempDir()
	_, logs := open(t, registry.Config{CacheDir: cache})
	if n := strings.Count(logs.String(), "starting plugin"); n != len(bins.Plugins) {
		t.Fatalf("first open started %d plugins, want %d", n, len(bins.Plugins))
	}
	r, logs := open(t, registry.Config{CacheDir: cache})
	if n := strings.Count(logs.String(), "starting plugin"); n != 0 {
		t.Errorf("second open started %d plugins, want 0 (descriptions cached)", n)
	}
	if names := r.Names(); len(names) != len(served) {
		t.Errorf("names from the cache: %v, want %d", names, len(served))
	}
	if a, err := r.Dispatch(testContext(t), decode("nsa")); err != nil || a.Plugin != "dsa" {
		t.Errorf("nsa after a cached description: %+v, %v", a, err)
	}
}

func TestConcurrentDispatch(t *testing.T) {
	r, _ := open(t, registry.Config{})
	ctx := testContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				for name, family := range served {
					a, err := r.Dispatch(ctx, decode(name))
					if err != nil || a.Plugin != family {
						errs <- errors.Join(err, errors.New(name+": answered by "+a.Plugin))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestHandEditedCacheEntryIsDescribedAgain damages the cached description
// of fa3 in ways a hand edit does: an entry that fails the checks a fresh
// description passes is not trusted; the binary is asked again, fa3 is
// served, and the entry is replaced.
func TestHandEditedCacheEntryIsDescribedAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("long: describes every plugin again for each damaged cache entry (make test runs it)")
	}
	for _, tc := range []struct {
		name string
		edit func(d map[string]any)
	}{
		{"name emptied", func(d map[string]any) { d["Handlers"].([]any)[0].(map[string]any)["Name"] = "" }},
		{"methods removed", func(d map[string]any) { d["Handlers"].([]any)[0].(map[string]any)["Methods"] = nil }},
		{"no names", func(d map[string]any) { d["Handlers"] = []any{} }},
		{"other family", func(d map[string]any) { d["Name"] = "aiter" }},
		{"unknown method", func(d map[string]any) { d["Handlers"].([]any)[0].(map[string]any)["Methods"] = "/w==" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			open(t, registry.Config{CacheDir: cache})
			entry := cacheEntryOf(t, cache, "fa3")
			var e map[string]any
			data, err := os.ReadFile(entry)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &e); err != nil {
				t.Fatal(err)
			}
			tc.edit(e["description"].(map[string]any))
			if data, err = json.Marshal(e); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(entry, data, 0o600); err != nil {
				t.Fatal(err)
			}

			r, logs := open(t, registry.Config{CacheDir: cache})
			if n := strings.Count(logs.String(), "starting plugin"); n != 1 || !strings.Contains(logs.String(), "cached description refused") {
				t.Errorf("%d plugins started, want fa3 alone, described again; logs:\n%s", n, logs)
			}
			for _, name := range []string{"fa3", "fa4"} {
				if a, err := r.Dispatch(testContext(t), decode(name)); err != nil || a.Plugin != "fa3" || a.Fallback != "" {
					t.Errorf("%s after a damaged cache entry: %+v, %v; want fa3's answer", name, a, err)
				}
			}
			for _, p := range r.Plugins() {
				if p.Status == registry.StatusBroken {
					t.Errorf("%s broken: %s", p.Name, p.Reason)
				}
			}
			_, logs = open(t, registry.Config{CacheDir: cache})
			if n := strings.Count(logs.String(), "starting plugin"); n != 0 {
				t.Errorf("the entry was not replaced: the next open started %d plugins", n)
			}
		})
	}
}

// cacheEntryOf returns the description cache file of family in dir.
func cacheEntryOf(t *testing.T, dir, family string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "desc-*.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"description":{"Name":"`+family+`"`) {
			return f
		}
	}
	t.Fatalf("no cache entry of %s in %s", family, dir)
	return ""
}

// TestSocketDirOpenToOthersIsNotUsed: a socket directory that others can
// enter is not used for the plugins' sockets; the plugins still serve.
func TestSocketDirOpenToOthersIsNotUsed(t *testing.T) {
	base := filepath.Join(t.TempDir(), "sockets")
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	r, logs := open(t, registry.Config{SocketDir: base})
	if a, err := r.Dispatch(testContext(t), decode("fa3")); err != nil || a.Plugin != "fa3" {
		t.Fatalf("fa3: %+v, %v", a, err)
	}
	if !strings.Contains(logs.String(), "has mode -rwxr-xr-x, want 0700") {
		t.Errorf("no warning about the socket directory:\n%s", logs)
	}
	if left, _ := os.ReadDir(base); len(left) != 0 {
		t.Errorf("%s was used: %v", base, left)
	}

	private := filepath.Join(t.TempDir(), "private")
	r, _ = open(t, registry.Config{SocketDir: private})
	if a, err := r.Dispatch(testContext(t), decode("fa3")); err != nil || a.Plugin != "fa3" {
		t.Fatalf("fa3: %+v, %v", a, err)
	}
	if left, _ := os.ReadDir(private); len(left) != 1 {
		t.Errorf("%s holds %v, want the registry's directory", private, left)
	}
	r.Close()
	if left, _ := os.ReadDir(private); len(left) != 0 {
		t.Errorf("after Close %s holds %v", private, left)
	}
}

// TestCacheFollowsBinaryChanges: the description cache keeps each
// binary's hash by its file identity and the kernel self-check's pass with
// its description; a binary rewritten in place (same inode) is hashed
// again and described anew.
func TestCacheFollowsBinaryChanges(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	open(t, registry.Config{PluginDirs: []string{tree.PluginDir}, CacheDir: cache})
	data, err := os.ReadFile(cacheEntryOf(t, cache, "fa3"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"self_check_passed":true`) {
		t.Errorf("the self-check's pass is not cached with the description: %.300s", data)
	}
	// Rewrite in place: the same inode, another content.
	bin, err := os.ReadFile(bins.Plugin("fa3"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(tree.Plugin("fa3"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(append(bin, "in place"...))
	f.Close()
	want, err := registry.FileSHA256(tree.Plugin("fa3"))
	if err != nil {
		t.Fatal(err)
	}
	r, logs := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}, CacheDir: cache})
	for _, p := range r.Plugins() {
		if p.Name == "fa3" && p.SHA256 != want {
			t.Errorf("fa3 listed with sha256 %s, want %s of the rewritten file", p.SHA256, want)
		}
	}
	if n := strings.Count(logs.String(), "starting plugin"); n != 1 {
		t.Errorf("%d plugins described again, want fa3 alone", n)
	}
	if a, err := r.Dispatch(testContext(t), decode("fa4")); err != nil || a.Plugin != "fa3" {
		t.Errorf("fa4: %+v, %v", a, err)
	}
}

// TestDescriptionCacheIsPruned: writing an entry removes the entries no
// host read for 30 days, and keeps the others and files not its own.
func TestDescriptionCacheIsPruned(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-40 * 24 * time.Hour)
	files := map[string]bool{ // name: kept
		"desc-v4-" + strings.Repeat("a", 64) + "-0.json": false,
		"sum-v4-" + strings.Repeat("b", 24) + ".json":    false,
		"fail-v4-" + strings.Repeat("c", 64) + "-0.json": false,
		"notes.txt": true,
	}
	for name := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
	}
	fresh := filepath.Join(dir, "desc-v4-"+strings.Repeat("d", 64)+"-0.json")
	if err := os.WriteFile(fresh, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	files[filepath.Base(fresh)] = true
	open(t, registry.Config{CacheDir: dir})
	for name, kept := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if (err == nil) != kept {
			t.Errorf("%s: present %v, want %v", name, err == nil, kept)
		}
	}
}

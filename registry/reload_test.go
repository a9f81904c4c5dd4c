package registry_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/testbin"
	"github.com/attnplug/attnplug/registry"
)

// rebuild puts a binary with the same code but another hash at path, the
// way an operator replaces one: a new file renamed over the old.
func rebuild(t *testing.T, src, dst string) { rebuildAs(t, src, dst, "rebuilt") }

// rebuildAs is rebuild with tag, the bytes that make the hash another.
func rebuildAs(t *testing.T, src, dst, tag string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".new", append(data, tag...), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".new", dst); err != nil {
		t.Fatal(err)
	}
}

func TestReload(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, _ := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}})
	ctx := testContext(t)
	if ch, err := r.Reload(ctx); err != nil || len(ch) != 0 {
		t.Fatalf("reload of an unchanged directory: %v, %v", ch, err)
	}
	if a, err := r.Dispatch(ctx, decode("aiter")); err != nil || a.Plugin != "aiter" {
		t.Fatalf("aiter: %+v, %v", a, err)
	}

	rebuild(t, bins.Plugin("aiter"), tree.Plugin("aiter"))
	os.Remove(tree.Plugin("ascend"))
	ch, err := r.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range ch {
		got[c.Plugin] = c.Action
	}
	if got["aiter"] != "swapped" || got["ascend"] != "removed" || len(got) != 2 {
		t.Errorf("changes %+v, want aiter swapped and ascend removed", ch)
	}
	if a, err := r.Dispatch(ctx, decode("aiter")); err != nil || a.Plugin != "aiter" || a.Fallback != "" {
		t.Errorf("aiter after the swap: %+v, %v", a, err)
	}
	if a, err := r.Dispatch(ctx, decode("ascend")); err != nil || !strings.HasPrefix(a.Fallback, string(registry.ReasonPluginMissing)) {
		t.Errorf("ascend after its removal: %+v, %v; want a plugin_missing fallback", a, err)
	}
}

// TestReloadRereadsTheLock: a rebuilt binary is refused until it is
// pinned, and accepted by the reload that follows the new lock.
func TestReloadRereadsTheLock(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lockPath := filepath.Join(tree.PluginDir, registry.LockFileName)
	unlocked, _ := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}})
	if err := registry.LockOf(unlocked.Plugins()).Write(lockPath); err != nil {
		t.Fatal(err)
	}
	lock, err := registry.ReadLock(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}, Lock: lock})
	ctx := testContext(t)
	if a, err := r.Dispatch(ctx, decode("fa3")); err != nil || a.Plugin != "fa3" {
		t.Fatalf("fa3: %+v, %v", a, err)
	}

	rebuild(t, bins.Plugin("fa3"), tree.Plugin("fa3"))
	ch, err := r.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch) != 1 || ch[0].Action != "rejected" || !strings.Contains(ch[0].Reason, "pins") {
		t.Fatalf("reload to an unpinned binary: %+v, want it rejected by the lock", ch)
	}
	if a, err := r.Dispatch(ctx, decode("fa3")); err != nil || a.Plugin != "fa3" || a.Fallback != "" {
		t.Errorf("fa3 after the rejected swap: %+v, %v; want the old plugin", a, err)
	}

	fresh, _ := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}, InsecurePluginDir: true})
	if err := registry.LockOf(fresh.Plugins()).Write(lockPath); err != nil {
		t.Fatal(err)
	}
	ch, err = r.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch) != 1 || ch[0].Action != "swapped" {
		t.Fatalf("reload after pinning: %+v, want fa3 swapped", ch)
	}
}

// TestReloadWithTheDirectoryGoneIsRefused moves the plugin directory away
// and reloads: the reload is refused, naming the directory, and every
// plugin keeps serving (even a restart, from the descriptor held); with
// the directory back, a reload changes nothing.
func TestReloadWithTheDirectoryGoneIsRefused(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, logs := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}, NoAnswerCache: true})
	ctx := testContext(t)
	if a, err := r.Dispatch(ctx, decode("aiter")); err != nil || a.Plugin != "aiter" {
		t.Fatalf("aiter: %+v, %v", a, err)
	}
	aside := tree.PluginDir + ".aside"
	if err := os.Rename(tree.PluginDir, aside); err != nil {
		t.Fatal(err)
	}
	ch, err := r.Reload(ctx)
	if !errors.Is(err, registry.ErrReloadRefused) || !errors.Is(err, core.ErrRefused) || !strings.Contains(err.Error(), tree.PluginDir) || len(ch) != 0 {
		t.Fatalf("reload with the directory gone: %v, %v; want ErrReloadRefused naming %s", ch, err, tree.PluginDir)
	}
	if !strings.Contains(logs.String(), "reload refused") {
		t.Errorf("the refusal was not logged:\n%s", logs)
	}
	syscall.Kill(pidOf(t, r, "aiter"), syscall.SIGKILL)
	for _, name := range []string{"aiter", "fa3", "dsa"} {
		if a, err := r.Dispatch(ctx, decode(name)); err != nil || a.Fallback != "" || a.Plugin == "core" {
			t.Errorf("%s after the refused reload: %+v, %v; want its plugin's answer", name, a, err)
		}
	}
	if err := os.Rename(aside, tree.PluginDir); err != nil {
		t.Fatal(err)
	}
	if ch, err := r.Reload(ctx); err != nil || len(ch) != 0 {
		t.Errorf("reload with the directory back: %v, %v; want no change", ch, err)
	}
}

// TestReloadWithABadDirectoryIsRefused: a reload while the plugin
// directory is open to other users, or holds no plugin binary, used to drop
// every plugin (only a directory gone was refused, and an empty one logged
// nothing at Warn). Each is refused now, saying why, logged at Warn; every
// plugin keeps serving, a restart included; with the directory fixed, a
// reload changes nothing.
func TestReloadWithABadDirectoryIsRefused(t *testing.T) {
	for _, tc := range []struct {
		kind, want string
		spoil      func(t *testing.T, dir string) (fix func())
	}{
		{"dir_insecure", "is world-writable", func(t *testing.T, dir string) func() {
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			return func() { os.Chmod(dir, 0o755) }
		}},
		{"dir_empty", "holds no plugin binary", func(t *testing.T, dir string) func() {
			aside := t.TempDir()
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if err := os.Rename(filepath.Join(dir, e.Name()), filepath.Join(aside, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
			return func() {
				for _, e := range entries {
					os.Rename(filepath.Join(aside, e.Name()), filepath.Join(dir, e.Name()))
				}
			}
		}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			tree, err := bins.CopyTree(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(tree.PluginDir, 0o755); err != nil {
				t.Fatal(err)
			}
			r, logs := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}, NoAnswerCache: true})
			ctx := testContext(t)
			if a, err := r.Dispatch(ctx, decode("aiter")); err != nil || a.Plugin != "aiter" {
				t.Fatalf("aiter: %+v, %v", a, err)
			}
			fix := tc.spoil(t, tree.PluginDir)
			ch, err := r.Reload(ctx)
			var refused *registry.ReloadRefusal
			if !errors.As(err, &refused) || !errors.Is(err, registry.ErrReloadRefused) || !errors.Is(err, core.ErrRefused) || len(ch) != 0 {
				t.Fatalf("reload: %v, %v; want a *ReloadRefusal", ch, err)
			}
			if refused.Kind != tc.kind || refused.Dir != tree.PluginDir || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tree.PluginDir) || len(refused.Kept) != len(bins.Plugins) {
				t.Errorf("refusal %+v (%v), want %s of %s saying %q and every plugin kept", refused, err, tc.kind, tree.PluginDir, tc.want)
			}
			if !regexp.MustCompile(`\[WARN\] +reload refused; the plugins read before keep serving: error=.*` + regexp.QuoteMeta(tc.want)).MatchString(logs.String()) {
				t.Errorf("the refusal was not logged at Warn with the reason:\n%s", logs)
			}
			syscall.Kill(pidOf(t, r, "aiter"), syscall.SIGKILL)
			for _, name := range []string{"aiter", "fa3", "dsa"} {
				if a, err := r.Dispatch(ctx, decode(name)); err != nil || a.Fallback != "" || a.Plugin == "core" {
					t.Errorf("%s after the refused reload: %+v, %v; want its plugin's answer", name, a, err)
				}
			}
			fix()
			if ch, err := r.Reload(ctx); err != nil || len(ch) != 0 {
				t.Errorf("reload with the directory fixed: %v, %v; want no change", ch, err)
			}
		})
	}
}

// TestANewPluginDoesNotTakeNamesWithoutTheSelfTest: the fault plugin
// copied in as attnplug-backend-aaa, declaring fa3's names (fa3 and fa4),
// comes first in the directory's order. It used to take them at the next
// reload, with none of a swap's checks; they stay with fa3 now, since its
// answers are not fa3's, and the change says so. Taken out again, nothing
// changes for fa3.
func TestANewPluginDoesNotTakeNamesWithoutTheSelfTest(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, logs := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}, NoAnswerCache: true})
	ctx := testContext(t)
	before := map[string]core.Answer{}
	for _, name := range []string{"fa3", "fa4"} {
		a, err := r.Dispatch(ctx, decode(name))
		if err != nil || a.Plugin != "fa3" {
			t.Fatalf("%s: %+v, %v", name, a, err)
		}
		before[name] = a
	}
	fa3PID := pidOf(t, r, "fa3")
	aaa := filepath.Join(tree.PluginDir, "attnplug-backend-aaa")
	if err := os.Rename(testPluginDir(t, "fault")+"/attnplug-backend-fault", aaa); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ATTNPLUG_FAULT", "name=aaa,names=fa3+fa4")
	ch, err := r.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var added, kept bool
	for _, c := range ch {
		switch {
		case c.Plugin == "aaa" && c.Action == "added":
			added = true
		case c.Plugin == "aaa" && c.Action == "rejected" && strings.HasPrefix(c.Reason, "fa3, fa4 stay with plugin fa3, which serves them: self-test:") && strings.Contains(c.Reason, "differ from plugin fa3's"):
			kept = true
		default:
			t.Errorf("unexpected change %+v", c)
		}
	}
	if !added || !kept {
		t.Errorf("changes %+v, want aaa added and its takeover of fa3 and fa4 rejected by the self-test", ch)
	}
	for _, name := range []string{"fa3", "fa4"} {
		if a, err := r.Dispatch(ctx, decode(name)); err != nil || a != before[name] {
			t.Errorf("%s after the reload: %+v, %v; want fa3's answer %+v", name, a, err, before[name])
		}
	}
	if pid := pidOf(t, r, "fa3"); pid != fa3PID {
		t.Errorf("fa3's process changed (%d, was %d)", pid, fa3PID)
	}
	for _, p := range r.Plugins() {
		if p.Name == "aaa" && len(p.Names) != 0 {
			t.Errorf("aaa is listed serving %v, want none", p.Names)
		}
	}
	if !strings.Contains(logs.String(), "plugin would take names another plugin serves; they stay with it: plugin=aaa") {
		t.Errorf("the refused takeover was not logged:\n%s", logs)
	}
	if err := os.Remove(aaa); err != nil {
		t.Fatal(err)
	}
	if ch, err := r.Reload(ctx); err != nil || len(ch) != 1 || ch[0].Plugin != "aaa" || ch[0].Action != "removed" {
		t.Errorf("reload without aaa: %+v, %v; want aaa removed", ch, err)
	}
	if a, err := r.Dispatch(ctx, decode("fa3")); err != nil || a != before["fa3"] {
		t.Errorf("fa3 after aaa is gone: %+v, %v", a, err)
	}
}

// TestANewPluginTakesNamesWhenItPassesTheSelfTest: a new plugin of
// another family that comes first and answers the names it would take as
// the plugin serving them does takes them (a plugin of the same rules
// under another name); one whose answers differ does not, whatever its
// version.
func TestANewPluginTakesNamesWhenItPassesTheSelfTest(t *testing.T) {
	for _, tc := range []struct {
		spec   string
		action string
		plugin string // that answers "fault" after the reload
	}{
		{"name=aaa,names=fault", "takeover", "aaa"},
		{"name=aaa,names=fault,rules=mha,version=9.0.0", "rejected", "fault"},
	} {
		t.Run(tc.action, func(t *testing.T) {
			dir := faultDir(t)
			t.Setenv("ATTNPLUG_FAULT", "")
			r, _ := open(t, registry.Config{PluginDirs: []string{dir}, NoAnswerCache: true})
			ctx := testContext(t)
			if reason, msg := ask(t, ctx, r, false, faultReq(1)); reason != "" {
				t.Fatalf("fault before the reload: %s", msg)
			}
			if err := testbin.FaultScript(dir, filepath.Join(dir, "attnplug-backend-fault"), "aaa", tc.spec); err != nil {
				t.Fatal(err)
			}
			ch, err := r.Reload(ctx)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, c := range ch {
				if c.Plugin == "aaa" && c.Action == tc.action && strings.Contains(c.Reason, "fault") {
					found = true
				}
			}
			if !found {
				t.Errorf("changes %+v, want aaa %s for the name fault", ch, tc.action)
			}
			a, err := r.Dispatch(ctx, faultReq(2))
			if err != nil || a.Plugin != tc.plugin || a.Fallback != "" {
				t.Errorf("fault after the reload: %+v, %v; want plugin %s's answer", a, err, tc.plugin)
			}
		})
	}
}

// TestRequestsRacingASwapAreAnswered: a request that took its route before
// a reload swapped the route's plugin out, and reaches the plugin once it
// is retired, is answered by the route in force (the new plugin), not by
// a fallback: a dispatch, a batch and a plan request alike.
func TestRequestsRacingASwapAreAnswered(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, _ := open(t, registry.Config{PluginDirs: []string{tree.PluginDir}, NoAnswerCache: true})
	ctx := testContext(t)
	swaps := 0
	swap := func() {
		swaps++
		rebuildAs(t, bins.Plugin("fa3"), tree.Plugin("fa3"), fmt.Sprintf("rebuilt %d", swaps))
		ch, err := r.Reload(ctx)
		if err != nil || len(ch) != 1 || ch[0].Action != "swapped" {
			t.Fatalf("swap %d: %+v, %v", swaps, ch, err)
		}
	}
	if a, err := r.Dispatch(ctx, decode("fa3")); err != nil || a.Plugin != "fa3" || a.Fallback != "" {
		t.Fatalf("fa3 before the swaps: %+v, %v", a, err)
	}

	if a, err := r.DispatchAfter(ctx, decode("fa3"), swap); err != nil || a.Plugin != "fa3" || a.Fallback != "" {
		t.Errorf("a dispatch racing a swap: %+v, %v; want fa3's answer", a, err)
	}

	reqs := []core.Request{*decode("fa3"), *decode("fa3"), *decode("aiter")}
	reqs[1].Batch.SeqLens = []int64{4096}
	out := make([]registry.BatchAnswer, len(reqs))
	if err := r.DispatchBatchAfter(ctx, reqs, out, swap); err != nil {
		t.Fatal(err)
	}
	for i, a := range out {
		if want := reqs[i].Backend; a.Err != nil || a.Answer.Plugin != want || a.Answer.Fallback != "" {
			t.Errorf("batch request %d racing a swap: %+v; want %s's answer", i, a, want)
		}
	}

	req := &core.PlanRequest{Backend: "fa3", Method: core.MLA, DType: "bf16",
		Dims:   core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352},
		Shape:  core.PlanShape{SeqLens: []int64{100, 2000}, QLens: []int64{1, 1}, PageSize: 64, NumPages: 64},
		Device: h200()}
	if p, err := r.PlanKernelAfter(ctx, req, swap); err != nil || len(p.Launches) == 0 {
		t.Errorf("a plan request racing a swap: %v, %v; want the new plugin's plan", p, err)
	}
}

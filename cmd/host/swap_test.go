package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// sighup sends SIGHUP to s and returns what the server logged from then
// until the reload finished.
func sighup(t *testing.T, s *server) string {
	t.Helper()
	before := len(s.stderr.String())
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	for {
		if log := s.stderr.String()[before:]; strings.Contains(log, "reload finished") {
			return log
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no reload finished after SIGHUP; stderr:\n%s", s.stderr.String()[before:])
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// scrape fetches the metrics and fails the test unless the server answers
// 200.
func scrape(t *testing.T, s *server) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(testContext(t), http.MethodGet, s.metrics, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
	return string(body)
}

// listed returns the plugins of s by name, failing on a name listed twice.
func listed(t *testing.T, s *server) map[string]*dispatchv1.PluginStatus {
	t.Helper()
	lp, err := dispatchv1.NewAdminClient(s.conn).ListPlugins(testContext(t), &dispatchv1.ListPluginsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dispatchv1.PluginStatus{}
	for _, p := range lp.GetPlugins() {
		if out[p.GetName()] != nil {
			t.Errorf("ListPlugins lists %q twice: %v", p.GetName(), lp.GetPlugins())
		}
		out[p.GetName()] = p
	}
	return out
}

// servedBy asks s for each name and fails unless each is answered by
// plugin without a fallback.
func servedBy(t *testing.T, s *server, plugin string, names ...string) {
	t.Helper()
	var reqs []*dispatchv1.Request
	for _, n := range names {
		reqs = append(reqs, pbRequest(n, core.ModeDecode))
	}
	resp, err := dispatchv1.NewDispatcherClient(s.conn).DispatchBatch(testContext(t), &dispatchv1.DispatchBatchRequest{Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range resp.GetAnswers() {
		if a.GetPlugin() != plugin || a.GetFallback() != "" || a.GetError() != "" {
			t.Errorf("%s: got %v, want an answer of plugin %s", names[i], a, plugin)
		}
	}
}

// TestSwapToAnotherFamilyIsRefused copies the aiter binary over the fa3
// one and sends SIGHUP: the swap is refused for its real reason, fa3 and
// fa4 keep their plugin, aiter keeps its process, every name is listed
// once and /metrics answers. Putting fa3 back and sending SIGHUP again is
// accepted at once.
func TestSwapToAnotherFamilyIsRefused(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, tree, nil)
	servedBy(t, s, "fa3", "fa3", "fa4")
	servedBy(t, s, "aiter", "aiter")
	before := listed(t, s)

	replaceBinary(t, tree.Plugin("aiter"), tree.Plugin("fa3"), nil)
	log := sighup(t, s)
	if !strings.Contains(log, "new plugin binary rejected; the old one keeps serving: plugin=fa3") || !strings.Contains(log, `calls itself \"aiter\"`) {
		t.Errorf("the swap to the aiter binary is not rejected for its name:\n%s", log)
	}
	if strings.Contains(log, "registry_closed") {
		t.Errorf("a false registry_closed reason:\n%s", log)
	}
	after := listed(t, s)
	for _, name := range []string{"fa3", "aiter"} {
		if after[name].GetPid() != before[name].GetPid() || after[name].GetSha256() != before[name].GetSha256() {
			t.Errorf("%s after the refused swap: pid %d sha %s, want the running pid %d sha %s", name,
				after[name].GetPid(), after[name].GetSha256(), before[name].GetPid(), before[name].GetSha256())
		}
	}
	servedBy(t, s, "fa3", "fa3", "fa4")
	servedBy(t, s, "aiter", "aiter")
	body := scrape(t, s)
	for _, want := range []string{`attnplug_plugin_swap_rejections_total{plugin="fa3",reason="wrong_family"} 1`, `attnplug_plugin_up{plugin="aiter",status="running"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// The real fa3 back: nothing to swap, and no rejection.
	replaceBinary(t, bins.Plugin("fa3"), tree.Plugin("fa3"), nil)
	log = sighup(t, s)
	if strings.Contains(log, "rejected") || !strings.Contains(log, "no plugin changed") {
		t.Errorf("with the real fa3 back, the reload says:\n%s", log)
	}
	servedBy(t, s, "fa3", "fa3", "fa4")
	// A rebuilt fa3 swaps at once.
	replaceBinary(t, bins.Plugin("fa3"), tree.Plugin("fa3"), []byte("rebuilt"))
	log = sighup(t, s)
	if !strings.Contains(log, "plugin swapped: plugin=fa3") {
		t.Errorf("the rebuilt fa3 is not swapped in:\n%s", log)
	}
	servedBy(t, s, "fa3", "fa3", "fa4")
	servedBy(t, s, "aiter", "aiter")
	if after := listed(t, s); after["aiter"].GetPid() != before["aiter"].GetPid() {
		t.Errorf("aiter's process changed: pid %d, was %d", after["aiter"].GetPid(), before["aiter"].GetPid())
	}
	scrape(t, s)
}

// TestReloadOfABadPluginDirIsRefused: Admin.Reload while the plugin
// directory is world-writable, and then while it holds no plugin, is
// refused with FAILED_PRECONDITION saying why (it used to drop every
// plugin); the server logs it at Warn, counts it as a rejection of every
// plugin that keeps serving, and serves on.
func TestReloadOfABadPluginDirIsRefused(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tree.PluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, tree, nil)
	servedBy(t, s, "fa3", "fa3", "fa4")
	admin := dispatchv1.NewAdminClient(s.conn)
	const refusal = "[WARN]  attnplug.registry: reload refused; the plugins read before keep serving: error="
	reload := func(want string) {
		t.Helper()
		logged := strings.Count(s.stderr.String(), refusal)
		_, err := admin.Reload(testContext(t), &dispatchv1.ReloadRequest{})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tree.PluginDir) {
			t.Errorf("Admin.Reload: %v, want FAILED_PRECONDITION naming %s and %q", err, tree.PluginDir, want)
		}
		if !s.stderr.await(testContext(t), refusal, logged) {
			t.Fatalf("the refusal was not logged at Warn:\n%s", s.stderr.String())
		}
		servedBy(t, s, "fa3", "fa3", "fa4")
		servedBy(t, s, "aiter", "aiter")
	}

	if err := os.Chmod(tree.PluginDir, 0o777); err != nil {
		t.Fatal(err)
	}
	reload("is world-writable")
	if err := os.Chmod(tree.PluginDir, 0o755); err != nil {
		t.Fatal(err)
	}

	aside := t.TempDir()
	for _, p := range bins.Plugins {
		if err := os.Rename(tree.Plugin(p), filepath.Join(aside, p)); err != nil {
			t.Fatal(err)
		}
	}
	reload("holds no plugin binary")
	body := scrape(t, s)
	for _, want := range []string{`attnplug_plugin_swap_rejections_total{plugin="fa3",reason="dir_insecure"} 1`, `attnplug_plugin_swap_rejections_total{plugin="aiter",reason="dir_empty"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, p := range bins.Plugins {
		if err := os.Rename(filepath.Join(aside, p), tree.Plugin(p)); err != nil {
			t.Fatal(err)
		}
	}
	if rr, err := admin.Reload(testContext(t), &dispatchv1.ReloadRequest{}); err != nil || len(rr.GetChanges()) != 0 {
		t.Errorf("reload with the plugins back: %v, %v; want no change", rr, err)
	}
}

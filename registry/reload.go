package registry

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
	"github.com/attnplug/attnplug/registry/pluginproc"
)

// Change is what a reload did to one plugin.
type Change struct {
	// Plugin is the plugin's family name.
	Plugin string `json:"plugin"`
	// Action is one of "swapped", "added", "removed", "rejected",
	// "takeover" (the plugin took names another plugin served) or
	// "unquarantined" (a quarantine the reload lifted). A plugin that
	// would take names another serves, and failed the self-test for them,
	// is "rejected" with a Reason that starts with the names that "stay
	// with plugin" the other.
	Action string `json:"action"`
	// OldVersion and NewVersion are the versions before and after.
	OldVersion string `json:"old_version,omitempty"`
	NewVersion string `json:"new_version,omitempty"`
	// OldSHA256 and NewSHA256 are the binaries' hashes.
	OldSHA256 string `json:"old_sha256,omitempty"`
	NewSHA256 string `json:"new_sha256,omitempty"`
	// Reason says why a new binary was rejected (the old one keeps
	// serving), or what the self-test saw.
	Reason string `json:"reason,omitempty"`
}

// Reload looks at the plugin directories again and swaps every plugin
// whose binary changed, without failing a request:
//
//  1. the new binary is started and described, which checks its handshake
//     and protocol version;
//  2. a self-test sends sample requests for every name to the new and to
//     the old plugin: the answers must match, unless the new version
//     differs (the rules changed on purpose), and the new plugin must still
//     serve every name the old one served;
//  3. a new binary that fails is rejected: the old plugin keeps serving and
//     the change says why;
//  4. otherwise new requests switch to the new plugin at once, and the old
//     process ends after the calls it is answering finish;
//  5. a name that a plugin of another family declares too, and comes
//     first in the directories' order (a new attnplug-backend-aaa that
//     declares fa3's names), stays with the plugin serving it unless that
//     plugin passes the same self-test for it against the one serving it,
//     answers equal whatever the versions (contests).
//
// The lock file in use, if any, is read again first, so that a binary
// pinned since is accepted. Plugins whose binaries did not change keep
// running, with their answer caches, and get a fresh start: a quarantine
// is lifted ("unquarantined"), the failures in a row and the backoff
// forgotten. A plugin whose binary is gone is removed: its names fall back.
// Reload returns what changed. It fails when ctx ends, and refuses (a
// *ReloadRefusal, an error wrapping ErrReloadRefused; nothing changed,
// logged at Warn) when a plugin directory that holds running plugins
// cannot be read as one now: gone or no directory, open to other users
// (unless Config.InsecurePluginDir), or holding no plugin binary. A
// directory unmounted, moved aside, opened up by a chmod or emptied must
// not empty a server.
func (r *Registry) Reload(ctx context.Context) ([]Change, error) {
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	if r.closed.Load() {
		return nil, fmt.Errorf("reload: %w: registry closed", core.ErrUnavailable)
	}
	if cur := r.lock.Load(); cur != nil && cur.Path != "" {
		// An operator pins a new binary (attnplug lock) before the reload.
		l, err := ReadLock(cur.Path)
		if err != nil {
			r.log.Warn("lock file not reread; the one read before stays in force", "path", cur.Path, "error", err)
		} else {
			r.lock.Store(l)
		}
	}
	old := r.table.Load()
	if err := r.dirsUnusable(old); err != nil {
		r.log.Warn("reload refused; the plugins read before keep serving", "error", err)
		return nil, err
	}
	next, err := r.load(ctx, old)
	if err != nil {
		return nil, err
	}
	oldBy := map[string]*pluginproc.Plugin{}
	for _, p := range old.plugins {
		oldBy[p.Family()] = p
	}
	changes, retire := r.swaps(ctx, next, oldBy)
	gone, dropped := r.gone(next, oldBy)
	changes, retire = append(changes, gone...), append(retire, dropped...)
	owners, contests := r.contests(ctx, next, old)
	changes = append(changes, contests...)
	r.rebuildRoutes(next, old, owners)
	r.table.Store(next)
	close(old.replaced)
	var wg sync.WaitGroup
	for _, p := range retire {
		wg.Add(1)
		go func() { defer wg.Done(); p.Retire(); r.devices.Delete(p) }()
	}
	wg.Wait()
	sort.Slice(changes, func(i, j int) bool { return changes[i].Plugin < changes[j].Plugin })
	return changes, nil
}

// swaps decides, for every plugin of next, whether it replaces the plugin
// of its family in oldBy: a new binary that fails the self-test is
// stopped, and the old plugin put back in next in its place. It returns
// the changes and the old plugins to retire.
func (r *Registry) swaps(ctx context.Context, next *routeTable, oldBy map[string]*pluginproc.Plugin) (changes []Change, retire []*pluginproc.Plugin) {
	for i, p := range next.plugins {
		prev := oldBy[p.Family()]
		nd := p.Description()
		path, sum := p.Binary()
		switch {
		case prev == p:
			p.Reject("")
			if why := p.Lift(); why != nil {
				changes = append(changes, Change{Plugin: p.Family(), Action: "unquarantined", OldVersion: nd.Version, NewVersion: nd.Version, OldSHA256: sum, NewSHA256: sum,
					Reason: "quarantined on: " + why.Error() + "; the reload gives it a fresh start"})
				r.log.Info("plugin quarantine lifted by a reload", "plugin", p.Family(), "path", path)
			}
			continue
		case prev == nil:
			changes = append(changes, Change{Plugin: p.Family(), Action: "added", NewVersion: nd.Version, NewSHA256: sum})
			continue
		}
		od := prev.Description()
		_, oldSum := prev.Binary()
		c := Change{Plugin: p.Family(), OldVersion: od.Version, NewVersion: nd.Version, OldSHA256: oldSum, NewSHA256: sum}
		if why := r.selfTest(ctx, prev, p); why != "" {
			c.Action, c.Reason = "rejected", why
			p.Stop()
			r.devices.Delete(p)
			next.plugins[i] = prev
			prev.Reject(why)
			r.log.Warn("new plugin binary rejected; the old one keeps serving", "plugin", p.Family(), "path", path, "reason", why)
		} else {
			c.Action = "swapped"
			retire = append(retire, prev)
			r.log.Info("plugin swapped", "plugin", p.Family(), "old_version", od.Version, "new_version", nd.Version, "sha256", sum)
		}
		changes = append(changes, c)
	}
	return changes, retire
}

// gone settles the plugins of oldBy whose family next has no plugin of:
// one whose binary is there but unusable now (refused by the lock, failed
// to start) keeps serving, put back in next and listed once, as that
// plugin with why its new binary was refused; any other is removed, to
// retire.
func (r *Registry) gone(next *routeTable, oldBy map[string]*pluginproc.Plugin) (changes []Change, retire []*pluginproc.Plugin) {
	newBy := map[string]bool{}
	for _, p := range next.plugins {
		newBy[p.Family()] = true
	}
	brokenBy := map[string]PluginInfo{}
	for _, b := range next.broken {
		if b.Name != "" && b.Status == StatusBroken && oldBy[b.Name] != nil && !newBy[b.Name] {
			brokenBy[b.Name] = b
		}
	}
	next.broken = slices.DeleteFunc(next.broken, func(b PluginInfo) bool {
		_, ok := brokenBy[b.Name]
		return ok && b.Status == StatusBroken
	})
	for name, p := range oldBy {
		if newBy[name] {
			continue
		}
		_, sum := p.Binary()
		version := p.Description().Version
		if b, ok := brokenBy[name]; ok {
			next.plugins = append(next.plugins, p)
			p.Reject(b.Reason)
			changes = append(changes, Change{Plugin: name, Action: "rejected", OldVersion: version, OldSHA256: sum, Reason: b.Reason})
			r.log.Warn("new plugin binary rejected; the old one keeps serving", "plugin", name, "path", b.Path, "reason", b.Reason)
			continue
		}
		changes = append(changes, Change{Plugin: name, Action: "removed", OldVersion: version, OldSHA256: sum})
		retire = append(retire, p)
	}
	return changes, retire
}

// ErrReloadRefused marks a reload that was not done: the plugins read
// before keep serving. It wraps core.ErrRefused.
var ErrReloadRefused = fmt.Errorf("%w: reload", core.ErrRefused)

// ReloadRefusal is why a reload was refused: a plugin directory that held
// plugins cannot be read as one. errors.Is(err, ErrReloadRefused) holds.
type ReloadRefusal struct {
	// Dir is the plugin directory.
	Dir string
	// Kind says what is wrong with it: "dir_missing" (gone, unreadable,
	// not a directory), "dir_insecure" (others can write it, or a
	// directory above it) or "dir_empty" (no plugin binary in it).
	Kind string
	// Err is the problem.
	Err error
	// Kept are the plugins it held, which keep serving.
	Kept []string
}

func (e *ReloadRefusal) Error() string {
	return fmt.Sprintf("%v: plugin directory %s: %v; it held %s, which keep serving", ErrReloadRefused, e.Dir, e.Err, strings.Join(e.Kept, ", "))
}

// Unwrap makes errors.Is(err, ErrReloadRefused) and core.ErrRefused hold.
func (e *ReloadRefusal) Unwrap() error { return ErrReloadRefused }

// dirsUnusable refuses a reload when a plugin directory that held plugins
// of t cannot be read as one now (pluginproc.DirProblem).
func (r *Registry) dirsUnusable(t *routeTable) error {
	for _, dir := range r.cfg.PluginDirs {
		var held []string
		for _, p := range t.plugins {
			if path, _ := p.Binary(); filepath.Clean(filepath.Dir(path)) == filepath.Clean(dir) {
				held = append(held, p.Family())
			}
		}
		if len(held) == 0 {
			continue
		}
		if kind, err := pluginproc.DirProblem(dir, r.cfg.InsecurePluginDir); err != nil {
			sort.Strings(held)
			return &ReloadRefusal{Dir: dir, Kind: kind, Err: err, Kept: held}
		}
	}
	return nil
}

// rebuildRoutes makes next's routes from its plugins, keeping the routes
// (and answer caches) of old for plugins that did not change: a name goes
// to its plugin in owners, else to the first plugin that declares it.
func (r *Registry) rebuildRoutes(next, old *routeTable, owners map[string]*pluginproc.Plugin) {
	routes := map[string]*route{}
	add := func(h core.HandlerInfo, p *pluginproc.Plugin) {
		r.served.Store(h.Name, p.Family())
		if prev := old.routes[h.Name]; prev != nil && prev.be == backend.Backend(p) {
			routes[h.Name] = prev
			return
		}
		routes[h.Name] = newRoute(h, p, !r.cfg.NoAnswerCache)
	}
	for name, p := range owners {
		if h, ok := p.Description().Handler(name); ok {
			add(h, p)
		}
	}
	for _, p := range next.plugins {
		for _, h := range p.Description().Handlers {
			if h.Name == core.TritonName || routes[h.Name] != nil {
				continue
			}
			add(h, p)
		}
	}
	r.addLinked(routes)
	for name, rt := range next.routes {
		if !rt.serves() && routes[name] == nil {
			routes[name] = rt
		}
	}
	r.addMissing(routes, next.broken)
	next.routes = routes
}

// contests settles, for each name that a plugin of next serving it before
// the reload (in old) no longer comes first for, whether the plugin that
// comes first (another family: a new binary whose file name sorts first,
// or in an earlier directory) takes it: only when it passes the takeover
// self-test against the plugin serving it (takeoverTest), for every name
// it would take from that plugin. Otherwise the plugin serving the names
// keeps them (owners), and the change of the other says why. A name
// declared twice otherwise goes to the first plugin, as at start, logged.
func (r *Registry) contests(ctx context.Context, next, old *routeTable) (owners map[string]*pluginproc.Plugin, changes []Change) {
	byFamily := map[string]*pluginproc.Plugin{}
	for _, p := range next.plugins {
		byFamily[p.Family()] = p
	}
	type pair struct{ first, owner *pluginproc.Plugin }
	taken := map[pair][]string{}
	var pairs []pair
	first := map[string]*pluginproc.Plugin{}
	for _, p := range next.plugins {
		for _, h := range p.Description().Handlers {
			if h.Name == core.TritonName {
				continue
			}
			f := first[h.Name]
			if f == nil {
				first[h.Name] = p
				continue
			}
			// Declared twice: who keeps it is decided below when the
			// later plugin served it before, else the first keeps it.
			if prev := old.routes[h.Name]; prev == nil || prev.family != p.Family() {
				r.log.Warn("backend name served twice; the first plugin keeps it", "backend", h.Name, "plugin", p.Family(), "kept", f.Family())
			}
		}
	}
	for name, f := range first {
		prev := old.routes[name]
		if prev == nil || !prev.serves() || prev.family == f.Family() {
			continue
		}
		owner := byFamily[prev.family]
		if owner == nil {
			continue // its plugin is gone: the name is the first's
		}
		if _, declares := owner.Description().Handler(name); !declares {
			continue
		}
		k := pair{f, owner}
		if taken[k] == nil {
			pairs = append(pairs, k)
		}
		taken[k] = append(taken[k], name)
	}
	owners = map[string]*pluginproc.Plugin{}
	for _, k := range pairs {
		names := taken[k]
		sort.Strings(names)
		list := strings.Join(names, ", ")
		_, sum := k.first.Binary()
		c := Change{Plugin: k.first.Family(), NewVersion: k.first.Description().Version, NewSHA256: sum}
		if why := r.takeoverTest(ctx, k.owner, k.first, names); why != "" {
			for _, n := range names {
				owners[n] = k.owner
			}
			c.Action, c.Reason = "rejected", fmt.Sprintf("%s stay with plugin %s, which serves them: %s", list, k.owner.Family(), why)
			r.log.Warn("plugin would take names another plugin serves; they stay with it", "plugin", k.first.Family(), "names", list, "kept", k.owner.Family(), "reason", why)
		} else {
			c.Action, c.Reason = "takeover", fmt.Sprintf("takes %s from plugin %s, whose sample answers it gives", list, k.owner.Family())
			r.log.Info("plugin takes names another plugin served", "plugin", k.first.Family(), "names", list, "from", k.owner.Family())
		}
		changes = append(changes, c)
	}
	return owners, changes
}

// takeoverTest is the self-test of a plugin of another family, first,
// that would take names from owner, the plugin serving them: first must
// start and answer the sample requests of every name with methods it
// declares, and owner's answers must be the same, whatever the versions
// (a version of one family says nothing of another's rules). It returns
// why first must not take them, or "".
func (r *Registry) takeoverTest(ctx context.Context, owner, first *pluginproc.Plugin, names []string) string {
	return r.sampleTest(ctx, owner, first, names, false, true)
}

// selfTest compares a new plugin binary with the one it would replace, on
// sample requests for every name the old one serves, each asked through
// call as any batch is. It returns why the new one must not replace the
// old, or "".
func (r *Registry) selfTest(ctx context.Context, old, next *pluginproc.Plugin) string {
	od, nd := old.Description(), next.Description()
	if nd.Name != od.Name {
		return fmt.Sprintf("the new binary calls itself %q, not %q", nd.Name, od.Name)
	}
	var names []string
	for _, h := range od.Handlers {
		if _, ok := nd.Handler(h.Name); !ok {
			return fmt.Sprintf("the new binary no longer serves %q", h.Name)
		}
		names = append(names, h.Name)
	}
	return r.sampleTest(ctx, old, next, names, od.Version != nd.Version, false)
}

// sampleTest starts next and asks it and old the sample requests of
// names: next must answer each with a method it declares, and, unless
// mayDiffer, as old does; when old cannot answer, there is nothing to
// compare with, and next only has to answer, unless strict. It returns
// why next fails, or "".
func (r *Registry) sampleTest(ctx context.Context, old, next *pluginproc.Plugin, names []string, mayDiffer, strict bool) string {
	nd := next.Description()
	if err := next.Start(ctx); err != nil {
		return fmt.Sprintf("the new binary did not start: %v", err)
	}
	var reqs []core.Request
	for _, name := range names {
		reqs = append(reqs, sampleRequests(name, r.cfg.Platform)...)
	}
	newOut, err := r.sampleAnswers(ctx, next, reqs)
	if err != nil {
		return fmt.Sprintf("self-test: the new binary failed: %v", err)
	}
	for i, res := range newOut {
		h, _ := nd.Handler(reqs[i].Backend)
		if res.Err != nil {
			return fmt.Sprintf("self-test: %s refused a sample request: %v", reqs[i].Backend, res.Err)
		}
		if !slices.Contains(h.Methods, res.Method) {
			return fmt.Sprintf("self-test: %s answered %s, which it does not declare", reqs[i].Backend, res.Method)
		}
	}
	oldOut, err := r.sampleAnswers(ctx, old, reqs)
	switch {
	case err != nil && strict:
		return fmt.Sprintf("self-test: plugin %s, which serves the names, did not answer to compare with: %v", old.Family(), err)
	case err != nil:
		return "" // nothing to compare with: the new binary only has to answer
	}
	differ := 0
	first := ""
	for i := range reqs {
		if oldOut[i].Err == nil && oldOut[i].Method != newOut[i].Method {
			if differ == 0 {
				first = fmt.Sprintf("%s %s: old %s, new %s", reqs[i].Backend, reqs[i].Batch.Mode, oldOut[i].Method, newOut[i].Method)
			}
			differ++
		}
	}
	switch {
	case differ == 0 || mayDiffer:
		return ""
	case strict:
		return fmt.Sprintf("self-test: %d of %d sample answers differ from plugin %s's (first: %s)", differ, len(reqs), old.Family(), first)
	}
	return fmt.Sprintf("self-test: %d of %d sample answers differ from the running plugin's (first: %s) and the version is still %s", differ, len(reqs), first, nd.Version)
}

// sampleAnswers asks p for reqs in one batch, through call.
func (r *Registry) sampleAnswers(ctx context.Context, p *pluginproc.Plugin, reqs []core.Request) ([]core.Result, error) {
	out := make([]core.Result, len(reqs))
	s, err := r.call(ctx, p, "", backend.DispatchCall, "the self-test", func(ctx context.Context, c backend.Conn) error {
		return c.DispatchBatch(ctx, reqs, out)
	})
	if err == nil && s.verdict != answered {
		return nil, s.o
	}
	return out, err
}

// sampleRequests returns requests for name that reach the branches of the
// shared rules: every mode, inside and outside CUDA graphs, prefix sums of
// 0, below, at and above the threshold, sequence sums within and past the
// chunk capacity, and the layer and runtime switches.
func sampleRequests(name string, platform core.Platform) []core.Request {
	var out []core.Request
	platforms := []core.Platform{platform, core.PlatformHIP}
	for _, mode := range core.ForwardModes() {
		for _, prefix := range []int64{0, 1, 8191, 8192, 20000} {
			for _, seqExtra := range []int64{100, 200000} {
				for v := 0; v < 6; v++ {
					req := core.NewRequest(name, mode)
					req.Batch.ExtendPrefixLens = []int64{prefix}
					req.Batch.SeqLens = []int64{prefix + seqExtra}
					req.Batch.MaxChunkCapacity = 131072
					req.Runtime.Platform = platforms[v%2]
					req.Layer.FusedQKVAProjWithMQA = true
					switch v {
					case 1:
						req.Runtime.PiecewiseCUDAGraph = true
					case 2:
						req.Runtime.DeterministicInference = true
						req.Layer.ROCmFusedDecodeMLA = true
					case 3:
						req.Layer.DisableChunkedPrefixCache = true
						req.Layer.FlashinferMLADisableRagged = true
					case 4:
						req.Runtime.BreakableCUDAGraph = true
						req.Runtime.DSAUseMHA = true
						req.Layer.UseDSA = true
					case 5:
						req.Batch.MLAPrefillCP = true
						req.Layer.IntelAMX = true
					}
					out = append(out, req)
				}
			}
		}
	}
	return out
}

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// snapshotDir holds the API snapshots, relative to the module root.
const snapshotDir = "sdkapi"

// exceptFile lists the deliberate incompatible changes since the last
// release, in snapshotDir.
const exceptFile = "except.txt"

// sdkPackages are the packages of the SDK: what a plugin built in another
// module imports.
// The module's packages that SDK signatures name (refkernels' and
// backendkit's tensors are package kernels' types, wire's server answers
// the plugin protocol's messages of wire/pluginv1) are part of it:
// TestSDKNamesOnlyItsOwnPackages holds the list to that.
func sdkPackages() []string {
	const mod = "github.com/attnplug/attnplug/"
	return []string{mod + "core", mod + "wire", mod + "refkernels", mod + "backendkit", mod + "conformance", mod + "launch",
		mod + "kernels", mod + "wire/pluginv1"}
}

// features returns the exported API of pkgs, one feature a line, sorted,
// in the form of Go's api/*.txt files:
//
//	pkg core, func NewRequest(string, ForwardMode) Request
//	pkg core, type Request struct, Backend string
//	pkg core, method (*RuleBackend) Dispatch(context.Context, *Request) (Method, error)
func features(dir string, pkgs []string) ([]string, error) {
	out, _, err := featuresNaming(dir, pkgs)
	return out, err
}

// featuresNaming is features, with the import paths of the other packages
// the features name.
func featuresNaming(dir string, pkgs []string) ([]string, map[string]bool, error) {
	names := map[string]bool{}
	exports, err := exportData(dir, pkgs)
	if err != nil {
		return nil, nil, err
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	var out []string
	for _, path := range pkgs {
		p, err := imp.Import(path)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, packageFeaturesNaming(p, func(q *types.Package) { names[q.Path()] = true })...)
	}
	sort.Strings(out)
	return out, names, nil
}

// exportData runs go list -export in dir and returns the export data file
// of every package pkgs depend on.
func exportData(dir string, pkgs []string) (map[string]string, error) {
	args := append([]string{"list", "-export", "-deps", "-json=ImportPath,Export"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %v\n%s", err, strings.TrimSpace(stderr.String()))
	}
	m := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list -export: %w", err)
		}
		m[p.ImportPath] = p.Export
	}
	return m, nil
}

// packageFeaturesNaming lists the exported features of p, calling named
// with each other package that a feature names.
func packageFeaturesNaming(p *types.Package, named func(*types.Package)) []string {
	prefix := "pkg " + p.Name() + ", "
	qual := func(q *types.Package) string {
		if q == p {
			return ""
		}
		named(q)
		return q.Name()
	}
	ts := func(t types.Type) string { return types.TypeString(t, qual) }
	var out []string
	add := func(format string, args ...any) { out = append(out, prefix+fmt.Sprintf(format, args...)) }
	scope := p.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.Const:
			add("const %s %s = %s", name, ts(o.Type()), o.Val().ExactString())
		case *types.Var:
			add("var %s %s", name, ts(o.Type()))
		case *types.Func:
			add("func %s%s", name, signature(o.Type().(*types.Signature), qual))
		case *types.TypeName:
			if o.IsAlias() {
				add("type %s = %s", name, ts(o.Type()))
				continue
			}
			out = append(out, typeFeatures(prefix, o, qual)...)
		}
	}
	return out
}

// typeFeatures lists a named type: its kind, its exported fields or
// interface methods, and its exported methods.
func typeFeatures(prefix string, o *types.TypeName, qual types.Qualifier) []string {
	var out []string
	name := o.Name()
	named, _ := o.Type().(*types.Named)
	if named != nil && named.TypeParams().Len() > 0 {
		var tps []string
		for i := 0; i < named.TypeParams().Len(); i++ {
			tp := named.TypeParams().At(i)
			tps = append(tps, tp.Obj().Name()+" "+types.TypeString(tp.Constraint(), qual))
		}
		name += "[" + strings.Join(tps, ", ") + "]"
	}
	switch u := o.Type().Underlying().(type) {
	case *types.Struct:
		out = append(out, fmt.Sprintf("%stype %s struct", prefix, name))
		for i := 0; i < u.NumFields(); i++ {
			f := u.Field(i)
			if !f.Exported() {
				continue
			}
			if f.Embedded() {
				out = append(out, fmt.Sprintf("%stype %s struct, embedded %s", prefix, name, types.TypeString(f.Type(), qual)))
				continue
			}
			out = append(out, fmt.Sprintf("%stype %s struct, %s %s", prefix, name, f.Name(), types.TypeString(f.Type(), qual)))
		}
	case *types.Interface:
		var methods []string
		unexported := false
		for i := 0; i < u.NumMethods(); i++ {
			m := u.Method(i)
			if !m.Exported() {
				unexported = true
				continue
			}
			methods = append(methods, m.Name())
			out = append(out, fmt.Sprintf("%stype %s interface, %s%s", prefix, name, m.Name(), signature(m.Type().(*types.Signature), qual)))
		}
		sort.Strings(methods)
		if unexported {
			methods = append(methods, "unexported methods")
		}
		// The whole method set on one line: adding a method to an
		// interface breaks its implementations.
		out = append(out, fmt.Sprintf("%stype %s interface { %s }", prefix, name, strings.Join(methods, ", ")))
	default:
		out = append(out, fmt.Sprintf("%stype %s %s", prefix, name, types.TypeString(u, qual)))
	}
	if named == nil {
		return out
	}
	for i := 0; i < named.NumMethods(); i++ {
		m := named.Method(i)
		if !m.Exported() {
			continue
		}
		sig := m.Type().(*types.Signature)
		recv := o.Name()
		if _, ptr := sig.Recv().Type().(*types.Pointer); ptr {
			recv = "*" + recv
		}
		out = append(out, fmt.Sprintf("%smethod (%s) %s%s", prefix, recv, m.Name(), signature(sig, qual)))
	}
	return out
}

// signature writes a function's parameters and results without names.
func signature(sig *types.Signature, qual types.Qualifier) string {
	var sb strings.Builder
	tuple := func(t *types.Tuple, variadic bool) {
		for i := 0; i < t.Len(); i++ {
			if i > 0 {
				sb.WriteString(", ")
			}
			typ := t.At(i).Type()
			if variadic && i == t.Len()-1 {
				sb.WriteString("..." + types.TypeString(typ.(*types.Slice).Elem(), qual))
				continue
			}
			sb.WriteString(types.TypeString(typ, qual))
		}
	}
	sb.WriteString("(")
	tuple(sig.Params(), sig.Variadic())
	sb.WriteString(")")
	switch r := sig.Results(); r.Len() {
	case 0:
	case 1:
		sb.WriteString(" " + types.TypeString(r.At(0).Type(), qual))
	default:
		sb.WriteString(" (")
		tuple(r, false)
		sb.WriteString(")")
	}
	return sb.String()
}

// result is the outcome of a check.
type result struct {
	baseline string   // the snapshot checked against
	missing  []string // features of the snapshot gone from the API
	excepted []string // features gone, as except.txt allows
	added    []string // features new since the snapshot
}

// Missing returns the incompatible changes.
func (r *result) Missing() []string { return r.missing }

// Summary says what the check found, naming every incompatible change and
// how to proceed.
func (r *result) Summary() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "API of %s checked against %s: %d features added, %d removed as %s/%s allows",
		strings.Join(shortNames(sdkPackages()), ", "), r.baseline, len(r.added), len(r.excepted), snapshotDir, exceptFile)
	if len(r.missing) == 0 {
		sb.WriteString("; compatible")
		return sb.String()
	}
	fmt.Fprintf(&sb, "\n%d features of %s are gone or changed (an incompatible change):\n", len(r.missing), r.baseline)
	for _, m := range r.missing {
		sb.WriteString("  -" + m + "\n")
	}
	fmt.Fprintf(&sb, "Keep the old API (add, deprecate, never change), or, for a deliberate break, add these lines to %s/%s and say why under \"Breaking\" in CHANGELOG.md (see docs/writing-a-backend.md, Compatibility).",
		snapshotDir, exceptFile)
	return sb.String()
}

func shortNames(pkgs []string) []string {
	out := make([]string, len(pkgs))
	for i, p := range pkgs {
		out[i] = filepath.Base(p)
	}
	return out
}

// check compares cur with the newest snapshot under dir.
func check(dir string, cur []string) (*result, error) {
	path, err := latestSnapshot(filepath.Join(dir, snapshotDir))
	if err != nil {
		return nil, err
	}
	base, err := readFeatures(path)
	if err != nil {
		return nil, err
	}
	except, err := readFeatures(filepath.Join(dir, snapshotDir, exceptFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	have := map[string]bool{}
	for _, f := range cur {
		have[f] = true
	}
	allowed := map[string]bool{}
	for _, f := range except {
		allowed[f] = true
	}
	r := &result{baseline: filepath.Base(path)}
	old := map[string]bool{}
	for _, f := range base {
		old[f] = true
		switch {
		case have[f]:
		case allowed[f]:
			r.excepted = append(r.excepted, f)
		default:
			r.missing = append(r.missing, f)
		}
	}
	for _, f := range cur {
		if !old[f] {
			r.added = append(r.added, f)
		}
	}
	return r, nil
}

// latestSnapshot returns the snapshot of the highest version in dir.
func latestSnapshot(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("API snapshots: %w", err)
	}
	best, bestV := "", [3]int{-1}
	for _, e := range entries {
		v, ok := parseVersion(strings.TrimSuffix(e.Name(), ".txt"))
		if !ok || !strings.HasSuffix(e.Name(), ".txt") {
			continue
		}
		if v[0] > bestV[0] || v[0] == bestV[0] && (v[1] > bestV[1] || v[1] == bestV[1] && v[2] > bestV[2]) {
			best, bestV = e.Name(), v
		}
	}
	if best == "" {
		return "", fmt.Errorf("no API snapshot vX.Y.Z.txt in %s", dir)
	}
	return filepath.Join(dir, best), nil
}

// parseVersion parses "v1.2.3".
func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if !strings.HasPrefix(s, "v") || len(parts) != 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p != strconv.Itoa(n) {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

// readFeatures reads a snapshot: one feature a line; blank lines and lines
// starting with '#' are skipped.
func readFeatures(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	return out, sc.Err()
}

func snapshotHeader(version string) string {
	return "# The exported API of attnplug's Go SDK at " + version + ", one feature a line.\n" +
		"# Written by `go run ./internal/apicheck -write " + version + "` (make api-snapshot); never edit by hand.\n"
}

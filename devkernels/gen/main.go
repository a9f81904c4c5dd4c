// Command gen builds a set of device code ahead of time (a devkernels.Set:
// the plugins' kernels, devkernels.Kernels, or the verification layer's
// fills, fill.Set): every module's source compiled by nvcc for each
// architecture the set names (PTX for compute_XX, a cubin for sm_XX),
// written with a manifest (devkernels.Manifest) into the images directory
// that the set's package embeds. It needs nvcc (the CUDA toolkit), not a
// GPU. Run it as `make device-code`, then commit the images. With -syntax
// CLANG it builds nothing and checks the sources' C++ with clang's CUDA
// front end instead (checkSyntax), where there is no nvcc: `make
// device-syntax`.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/devkernels/fill"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "devkernels/images", "directory the images and manifest.json are written to")
	nvcc := flag.String("nvcc", "nvcc", "the nvcc to compile with")
	setName := flag.String("set", "kernels", "the set of device code to build: kernels (the plugins') or fill (the verification layer's)")
	parallel := flag.Int("j", runtime.NumCPU(), "nvcc (or clang) runs at once")
	syntax := flag.String("syntax", "", "build nothing: check every module's source for each of its architectures with this clang++ (its CUDA front end, no CUDA toolkit), as a tree without nvcc can")
	flag.Parse()
	sets := map[string]*devkernels.Set{devkernels.Kernels.Name: devkernels.Kernels, fill.Set.Name: fill.Set}
	set, ok := sets[*setName]
	if !ok {
		return fmt.Errorf("-set %q: want kernels or fill", *setName)
	}
	if *syntax != "" {
		return checkSyntax(*syntax, set, *parallel)
	}
	version, err := exec.Command(*nvcc, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w (gen needs the CUDA toolkit's nvcc)", *nvcc, err)
	}
	lines := strings.Split(strings.TrimSpace(string(version)), "\n")
	tmp, unlock, err := buildDir()
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	m := devkernels.Manifest{Compiler: strings.TrimSpace(lines[len(lines)-1]), Sources: map[string]string{}}
	names, sources, err := writeSources(set, tmp)
	if err != nil {
		return err
	}
	// Every (module, architecture) is one nvcc run, at most -j at once;
	// the manifest lists them in order.
	var jobs []job
	for _, name := range names {
		m.Sources[name] = devkernels.SourceSHA256(sources[name])
		for _, arch := range set.Archs(name) {
			jobs = append(jobs, job{name, arch})
		}
	}
	images := make([]devkernels.ManifestImage, len(jobs))
	err = inParallel(len(jobs), *parallel, func(i int) (err error) {
		images[i], err = compile(*nvcc, *out, filepath.Join(tmp, jobs[i].name+".cu"), jobs[i].name, jobs[i].arch)
		return err
	})
	if err != nil {
		return err
	}
	m.Images = images
	if m.Shared, err = sharedOf(*out, images); err != nil {
		return err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*out, "manifest.json"), append(data, '\n'), 0o644)
}

// sourceTime is the modification time every source is given before it
// is compiled.
var sourceTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// job is one module's source compiled (or checked) for one architecture.
type job struct{ name, arch string }

// writeSources writes every module's source of set into dir as
// <module>.cu, each with the modification time sourceTime (the cubins'
// line tables record it), and returns the modules in name order and their
// sources.
func writeSources(set *devkernels.Set, dir string) ([]string, map[string]string, error) {
	sources := set.Sources()
	names := make([]string, 0, len(sources))
	for name := range sources {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		src := filepath.Join(dir, name+".cu")
		if err := os.WriteFile(src, []byte(sources[name]), 0o644); err != nil {
			return nil, nil, err
		}
		if err := os.Chtimes(src, sourceTime, sourceTime); err != nil {
			return nil, nil, err
		}
	}
	return names, sources, nil
}

// inParallel runs f(0) to f(n-1), at most jobs at once (at least one), and
// returns their errors joined.
func inParallel(n, jobs int, f func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, max(jobs, 1))
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// buildDir makes the one directory the sources are compiled in, at the
// same path on every machine: nvcc writes the source's path into the
// images (PTX .file lines, the names of internal functions), so a build
// from a path of its own each time would differ from the last in every
// image. It holds a lock file while gen runs; unlock removes it all.
func buildDir() (string, func(), error) {
	dir := filepath.Join(os.TempDir(), "attnplug-devkernels-gen")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	lock := filepath.Join(dir, "lock")
	f, err := os.OpenFile(lock, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", nil, fmt.Errorf("%s: another gen is building here (remove %s if none is): %w", dir, lock, err)
	}
	f.Close()
	return dir, func() { os.RemoveAll(dir) }, nil
}

// sharedOf reads every entry's dynamic shared memory from the PTX images
// in dir (the <entry>_shared constants its source exports:
// devkernels.SharedConstants), which every PTX of a module must agree on.
// A set whose sources export none (the fills) has none.
func sharedOf(dir string, images []devkernels.ManifestImage) (map[string]int, error) {
	var out map[string]int
	for _, im := range images {
		if im.Format != core.FormatPTX {
			continue
		}
		ptx, err := os.ReadFile(filepath.Join(dir, im.File))
		if err != nil {
			return nil, err
		}
		for entry, n := range devkernels.SharedConstants(string(ptx)) {
			if out == nil {
				out = map[string]int{}
			}
			if was, ok := out[entry]; ok && was != n {
				return nil, fmt.Errorf("%s: %s_shared is %d, another image of its module says %d", im.File, entry, n, was)
			}
			out[entry] = n
		}
	}
	return out, nil
}

// compile builds module name's source src for arch into dir: PTX for a
// compute_XX, a cubin for an sm_XX.
func compile(nvcc, dir, src, name, arch string) (devkernels.ManifestImage, error) {
	format, mode, ext := core.FormatCUBIN, "--cubin", "cubin"
	virtual := strings.Replace(arch, "sm_", "compute_", 1)
	if strings.HasPrefix(arch, "compute_") {
		format, mode, ext = core.FormatPTX, "--ptx", "ptx"
	}
	file := fmt.Sprintf("%s.%s.%s", name, arch, ext)
	// -gencode names the architecture-specific targets (sm_90a) exactly;
	// nvcc 13.0's -arch=sm_90a also runs a plain sm_90 pass.
	target := "-arch=" + arch
	if strings.HasSuffix(arch, "a") {
		target = fmt.Sprintf("-gencode=arch=%s,code=%s", virtual, arch)
	}
	args := append([]string{target, mode}, devkernels.Flags...)
	args = append(args, "-o", filepath.Join(dir, file), src)
	var stderr bytes.Buffer
	cmd := exec.Command(nvcc, args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return devkernels.ManifestImage{}, fmt.Errorf("nvcc %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	os.Stderr.Write(stderr.Bytes())
	image, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return devkernels.ManifestImage{}, err
	}
	fmt.Fprintf(os.Stderr, "gen: %s: %d bytes\n", file, len(image))
	return devkernels.ManifestImage{Module: name, Arch: arch, Format: format, File: file, SHA256: core.ImageSHA256(image)}, nil
}

package main

import (
	"bytes"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/attnplug/attnplug/devkernels"
)

// nvrtcBuiltins declares for clang what NVRTC gives every source.
//
//go:embed nvrtc_builtins.h
var nvrtcBuiltins string

// checkSyntax checks every module of set with clang's CUDA front end
// (clang: a clang++ with CUDA support; clang 19 and newer know sm_90a), for
// each architecture the module is built for (a compute_XX as its sm_XX),
// jobs at once: the source exactly as nvcc and NVRTC take it (set.Sources,
// the flags' C++ standard), after nvrtc_builtins.h, device code only, no
// output. It needs no CUDA toolkit, so a change to the device code can be
// checked where there is no GPU and no nvcc; the PTX inside the sources'
// asm is not checked (ptxas, on a machine with nvcc, does that). The error
// names each module and architecture that failed, with clang's messages.
func checkSyntax(clang string, set *devkernels.Set, jobs int) error {
	if _, err := exec.LookPath(clang); err != nil {
		return fmt.Errorf("-syntax %s: %w (a clang++ with CUDA support: apt-get install clang-19)", clang, err)
	}
	tmp, err := os.MkdirTemp("", "attnplug-gen-syntax")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	shim := filepath.Join(tmp, "nvrtc_builtins.h")
	if err := os.WriteFile(shim, []byte(nvrtcBuiltins), 0o644); err != nil {
		return err
	}
	names, _, err := writeSources(set, tmp)
	if err != nil {
		return err
	}
	var todo []job
	for _, name := range names {
		var archs []string
		for _, a := range set.Archs(name) {
			if a = strings.Replace(a, "compute_", "sm_", 1); !slices.Contains(archs, a) {
				archs = append(archs, a)
				todo = append(todo, job{name, a})
			}
		}
	}
	return inParallel(len(todo), jobs, func(i int) error {
		j := todo[i]
		args := []string{"-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=" + j.arch, "-nocudainc", "-nocudalib",
			"-fsyntax-only", "-include", shim}
		for _, f := range devkernels.Flags {
			if strings.HasPrefix(f, "-std=") {
				args = append(args, f)
			}
		}
		args = append(args, filepath.Join(tmp, j.name+".cu"))
		var out bytes.Buffer
		cmd := exec.Command(clang, args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s for %s: %s %s: %w\n%s", j.name, j.arch, clang, strings.Join(args, " "), err, out.Bytes())
		}
		fmt.Fprintf(os.Stderr, "gen: %s for %s: the source checks (%s)\n", j.name, j.arch, clang)
		os.Stderr.Write(out.Bytes())
		return nil
	})
}

package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/devkernels/fill"
)

// clangCUDA returns a clang++ whose CUDA front end knows sm_90a
// ($ATTNPLUG_CLANG, else the first of clang++-19 and newer, or clang++, on
// PATH that checks an empty sm_90a source), skipping t where there is
// none: gen -syntax is for machines without nvcc, and CI has neither.
func clangCUDA(t *testing.T) string {
	t.Helper()
	names := []string{os.Getenv("ATTNPLUG_CLANG"), "clang++-22", "clang++-21", "clang++-20", "clang++-19", "clang++"}
	for _, name := range names {
		if name == "" {
			continue
		}
		path, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		cmd := exec.Command(path, "-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_90a", "-nocudainc", "-nocudalib", "-fsyntax-only", "-")
		cmd.Stdin = strings.NewReader("")
		if cmd.Run() == nil {
			return path
		}
	}
	t.Skip("no clang++ with a CUDA front end that knows sm_90a (apt-get install clang-19)")
	return ""
}

// TestSyntaxOfTheSources: every module of both sets checks for each of its
// architectures, as gen -syntax runs it.
func TestSyntaxOfTheSources(t *testing.T) {
	clang := clangCUDA(t)
	for _, set := range []*devkernels.Set{devkernels.Kernels, fill.Set} {
		if err := checkSyntax(clang, set, 4); err != nil {
			t.Errorf("set %s: %v", set.Name, err)
		}
	}
}

// TestSyntaxNamesWhatFails: a source that uses an undeclared name fails
// the check, the error naming its module, the architecture and clang's
// message; its other module passes.
func TestSyntaxNamesWhatFails(t *testing.T) {
	clang := clangCUDA(t)
	set := &devkernels.Set{
		Name: "test",
		Sources: func() map[string]string {
			return map[string]string{
				"good":   `extern "C" __global__ void ok(float* p) { p[threadIdx.x] = fabsf(p[threadIdx.x]); }`,
				"broken": `extern "C" __global__ void bad(float* p) { p[0] = no_such_function(p[1]); }`,
			}
		},
		Archs: func(string) []string { return []string{"compute_80", "sm_90a"} },
	}
	err := checkSyntax(clang, set, 2)
	if err == nil {
		t.Fatal("a source with an undeclared function checked")
	}
	for _, want := range []string{"broken for sm_80", "broken for sm_90a", "no_such_function"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "good for") {
		t.Errorf("the good module failed: %v", err)
	}
}

package gpucheck

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devicecheck"
	"github.com/attnplug/attnplug/devicehost"
	"github.com/attnplug/attnplug/launch/cudaexec"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
)

// firstUse is what the child of TestFirstUse measured, in milliseconds
// from its start.
type firstUse struct {
	Registry, Modules, Context, Load, Plan, Launched float64
	Format, Arch                                     string
}

// TestFirstUse measures, in a fresh process each time, the time from the
// process's start to its first launch of the fa3 plugin's MLA decode: a
// registry over the real plugin binary ($ATTNPLUG_FIRST_USE_PLUGINS, the
// plugin directory; skipped without it), the modules (the images built
// ahead of time, or NVRTC with ATTNPLUG_DEVICE_CODE=nvrtc), a CUDA context,
// the module load, a plan and a launch, synchronized.
func TestFirstUse(t *testing.T) {
	if os.Getenv("ATTNPLUG_FIRST_USE_CHILD") == "1" {
		firstUseChild(t)
		return
	}
	dir := os.Getenv("ATTNPLUG_FIRST_USE_PLUGINS")
	if dir == "" {
		t.Skip("set ATTNPLUG_FIRST_USE_PLUGINS to a plugin directory holding attnplug-backend-fa3")
	}
	openEnv(t) // a GPU is there, or skip
	for _, mode := range []string{"images", "nvrtc"} {
		cache := t.TempDir() // run 0 describes the plugin; run 1 reads the description cache
		for run := range 2 {
			start := time.Now()
			cmd := exec.Command(os.Args[0], "-test.run=^TestFirstUse$", "-test.v")
			cmd.Env = append(os.Environ(), "ATTNPLUG_FIRST_USE_CHILD=1", "ATTNPLUG_CACHE_DIR="+cache)
			if mode == "nvrtc" {
				cmd.Env = append(cmd.Env, "ATTNPLUG_DEVICE_CODE=nvrtc")
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var fu firstUse
			var wall time.Duration
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if line, ok := strings.CutPrefix(sc.Text(), "first-use: "); ok {
					wall = time.Since(start)
					if err := json.Unmarshal([]byte(line), &fu); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := cmd.Wait(); err != nil || wall == 0 {
				t.Fatalf("%s: the child failed: %v", mode, err)
			}
			t.Logf("%s (run %d, %s %s): first launch %.0f ms after the process started (in it: registry %.1f, modules %.1f, CUDA context %.1f, load %.1f, plan %.1f, launched %.1f ms)",
				mode, run, fu.Format, fu.Arch, float64(wall.Microseconds())/1000, fu.Registry, fu.Modules, fu.Context, fu.Load, fu.Plan, fu.Launched)
		}
	}
}

func firstUseChild(t *testing.T) {
	t0 := time.Now()
	ms := func() float64 { return float64(time.Since(t0).Microseconds()) / 1000 }
	var fu firstUse
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg, err := registry.New(ctx, registry.Config{PluginDirs: []string{os.Getenv("ATTNPLUG_FIRST_USE_PLUGINS")}, Logger: hclog.NewNullLogger(), CacheDir: os.Getenv("ATTNPLUG_CACHE_DIR")})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	fu.Registry = ms()
	dev, err := cuda.Open()
	if err != nil {
		t.Fatal(err)
	}
	h := devicehost.NewHost(dev, reg)
	defer h.Close()
	fu.Context = ms()
	mods, err := reg.KernelModules(ctx, "fa3", h.Device())
	if err != nil {
		t.Fatal(err)
	}
	fu.Modules = ms()
	fu.Format, fu.Arch = string(mods[0].Format), mods[0].Arch
	if err := h.Load(ctx, "fa3"); err != nil { // the registry's modules, fetched above
		t.Fatal(err)
	}
	fu.Load = ms()
	req := &core.PlanRequest{Backend: "fa3", Method: core.MLA, DType: "bf16", Graph: true,
		Dims:   core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: devicecheck.Scale},
		Shape:  core.PlanShape{SeqLens: []int64{4096}, QLens: []int64{1}, PageSize: 64, NumPages: 64, MaxSeqLen: 4096},
		Device: h.Device()}
	pr, err := h.Plan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	fu.Plan = ms()
	err = dev.Do(func(x *cuda.Ctx) error {
		var bufs []cudaexec.Buffer
		for _, ts := range pr.Tensors() {
			n := max(ts.Bytes(), 4)
			p, err := x.Alloc(n)
			if err != nil {
				return err
			}
			defer x.Free(p)
			if err := x.Fill32(p, 0, n/4); err != nil {
				return err
			}
			bufs = append(bufs, cudaexec.Buffer{Ptr: p, Bytes: n})
		}
		s, err := x.NewStream()
		if err != nil {
			return err
		}
		defer x.DestroyStream(s)
		if err := x.Synchronize(); err != nil {
			return err
		}
		if err := pr.Launch(x, s, bufs); err != nil {
			return err
		}
		return x.SyncStream(s)
	})
	if err != nil {
		t.Fatal(err)
	}
	fu.Launched = ms()
	line, _ := json.Marshal(fu)
	fmt.Printf("first-use: %s\n", line)
}

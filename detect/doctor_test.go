package detect

import (
	"bytes"
	"context"
	"io/fs"
	"strings"
	"testing"
)

func TestDoctorFixtures(t *testing.T) {
	tests := []struct {
		fixture string
		levels  []string // one per finding
		advice  []string // substrings of the joined advice
	}{
		{fixture: "h200", levels: []string{LevelOK}},
		{fixture: "mi300x", levels: []string{LevelOK}},
		{fixture: "spr_amx", levels: []string{LevelOK}},
		{fixture: "container_no_driver", levels: []string{LevelError}, advice: []string{"modprobe nvidia", "--gpus all"}},
		{fixture: "vfio", levels: []string{LevelError, LevelError}, advice: []string{"/sys/bus/pci/drivers/vfio-pci/unbind", "load the driver: modprobe nvidia"}},
		{fixture: "nvidia_plus_igpu", levels: []string{LevelInfo, LevelOK}, advice: []string{"integrated GPUs are not used"}},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			fs := Doctor(detectFixture(t, tt.fixture, Options{}))
			checkFindings(t, fs, tt.levels, tt.advice)
			if tt.levels[len(tt.levels)-1] == LevelOK && !strings.HasPrefix(fs[len(fs)-1].Problem, "healthy") {
				t.Errorf("last finding %q does not say healthy", fs[len(fs)-1].Problem)
			}
		})
	}
}

func TestDoctorAdvice(t *testing.T) {
	perm := func(node string) func(string) error {
		return func(p string) error {
			if strings.HasSuffix(p, node) {
				return &fs.PathError{Op: "open", Path: p, Err: fs.ErrPermission}
			}
			return openNode(p)
		}
	}
	tests := []struct {
		name   string
		files  map[string]string
		open   func(string) error
		xcomp  func() (uint64, error)
		levels []string
		advice []string
	}{
		{
			name:   "amd container without /dev/kfd",
			files:  amdTree("90402", func(m map[string]string) { delete(m, "dev/kfd") }),
			levels: []string{LevelError}, advice: []string{"--device /dev/kfd --device /dev/dri"},
		},
		{
			name:   "amd node permission",
			files:  amdTree("90402", nil),
			open:   perm("/dev/kfd"),
			levels: []string{LevelError}, advice: []string{"render and video groups"},
		},
		{
			name:   "nvidia not allocated",
			files:  nvidiaTree("0x2335", func(m map[string]string) { delete(m, infoRel) }),
			levels: []string{LevelError}, advice: []string{"NVIDIA_VISIBLE_DEVICES"},
		},
		{
			name:   "nvidia missing node",
			files:  nvidiaTree("0x2335", func(m map[string]string) { delete(m, "dev/nvidia0") }),
			levels: []string{LevelError}, advice: []string{"nvidia-modprobe", "--device /dev/nvidiactl"},
		},
		{
			name: "ascend without driver",
			files: map[string]string{
				pciDir + "/vendor": "0x19e5", pciDir + "/device": "0xd802", pciDir + "/class": "0x120000",
			},
			levels: []string{LevelError}, advice: []string{"install the Ascend driver"},
		},
		{
			name:   "amx refused by an old kernel",
			files:  map[string]string{"proc/cpuinfo": "processor : 0\nflags : fpu amx_tile amx_bf16 amx_int8\n"},
			xcomp:  func() (uint64, error) { return 0x2e7, nil },
			levels: []string{LevelError}, advice: []string{"Linux >= 5.16"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := tree(t, tt.files)
			e := testEnv(root)
			if tt.open != nil {
				e.open = tt.open
			}
			if tt.xcomp != nil {
				e.real, e.goarch, e.xcomp = true, "amd64", tt.xcomp
			}
			r, err := detect(context.Background(), Options{}, e)
			if err != nil {
				t.Fatal(err)
			}
			checkFindings(t, Doctor(r), tt.levels, tt.advice)
		})
	}
}

// checkFindings compares finding levels and looks for advice substrings.
func checkFindings(t *testing.T, fs []Finding, levels, advice []string) {
	t.Helper()
	var got []string
	var all strings.Builder
	for _, f := range fs {
		got = append(got, f.Level)
		all.WriteString(strings.Join(f.Advice, "\n"))
		if f.Level != LevelOK && (f.Problem == "" || len(f.Advice) == 0) {
			t.Errorf("finding %+v has no problem or no advice", f)
		}
	}
	if !equal(got, levels) {
		t.Errorf("levels: got %v, want %v (%+v)", got, levels, fs)
	}
	for _, a := range advice {
		if !strings.Contains(all.String(), a) {
			t.Errorf("advice lacks %q:\n%s", a, all.String())
		}
	}
}

func TestWriteDoctor(t *testing.T) {
	var b bytes.Buffer
	if err := WriteDoctor(&b, Doctor(detectFixture(t, "vfio", Options{}))); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"[error] NVIDIA H200 SXM 141GB at 0000:3b:00.0: driver: bound to vfio-pci", "    - ", "[error] NVIDIA H200 SXM 141GB at 0000:5e:00.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := WriteDoctor(&b, nil); err != nil || b.String() != "no findings\n" {
		t.Errorf("no findings: got %q, %v", b.String(), err)
	}
}

func TestWriteTable(t *testing.T) {
	r := detectFixture(t, "nvidia_plus_igpu", Options{})
	r.Plugins = []PluginInfo{{Name: "triton", Path: "/opt/attnplug/triton", Served: true}}
	var b bytes.Buffer
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"platform:", "cuda", "mla=triton  dsa=triton", "VENDOR", "PCI ADDRESS",
		"0000:00:02.0", "8086:3e92", "capable: integrated GPU",
		"0000:01:00.0", "10de:2684", "sm89", "8.9", "PLUGIN", "/opt/attnplug/triton",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// Columns are aligned: the header and rows share the PCI ADDRESS column.
	lines := strings.Split(out, "\n")
	var header, row string
	for _, l := range lines {
		if strings.HasPrefix(l, "VENDOR") {
			header = l
		}
		if strings.Contains(l, "0000:01:00.0") {
			row = l
		}
	}
	if strings.Index(header, "PCI ADDRESS") != strings.Index(row, "0000:01:00.0") {
		t.Errorf("columns not aligned:\n%s\n%s", header, row)
	}
	if err := WriteTable(&b, nil); err == nil {
		t.Errorf("nil report: no error")
	}
}

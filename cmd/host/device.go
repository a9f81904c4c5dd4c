package main

import (
	"flag"

	"github.com/attnplug/attnplug/conformance"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/launch/cudaexec"
)

// deviceFlags is the --arch flag of the commands that ask plugins for
// device code: plugins --kernels, lock --modules and conform.
type deviceFlags struct {
	arch string
}

func (f *deviceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.arch, "arch", "", "NVIDIA architecture to ask the plugins' device code for, such as sm_90 or sm_100 "+
		"(default: this machine's GPU, else an example "+conformance.DefaultArch+" device)")
}

// deviceHere is what device says of this machine's GPU.
const deviceHere = "this machine's GPU"

// device returns the device to ask for, and says which it is, for
// people: the example device of --arch; else this machine's GPU; else the
// example device of conformance.DefaultArch.
func (f *deviceFlags) device() (core.DeviceInfo, string, error) {
	if f.arch != "" {
		d, err := conformance.ExampleDevice(f.arch)
		if err != nil {
			return d, "", &usageError{"--arch: " + err.Error()}
		}
		return d, "asked for with --arch", nil
	}
	if d, err := cuda.Open(); err == nil {
		info := d.Info()
		d.Close()
		return cudaexec.DeviceInfo(info), deviceHere, nil
	}
	d, _ := conformance.ExampleDevice(conformance.DefaultArch)
	return d, "no GPU here; --arch picks another architecture", nil
}

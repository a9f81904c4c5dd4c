// Package kernelrun is what attnplug run does with one request line:
// decide it through a registry, make its tensors (from a seed, or given
// inline in the line's "tensors" object, whose lengths are checked
// against the shapes before anything is decoded), run the chosen kernel
// where the registry sends it (a plugin over shared memory, or the host)
// or, with a Device, the plugin's device code on the GPU (a
// devicehost.Host whose modules and plans come from the registry), and
// compare the output with the float64 reference.
//
// Stream answers a JSON Lines stream, one Answer (or error) a line; Run
// does one request for a Go caller. This package is the kernel side of
// the host: it imports the kernel stack (kernels, backendkit, shm, and
// devicehost, the host's device side), and nothing on the dispatch path
// (registry, core, wire, engine) imports it.
package kernelrun

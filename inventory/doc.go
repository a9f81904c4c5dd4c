// Package inventory is what a host says of the plugins its registry
// found, and how it pins them: the table of attnplug plugins
// (WritePlugins), the kernel catalogs and device code of plugins
// --kernels (WriteKernels: each module with its format, its PTX ISA or
// cubin architecture and the oldest driver that loads it), the lock
// file's pins of attnplug lock (PinModules, WriteLock, LockStatus), the plugins this hardware serves
// (PluginsServed, ServedHardware: attnplug detect and serve), and the
// table of every name on sample batches (Demo).
//
// It reads a *registry.Registry through its exported API only, and
// writes the formats users script against (the JSON fields and the
// tables are the attnplug command's, unchanged). cmd/host parses the
// flags and hands the work here. It is on the dispatch side of the
// layers: it imports core, registry, launch (the floor of an image's
// driver, launch.DriverFloor) and detect, none of the kernel stack.
package inventory

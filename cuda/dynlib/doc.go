// Package dynlib opens shared libraries and looks up their symbols
// through purego, without cgo, so that the loader's error is never lost.
// dlerror's message belongs to the OS thread whose dlopen or dlsym failed
// and is cleared by the next dlerror there; purego calls dlopen and
// dlerror one after the other, and between them a goroutine can move to
// another thread, or another goroutine make its own call on the same one,
// which left the message empty or someone else's. Open and Symbol make
// each call and the dlerror that explains it under one mutex, on one
// locked thread, and say what failed when the loader says nothing.
//
// Every dlopen and dlsym of the module goes through here: the CUDA driver,
// NVRTC and cuBLAS (package cuda), and the driver query of package detect.
// It lives under cuda, whose libraries it opens, and imports purego and
// the standard library only, so detect takes it without the rest of cuda.
// It builds on linux/amd64 and linux/arm64 only, as they do.
package dynlib

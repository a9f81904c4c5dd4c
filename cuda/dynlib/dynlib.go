//go:build linux && (amd64 || arm64)

package dynlib

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/ebitengine/purego"
)

// mu serialises every call of this package: one dlopen or dlsym, and its
// dlerror, at a time.
var mu sync.Mutex

// Open opens the shared library name with mode (purego.RTLD_NOW, ...),
// as purego.Dlopen does. The error is the loader's message, which names
// the library; when the loader gives none, one that says what failed.
// It is safe for concurrent use.
func Open(name string, mode int) (uintptr, error) {
	return locked("dlopen "+name, func() (uintptr, error) { return purego.Dlopen(name, mode) })
}

// Symbol returns the address of the symbol name in the library lib that
// Open returned, as purego.Dlsym does; the error is as Open's. It is safe
// for concurrent use.
func Symbol(lib uintptr, name string) (uintptr, error) {
	return locked("dlsym "+name, func() (uintptr, error) { return purego.Dlsym(lib, name) })
}

// locked runs call, which makes one loader call and reads dlerror when it
// fails, under mu on a locked OS thread. An empty message becomes one
// that names what (the call and its argument).
func locked(what string, call func() (uintptr, error)) (uintptr, error) {
	mu.Lock()
	defer mu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, err := call()
	if err != nil && err.Error() == "" {
		err = fmt.Errorf("%s failed, and the dynamic loader gave no reason", what)
	}
	return h, err
}

package devicecheck

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devicehost"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/devkernels/fill"
	"github.com/attnplug/attnplug/launch/cudaexec"
)

// Env is a devicehost.Host with what checks its kernels: the fills of
// package devkernels/fill (built ahead of time; NVRTC only where no image
// serves the device), which generate a batch's tensors on the device from
// a hash of their index, and a stream of its own. Its plans come from the
// Host's Source, checked there once, as every host's do. An Env is used
// by one goroutine at a time.
type Env struct {
	// Host is the device's host object.
	Host   *devicehost.Host
	stream cuda.Stream
	mods   []cuda.Module
	// The fills; fillE4M3 and fillDSA are 0 on a device without the FP8
	// fills (below compute capability 9.0).
	fillBF16, advance, fillE4M3, fillDSA cuda.Function
}

// Open opens CUDA device 0 as an Env whose device code and plans come from
// src (a *registry.Registry, a client of attnplug serve, or conform's
// plugin under test). The error wraps cuda.ErrUnavailable on a machine
// without a GPU, and core.ErrNoPlan when the fills cannot be had (no image
// for the device and no NVRTC). The caller closes the Env.
func Open(src devicehost.Source) (*Env, error) {
	h, err := devicehost.OpenHost(src)
	if err != nil {
		return nil, err
	}
	e := &Env{Host: h}
	if err := e.loadFills(); err != nil {
		h.Close()
		return nil, err
	}
	return e, nil
}

// loadFills loads the fills of devkernels/fill for the device and makes
// the Env's stream.
func (e *Env) loadFills() error {
	b := devkernels.Builder{Set: fill.Set}
	mods, err := b.Modules(e.Host.Device())
	if err != nil { // wraps core.ErrNoPlan: no image for the device, no NVRTC
		return fmt.Errorf("the fills of the checks: %w", err)
	}
	return e.Do(func(x *cuda.Ctx) error {
		for _, m := range mods {
			h, err := x.LoadModule(m.Image)
			if err != nil {
				return fmt.Errorf("loading the fills' module %s: %w", m.Name, err)
			}
			e.mods = append(e.mods, h)
			entries := map[string]*cuda.Function{fill.EntryBF16: &e.fillBF16, fill.EntryAdvance: &e.advance, fill.EntryE4M3: &e.fillE4M3, fill.EntryDSA: &e.fillDSA}
			for _, en := range m.Entries {
				if *entries[en.Name], err = x.Function(h, en.Name); err != nil {
					return err
				}
			}
		}
		var err error
		e.stream, err = x.NewStream()
		return err
	})
}

// Close releases the fills, the stream and the Host.
func (e *Env) Close() error {
	e.Do(func(x *cuda.Ctx) error {
		if e.stream != 0 {
			x.DestroyStream(e.stream)
		}
		for _, m := range e.mods {
			x.UnloadModule(m)
		}
		return nil
	})
	return e.Host.Close()
}

// Do runs f on the device's thread (cuda.Device.Do).
func (e *Env) Do(f func(x *cuda.Ctx) error) error { return e.Host.CUDA().Do(f) }

// Stream is the Env's stream, on which every launch of a check runs.
func (e *Env) Stream() cuda.Stream { return e.stream }

// Device is the device as plan requests name it.
func (e *Env) Device() core.DeviceInfo { return e.Host.Device() }

// Fill writes n hashed bf16 values of seed at p (hashValue recomputes
// them), on the Env's stream.
func (e *Env) Fill(x *cuda.Ctx, p uint64, n int64, seed uint64) error {
	return e.launchArgs(x, e.fillBF16, uint32(min((n+255)/256, 4096)), p, uint64(n), seed)
}

// fillE4M3Cache writes n e4m3 values of seed at p, each the hashed bf16
// value over scale (a dense FP8 cache, dequantised with scale).
func (e *Env) fillE4M3Cache(x *cuda.Ctx, p uint64, n int64, seed uint64, scale float32) error {
	if e.fillE4M3 == 0 {
		return errNoFP8Fills(e.Device())
	}
	return e.launchArgs(x, e.fillE4M3, uint32(min((n+255)/256, 8192)), p, uint64(n), seed, uint64(math.Float32bits(1/scale)))
}

// fillDSACache writes tokens of DeepSeek-V3.2's 656-byte FP8 rows of seed
// at p.
func (e *Env) fillDSACache(x *cuda.Ctx, p uint64, tokens int64, seed uint64) error {
	if e.fillDSA == 0 {
		return errNoFP8Fills(e.Device())
	}
	return e.launchArgs(x, e.fillDSA, uint32(min((tokens+255)/256, 8192)), p, uint64(tokens), seed)
}

func errNoFP8Fills(dev core.DeviceInfo) error {
	return fmt.Errorf("%w: the FP8 caches are filled on compute capability 9.0 and newer; %s has %d.%d",
		core.ErrNoPlan, dev.Name, dev.ComputeCapability/10, dev.ComputeCapability%10)
}

// advanceLens queues, on the Env's stream, the kernel that adds one to
// each of the n int32 at p (a decode step's new token, on the device).
func (e *Env) advanceLens(x *cuda.Ctx, p uint64, n int) error {
	return e.launchArgs(x, e.advance, uint32((n+255)/256), p, uint64(n))
}

// launchArgs launches f over blocks blocks of 256 threads on the Env's
// stream, each argument in an 8-byte slot (an f32 in its low bytes).
func (e *Env) launchArgs(x *cuda.Ctx, f cuda.Function, blocks uint32, args ...uint64) error {
	ptrs := make([]unsafe.Pointer, len(args))
	for i := range args {
		ptrs[i] = unsafe.Pointer(&args[i])
	}
	var pin runtime.Pinner
	pin.Pin(&args[0])
	pin.Pin(&ptrs[0])
	defer pin.Unpin()
	return x.Launch(f, [3]uint32{blocks, 1, 1}, [3]uint32{256, 1, 1}, 0, e.stream, &ptrs[0])
}

// alloc allocates n bytes (at least 16) on the device as a Buffer of n
// bytes; inside Do.
func alloc(x *cuda.Ctx, n int64) (cudaexec.Buffer, error) {
	p, err := x.Alloc(max(n, 16))
	return cudaexec.Buffer{Ptr: p, Bytes: n}, err
}

// free releases bufs, skipping those never allocated.
func (e *Env) free(bufs ...cudaexec.Buffer) {
	e.Do(func(x *cuda.Ctx) error {
		for _, b := range bufs {
			if b.Ptr != 0 {
				x.Free(b.Ptr)
			}
		}
		return nil
	})
}

// poison fills a bf16 output and an f32 LSE with NaN and waits for the
// fill, which runs on the legacy stream (unordered with the Env's
// non-blocking one).
func poison(x *cuda.Ctx, out, lse cudaexec.Buffer) error {
	if err := x.Fill16(out.Ptr, 0x7fc0, out.Bytes/2); err != nil {
		return err
	}
	if err := x.Fill32(lse.Ptr, 0x7fc00000, lse.Bytes/4); err != nil {
		return err
	}
	return x.Synchronize()
}

// Outputs downloads b's output (bf16 bits) and LSE once the Env's stream
// is done.
func (e *Env) Outputs(b Batch) ([]uint16, []float32, error) { return e.download(b.Outputs()) }

// download copies out and lse (bf16 bits and float32) to the host after
// the Env's stream is done.
func (e *Env) download(out, lse cudaexec.Buffer) ([]uint16, []float32, error) {
	o := make([]uint16, out.Bytes/2)
	l := make([]float32, lse.Bytes/4)
	err := e.Do(func(x *cuda.Ctx) error {
		if err := x.SyncStream(e.stream); err != nil {
			return err
		}
		if err := x.CopyOut(bytesOf(o), out.Ptr); err != nil {
			return err
		}
		return x.CopyOut(bytesOf(l), lse.Ptr)
	})
	return o, l, err
}

// bytesOf is the memory of s as bytes.
func bytesOf[T uint16 | int32 | float32](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// i32bytes is v as bytes, four zero bytes for an empty v (a buffer is
// never empty).
func i32bytes(v []int32) []byte {
	if len(v) == 0 {
		return []byte{0, 0, 0, 0}
	}
	return bytesOf(v)
}

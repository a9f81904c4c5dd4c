package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// ErrNoLaunchEx marks a driver without cuLaunchKernelEx or
// cuTensorMapEncodeTiled (older than CUDA 12): clusters, programmatic
// launches and TMA descriptors need them.
var ErrNoLaunchEx = errors.New("the CUDA driver lacks CUDA 12's launch entry points")

// LaunchConfig is a launch with the attributes of Hopper's kernels.
type LaunchConfig struct {
	Grid, Block [3]uint32
	Shared      uint32
	Stream      Stream
	// Cluster is the thread-block cluster's dimensions; zero for none.
	Cluster [3]uint32
	// Programmatic lets the launch begin before the previous kernel on the
	// stream ends (programmatic stream serialization).
	Programmatic bool
}

// launchAttr is CUlaunchAttribute: an id, padding to 8 bytes, a 64-byte
// value union.
type launchAttr struct {
	id    uint32
	_     uint32
	value [64]byte
}

// launchConfig is CUlaunchConfig.
type launchConfig struct {
	grid     [3]uint32
	block    [3]uint32
	shared   uint32
	_        uint32
	stream   uintptr
	attrs    *launchAttr
	numAttrs uint32
	_        uint32
}

// The launch attribute ids (CUlaunchAttributeID).
const (
	attrClusterDimension                = 4
	attrProgrammaticStreamSerialization = 6
)

// LaunchEx launches f as cfg says (cuLaunchKernelEx), params as for
// Launch.
func (c *Ctx) LaunchEx(f Function, cfg LaunchConfig, params *unsafe.Pointer) error {
	drv := c.drv()
	if drv.launchExAddr == 0 {
		return fmt.Errorf("cuLaunchKernelEx: %w", ErrNoLaunchEx)
	}
	lc := &launchConfig{grid: cfg.Grid, block: cfg.Block, shared: cfg.Shared, stream: uintptr(cfg.Stream)}
	attrs := new([2]launchAttr)
	n := 0
	if cfg.Cluster != ([3]uint32{}) {
		attrs[n].id = attrClusterDimension
		*(*[3]uint32)(unsafe.Pointer(&attrs[n].value[0])) = cfg.Cluster
		n++
	}
	if cfg.Programmatic {
		attrs[n].id = attrProgrammaticStreamSerialization
		*(*int32)(unsafe.Pointer(&attrs[n].value[0])) = 1
		n++
	}
	if n > 0 {
		lc.attrs, lc.numAttrs = &attrs[0], uint32(n)
	}
	var pin runtime.Pinner
	pin.Pin(lc)
	pin.Pin(attrs)
	defer pin.Unpin()
	rc := drv.call(drv.launchExAddr, uintptr(unsafe.Pointer(lc)), uintptr(f), uintptr(unsafe.Pointer(params)), 0)
	return drv.check("cuLaunchKernelEx", rc)
}

// TensorMap is what cuTensorMapEncodeTiled encodes: a tiled view of Addr.
// Dims, Box and ElementStrides run innermost first; Strides are the byte
// strides of dimensions 1 and up (rank-1 of them).
type TensorMap struct {
	DType       int // CUtensorMapDataType
	Addr        uint64
	Dims        []uint64
	Strides     []uint64
	Box         []uint32
	Swizzle     int // CUtensorMapSwizzle: 0 none, 1 32B, 2 64B, 3 128B
	L2Promotion int // CUtensorMapL2promotion: 0 none, 1 64B, 2 128B, 3 256B
	OOBNaN      bool
}

// EncodeTensorMap encodes m into dst, a 64-byte aligned CUtensorMap the
// caller keeps pinned.
func (c *Ctx) EncodeTensorMap(dst unsafe.Pointer, m TensorMap) error {
	drv := c.drv()
	if drv.encodeTiledAddr == 0 {
		return fmt.Errorf("cuTensorMapEncodeTiled: %w", ErrNoLaunchEx)
	}
	rank := len(m.Dims)
	if rank < 1 || rank > 5 || len(m.Box) != rank || len(m.Strides) != rank-1 {
		return fmt.Errorf("cuTensorMapEncodeTiled: rank %d with %d box extents and %d strides", rank, len(m.Box), len(m.Strides))
	}
	if uintptr(dst)%64 != 0 {
		return fmt.Errorf("cuTensorMapEncodeTiled: the descriptor at %p is not 64-byte aligned", dst)
	}
	buf := new(struct {
		dims, strides [5]uint64
		box, es       [5]uint32
	})
	copy(buf.dims[:], m.Dims)
	copy(buf.strides[:], m.Strides)
	copy(buf.box[:], m.Box)
	for i := range buf.es {
		buf.es[i] = 1
	}
	oob := 0
	if m.OOBNaN {
		oob = 1
	}
	var pin runtime.Pinner
	pin.Pin(buf)
	defer pin.Unpin()
	rc := drv.call(drv.encodeTiledAddr, uintptr(dst), uintptr(m.DType), uintptr(rank), uintptr(m.Addr),
		uintptr(unsafe.Pointer(&buf.dims[0])), uintptr(unsafe.Pointer(&buf.strides[0])),
		uintptr(unsafe.Pointer(&buf.box[0])), uintptr(unsafe.Pointer(&buf.es[0])),
		0, uintptr(m.Swizzle), uintptr(m.L2Promotion), uintptr(oob))
	return drv.check("cuTensorMapEncodeTiled", rc)
}

package cuda

import (
	"errors"
	"fmt"
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

// ExConfig is a LaunchConfig in the driver's form (CUlaunchConfig and its
// attributes), built once (NewExConfig) and launched many times: the
// caller keeps it pinned (runtime.Pinner) while it launches with it.
type ExConfig struct {
	lc    launchConfig
	attrs [2]launchAttr
}

// NewExConfig returns cfg in the driver's form; its stream is set at each
// launch.
func NewExConfig(cfg LaunchConfig) *ExConfig {
	ex := &ExConfig{lc: launchConfig{grid: cfg.Grid, block: cfg.Block, shared: cfg.Shared}}
	n := 0
	if cfg.Cluster != ([3]uint32{}) {
		ex.attrs[n].id = attrClusterDimension
		*(*[3]uint32)(unsafe.Pointer(&ex.attrs[n].value[0])) = cfg.Cluster
		n++
	}
	if cfg.Programmatic {
		ex.attrs[n].id = attrProgrammaticStreamSerialization
		*(*int32)(unsafe.Pointer(&ex.attrs[n].value[0])) = 1
		n++
	}
	ex.lc.numAttrs = uint32(n)
	return ex
}

// LaunchEx launches f as ex says on stream s (cuLaunchKernelEx), params as
// for Launch. ex must be pinned; nothing is allocated.
func (c *Ctx) LaunchEx(f Function, ex *ExConfig, s Stream, params *unsafe.Pointer) error {
	drv := c.drv()
	if drv.launchExAddr == 0 {
		return fmt.Errorf("cuLaunchKernelEx: %w", ErrNoLaunchEx)
	}
	ex.lc.stream = uintptr(s)
	ex.lc.attrs = nil
	if ex.lc.numAttrs > 0 {
		ex.lc.attrs = &ex.attrs[0]
	}
	rc := drv.call(drv.launchExAddr, uintptr(unsafe.Pointer(&ex.lc)), uintptr(f), uintptr(unsafe.Pointer(params)), 0)
	return drv.check("cuLaunchKernelEx", rc)
}

// TensorMap is what cuTensorMapEncodeTiled encodes: a tiled view of Addr
// of Rank dimensions. Dims and Box run innermost first; Strides are the
// byte strides of dimensions 1 and up (Rank-1 of them).
type TensorMap struct {
	DType       int // CUtensorMapDataType
	Addr        uint64
	Rank        int
	Dims        [5]uint64
	Strides     [5]uint64
	Box         [5]uint32
	Swizzle     int // CUtensorMapSwizzle: 0 none, 1 32B, 2 64B, 3 128B
	L2Promotion int // CUtensorMapL2promotion: 0 none, 1 64B, 2 128B, 3 256B
	OOBNaN      bool
}

// unitStrides are the element strides of every dimension: 1.
var unitStrides = [5]uint32{1, 1, 1, 1, 1}

// EncodeTensorMap encodes m into dst, a 64-byte aligned CUtensorMap; the
// caller keeps dst and m pinned. Nothing is allocated.
func (c *Ctx) EncodeTensorMap(dst unsafe.Pointer, m *TensorMap) error {
	drv := c.drv()
	if drv.encodeTiledAddr == 0 {
		return fmt.Errorf("cuTensorMapEncodeTiled: %w", ErrNoLaunchEx)
	}
	if m.Rank < 1 || m.Rank > 5 {
		return fmt.Errorf("cuTensorMapEncodeTiled: rank %d (1 to 5)", m.Rank)
	}
	if uintptr(dst)%64 != 0 {
		return fmt.Errorf("cuTensorMapEncodeTiled: the descriptor at %p is not 64-byte aligned", dst)
	}
	oob := 0
	if m.OOBNaN {
		oob = 1
	}
	rc := drv.call(drv.encodeTiledAddr, uintptr(dst), uintptr(m.DType), uintptr(m.Rank), uintptr(m.Addr),
		uintptr(unsafe.Pointer(&m.Dims[0])), uintptr(unsafe.Pointer(&m.Strides[0])),
		uintptr(unsafe.Pointer(&m.Box[0])), uintptr(unsafe.Pointer(&unitStrides[0])),
		0, uintptr(m.Swizzle), uintptr(m.L2Promotion), uintptr(oob))
	return drv.check("cuTensorMapEncodeTiled", rc)
}

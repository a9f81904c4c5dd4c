package cuda

import (
	"fmt"
	"sync"
	"unsafe"
)

// cublas holds the cuBLAS entry points used to measure the matrix peak.
type cublas struct {
	path      string
	create    func(h *uintptr) int32
	destroy   func(h uintptr) int32
	setStream func(h uintptr, s uintptr) int32
	gemmEx    func(h uintptr, ta, tb int32, m, n, k int32, alpha unsafe.Pointer, a uint64, at int32, lda int32, b uint64, bt int32, ldb int32, beta unsafe.Pointer, c uint64, ct int32, ldc int32, compute int32, algo int32) int32
}

var (
	cublasOnce sync.Once
	cublasLib  *cublas
	cublasErr  error
)

// BLAS is a cuBLAS handle bound to the Device's context, for measuring
// the bf16 matrix peak in the same run as the kernels it is compared with.
type BLAS struct {
	lib *cublas
	h   uintptr
}

// NewBLAS loads cuBLAS (once per process; the libraries NVRTC's search
// covers, libcublas.so*) and creates a handle on stream s.
func (c *Ctx) NewBLAS(s Stream) (*BLAS, error) {
	cublasOnce.Do(func() { cublasLib, cublasErr = loadCUBLAS() })
	if cublasErr != nil {
		return nil, cublasErr
	}
	b := &BLAS{lib: cublasLib}
	if rc := b.lib.create(&b.h); rc != 0 {
		return nil, fmt.Errorf("cuda: cublasCreate_v2: status %d", rc)
	}
	if rc := b.lib.setStream(b.h, uintptr(s)); rc != 0 {
		b.lib.destroy(b.h)
		return nil, fmt.Errorf("cuda: cublasSetStream_v2: status %d", rc)
	}
	return b, nil
}

// Library returns the path of the cuBLAS library loaded.
func (b *BLAS) Library() string { return b.lib.path }

// GemmBF16 computes C = A·B for column-major bf16 matrices (A m×k, B k×n,
// C m×n) with fp32 accumulation.
func (b *BLAS) GemmBF16(m, n, k int, a, bm, c uint64) error {
	const bf16, compute32F, defaultAlgo = 14, 68, -1
	alpha, beta := float32(1), float32(0)
	rc := b.lib.gemmEx(b.h, 0, 0, int32(m), int32(n), int32(k), unsafe.Pointer(&alpha), a, bf16, int32(m),
		bm, bf16, int32(k), unsafe.Pointer(&beta), c, bf16, int32(m), compute32F, defaultAlgo)
	if rc != 0 {
		return fmt.Errorf("cuda: cublasGemmEx: status %d", rc)
	}
	return nil
}

// Close destroys the handle.
func (b *BLAS) Close() { b.lib.destroy(b.h) }

package hostbench

import (
	"math"
	"runtime"
)

// allocsPerRun returns the heap allocations of one run of f, counted over
// several runs and rounded down, as testing.AllocsPerRun does: the
// process's other goroutines (gRPC, logging) allocate now and then, and a
// stray allocation must not read as one of f's.
func allocsPerRun(runs int, f func()) float64 {
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < runs; i++ {
		f()
	}
	runtime.ReadMemStats(&after)
	return math.Floor(float64(after.Mallocs-before.Mallocs) / float64(runs))
}

package main

import "runtime"

// allocsPerRun returns the heap allocations of one run of f.
func allocsPerRun(f func()) float64 {
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs - before.Mallocs)
}

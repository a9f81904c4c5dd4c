//go:build !linux

package pluginproc

// limitMemory does nothing here: only Go plugins are bounded, by the
// GOMEMLIMIT of their environment, which their collector works to keep.
func limitMemory(int, int64) error { return nil }

//go:build !linux

package main

// physicalMemory returns 0: the memory of the machine is read on Linux
// only.
func physicalMemory() int64 { return 0 }

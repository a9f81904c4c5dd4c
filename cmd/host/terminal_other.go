//go:build !linux

package main

import "io"

// isTerminal reports false: progress lines are drawn on Linux terminals
// only.
func isTerminal(io.Writer) bool { return false }

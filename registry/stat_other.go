//go:build !linux

package registry

import "os"

// fileIdentity gives no identity here: every start hashes the binary.
func fileIdentity(os.FileInfo) string { return "" }

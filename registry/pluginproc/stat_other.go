//go:build !linux

package pluginproc

import "os"

// fileIdentity gives no identity here: every start hashes the binary.
func fileIdentity(os.FileInfo) string { return "" }

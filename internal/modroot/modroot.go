// Package modroot finds the root of attnplug's source tree, the directory
// of its go.mod: where the test binaries are built from (internal/testbin)
// and beside which sglang's reference code is looked for
// (internal/reference, which attnplug bench also runs). It imports the
// standard library only.
package modroot

import (
	"fmt"
	"os"
	"path/filepath"
)

// Find returns the nearest directory at or above dir that holds a go.mod.
func Find(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
	}
}

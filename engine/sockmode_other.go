//go:build !linux

package engine

import (
	"fmt"
	"os"
)

// setSocketMode gives the socket file made at path mode, and group gid
// when gid >= 0, after checking that path is still that file and no link
// (without Linux's O_PATH the check and the change are two steps).
func setSocketMode(path string, made os.FileInfo, mode os.FileMode, gid int) error {
	now, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !os.SameFile(now, made) || now.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s is no longer the socket this server bound (replaced after the bind)", path)
	}
	if gid >= 0 {
		if err := os.Lchown(path, -1, gid); err != nil {
			return err
		}
	}
	return os.Chmod(path, mode)
}

package core

import (
	"fmt"
	"strings"
)

// Platform is the accelerator platform a request runs on. The zero value,
// PlatformUnset, means the request did not say; hosts replace it with the
// platform they detected.
type Platform uint8

// The platforms, with the names of the dispatch format.
const (
	PlatformUnset Platform = iota
	PlatformCUDA
	PlatformHIP
	PlatformNPU
	PlatformXPU
	PlatformCPU
)

var platformNames = [...]string{
	PlatformUnset: "",
	PlatformCUDA:  "cuda",
	PlatformHIP:   "hip",
	PlatformNPU:   "npu",
	PlatformXPU:   "xpu",
	PlatformCPU:   "cpu",
}

// String returns the platform's name, such as "hip", or "" when unset.
func (p Platform) String() string {
	if int(p) < len(platformNames) {
		return platformNames[p]
	}
	return fmt.Sprintf("Platform(%d)", uint8(p))
}

// Valid reports whether p is a known platform or PlatformUnset.
func (p Platform) Valid() bool { return int(p) < len(platformNames) }

// ParsePlatform returns the platform named s; the empty string is
// PlatformUnset.
func ParsePlatform(s string) (Platform, error) {
	for p, name := range platformNames {
		if name == s {
			return Platform(p), nil
		}
	}
	return 0, invalidValue(fmt.Sprintf("unknown platform %q (want one of %s)", s, strings.Join(platformNames[1:], ", ")))
}

package devkernels

import (
	"fmt"
	"maps"
	"regexp"
	"strconv"

	"github.com/attnplug/attnplug/core"
)

// Each entry's dynamic shared memory is written once, in its CUDA C
// source: every body's layout (NarrowLayout and WideLayout in
// mla_decode.cu, WgLayout and WgnLayout in mla_decode_sm90.cu, PF_SHARED and
// PW_SHARED in the prefills) is the carve-up the body itself uses, and the
// entry exports its size beside it as the constant <entry>_shared
// (mla_common.cuh's MLA_SHARED). gen reads the constants from the PTX it
// builds into the images' manifest (Manifest.Shared), the planner reads them
// from there (or, where the images are stale, from NVRTC's PTX of the
// current sources), and the GPU tests read them from the loaded modules.

// sharedConst matches one exported <entry>_shared constant of a PTX module.
var sharedConst = regexp.MustCompile(`(?m)^\s*\.const\s+\.align\s+\d+\s+\.[bsu]32\s+(\w+)_shared\s*=\s*(\d+);`)

// SharedConstants returns the <entry>_shared constants of a PTX module:
// each entry's dynamic shared memory in bytes.
func SharedConstants(ptx string) map[string]int {
	out := map[string]int{}
	for _, m := range sharedConst.FindAllStringSubmatch(ptx, -1) {
		if n, err := strconv.Atoi(m[2]); err == nil {
			out[m[1]] = n
		}
	}
	return out
}

// layouts is the dynamic shared memory of each entry, in bytes.
type layouts map[string]int

// Shared returns the dynamic shared memory of every entry of the set's
// modules on a device of compute capability cc: the manifest's, when the
// images are current; else from the PTX NVRTC builds of the current
// sources for cc (compiled once, as Builder compiles them). It is read
// once for each cc; the caller does not change the map. The error wraps
// core.ErrNoPlan and says why neither serves.
func (s *Set) Shared(cc int) (map[string]int, error) {
	s.mu.Lock()
	r, ok := s.sharedBy[cc]
	s.mu.Unlock()
	if ok {
		return r.shared, r.err
	}
	shared, err := s.readShared(cc)
	s.mu.Lock()
	if s.sharedBy == nil {
		s.sharedBy = map[int]sharedResult{}
	}
	s.sharedBy[cc] = sharedResult{shared, err}
	s.mu.Unlock()
	return shared, err
}

// sharedResult is what Shared read for a compute capability.
type sharedResult struct {
	shared map[string]int
	err    error
}

// readShared is Shared's work, uncached.
func (s *Set) readShared(cc int) (map[string]int, error) {
	m, why := s.embedded()
	if why == "" && len(m.Shared) > 0 {
		return m.Shared, nil
	}
	if why == "" {
		why = fmt.Sprintf("the %s set's manifest gives no entry's shared memory (make device-code)", s.Name)
	}
	mods, err := s.build(cc)
	if err != nil {
		return nil, fmt.Errorf("%w: the entries' shared memory: %s, and %w", core.ErrNoPlan, why, err)
	}
	out := map[string]int{}
	for _, mod := range mods {
		maps.Copy(out, SharedConstants(string(mod.Image)))
	}
	return out, nil
}

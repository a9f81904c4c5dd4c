package registry

import (
	"sync/atomic"

	"github.com/attnplug/attnplug/core"
)

// answerCache maps a request's Key under a handler's declared Reads to the
// plugin's answer. Because the handler declared that its rules read nothing
// else, every request with the same Key has the same answer: a hit is
// exactly what the plugin would say. It is a fixed-size open-addressing
// table of atomic words, so lookups take no lock and never allocate; once
// three quarters full it stops taking new entries, and the rest go to the
// plugin.
type answerCache struct {
	slots [cacheSlots]atomic.Uint64
	used  atomic.Int32
}

const (
	cacheBits  = 12
	cacheSlots = 1 << cacheBits
	cacheLimit = cacheSlots * 3 / 4
	maxProbe   = 16
)

// An entry is key<<8 | method; method 0 marks an empty slot. Keys use at
// most 56 bits (see core.Key).
func (c *answerCache) get(k core.Key) (core.Method, bool) {
	i := hashKey(k)
	for p := 0; p < maxProbe; p++ {
		e := c.slots[(i+uint64(p))&(cacheSlots-1)].Load()
		if e == 0 {
			return 0, false
		}
		if e>>8 == uint64(k) {
			return core.Method(e & 0xff), true
		}
	}
	return 0, false
}

func (c *answerCache) put(k core.Key, m core.Method) {
	if c.used.Load() >= cacheLimit || uint64(k)>>56 != 0 {
		return
	}
	e := uint64(k)<<8 | uint64(m)
	i := hashKey(k)
	for p := 0; p < maxProbe; p++ {
		s := &c.slots[(i+uint64(p))&(cacheSlots-1)]
		old := s.Load()
		if old>>8 == uint64(k) && old != 0 {
			return
		}
		if old == 0 && s.CompareAndSwap(0, e) {
			c.used.Add(1)
			return
		}
	}
}

func hashKey(k core.Key) uint64 {
	return (uint64(k) * 0x9E3779B97F4A7C15) >> (64 - cacheBits)
}

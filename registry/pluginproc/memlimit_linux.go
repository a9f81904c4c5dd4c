package pluginproc

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// limitMemory limits the data segment of process pid (RLIMIT_DATA: its
// private writable memory, Go's heap and every malloc included) to bytes,
// soft and hard alike. Address space reserved but not written (Go's
// arenas, a CUDA context's) is not counted, as RLIMIT_AS would count it.
func limitMemory(pid int, bytes int64) error {
	lim := unix.Rlimit{Cur: uint64(bytes), Max: uint64(bytes)}
	if err := unix.Prlimit(pid, unix.RLIMIT_DATA, &lim, nil); err != nil {
		return fmt.Errorf("limit the memory of process %d to %d bytes (RLIMIT_DATA): %w", pid, bytes, err)
	}
	return nil
}

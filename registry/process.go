package registry

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/wire"
)

// instance is one running plugin process.
type instance struct {
	proc    *wire.Process
	backend conn
	pid     int

	// calls are held shared by every call in flight; retire takes it
	// exclusively, so that the process ends only after they finish.
	calls   sync.RWMutex
	retired bool // guarded by calls
}

// enter admits a call; false means the instance was retired.
func (i *instance) enter() bool {
	i.calls.RLock()
	if i.retired {
		i.calls.RUnlock()
		return false
	}
	return true
}

func (i *instance) leave() { i.calls.RUnlock() }

// retire waits for the calls in flight, then ends the process.
func (i *instance) retire() {
	i.calls.Lock()
	i.retired = true
	i.calls.Unlock()
	i.kill()
}

// kill ends the process at once.
func (i *instance) kill() {
	i.proc.Kill()
}

// process is the lifecycle of the process that runs one plugin binary: at
// most one instance runs at a time; a start in progress is shared by its
// callers; a failed instance is retired (it ends once its calls in flight
// finish) and the next start waits for a backoff that doubles with every
// failure in a row, until Config.QuarantineAfter failures quarantine the
// plugin; once closed, nothing starts again. running is read without the
// lock on every call; everything else is guarded by mu.
type process struct {
	running atomic.Pointer[instance]
	// retiring counts the instances retired after a failure whose process
	// has not ended yet; end waits for them.
	retiring sync.WaitGroup

	mu          sync.Mutex
	starting    chan struct{} // closed when the start in progress ends
	closed      bool
	failures    int // consecutive failures
	starts      int
	retryAt     time.Time
	lastErr     error
	lastReason  Reason
	quarantined bool
}

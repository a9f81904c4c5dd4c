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
	// stopping is set when the registry ends the process on purpose: its
	// end is then no news for the log (pluginLogger).
	stopping *atomic.Bool

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

// retire waits for the calls in flight, then ends the process: within
// grace in good order, else by SIGKILL (stop). A call in flight ends at
// its deadline at the latest.
func (i *instance) retire(grace time.Duration) {
	i.calls.Lock()
	i.retired = true
	i.calls.Unlock()
	i.stop(grace)
}

// stop ends the process: in good order within grace, else by SIGKILL of
// its process group (wire.Process.Stop).
func (i *instance) stop(grace time.Duration) {
	if i.stopping != nil {
		i.stopping.Store(true)
	}
	i.proc.Stop(grace)
}

// kill ends the process at once, by SIGKILL of its process group, whatever
// its calls in flight (they fail): for a process known to be bad.
func (i *instance) kill() { i.stop(0) }

// process is the lifecycle of the process that runs one plugin binary: at
// most one instance runs at a time; a start in progress is shared by its
// callers; a failed instance is retired (it ends once its calls in flight
// finish) and the next start waits for a backoff that doubles with every
// failure in a row, until Config.QuarantineAfter failures quarantine the
// plugin; once closed, nothing starts again. running is read without the
// lock on every call; everything else is guarded by mu.
type process struct {
	running atomic.Pointer[instance]
	// failing is set from a failure until the next good answer: a good
	// answer then resets the failure count.
	failing atomic.Bool
	// retiring counts the instances retired after a failure whose process
	// has not ended yet; end waits for them.
	retiring sync.WaitGroup
	// dying are those instances, guarded by mu: end kills them at once
	// rather than wait for their calls in flight.
	dying map[*instance]struct{}

	mu          sync.Mutex
	starting    *startAttempt // the start in progress, if any
	closed      bool
	failures    int // consecutive failures
	starts      int
	retryAt     time.Time
	lastErr     error
	quarantined bool
	// broken is set when the binary's accepted bytes are gone
	// (ErrBinaryChanged): the plugin does not start again.
	broken error
}

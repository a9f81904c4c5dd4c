package pluginproc

import (
	"testing"
	"time"
)

// TestDrainIsBounded: a retired instance admits no call; it waits for the
// calls in flight, but no longer than it is given (a call under a
// caller's long deadline cannot hold a reload), and sees them end.
func TestDrainIsBounded(t *testing.T) {
	var i instance
	if !i.enter() {
		t.Fatal("a live instance refused a call")
	}
	start := time.Now()
	if i.drain(50 * time.Millisecond) {
		t.Fatal("drained with a call in flight")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("drain waited %s past its bound", d)
	}
	if i.enter() {
		t.Fatal("a retired instance admitted a call")
	}
	i.leave()
	if !i.drain(5 * time.Second) {
		t.Error("the call in flight ended, and drain did not see it")
	}
}

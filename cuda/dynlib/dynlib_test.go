//go:build linux && (amd64 || arm64)

package dynlib

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestConcurrentErrorsAreKept: goroutines that open missing libraries and
// look up missing symbols at once each get the loader's message about
// their own call: never an empty one, never another call's.
func TestConcurrentErrorsAreKept(t *testing.T) {
	libc, err := Open("libc.so.6", 2) // RTLD_NOW
	if err != nil {
		t.Skipf("no libc.so.6 to look symbols up in: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var wrong []string
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				name := fmt.Sprintf("attnplug_no_such_%d_%d", g, i)
				var err error
				if i%2 == 0 {
					_, err = Open("lib"+name+".so", 2)
				} else {
					_, err = Symbol(libc, name)
				}
				if err == nil || !strings.Contains(err.Error(), name) {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("%s: %v", name, err))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(wrong) > 0 {
		t.Errorf("%d of 8000 errors lost or another call's, such as:\n%s", len(wrong), strings.Join(wrong[:min(5, len(wrong))], "\n"))
	}
}

// TestEmptyMessageSaysWhatFailed: a failure the loader gives no message
// for is named by the call.
func TestEmptyMessageSaysWhatFailed(t *testing.T) {
	_, err := locked("dlopen libcuda.so.1", func() (uintptr, error) { return 0, errors.New("") })
	if err == nil || err.Error() != "dlopen libcuda.so.1 failed, and the dynamic loader gave no reason" {
		t.Errorf("got %v", err)
	}
	if _, err := locked("dlsym cuInit", func() (uintptr, error) { return 1, nil }); err != nil {
		t.Errorf("a call that worked: %v", err)
	}
}

package engine

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestBudgetAdmitsWhatFitsAndRefusesWhatWaitsTooLong(t *testing.T) {
	b := newBudget(1600, 100*time.Millisecond) // 100 wire bytes
	a, c := new(int), new(int)
	if err := b.admit(a, 60); err != nil { // weight 960
		t.Fatal(err)
	}
	// 60 more do not fit: it waits, and is refused after the wait.
	err := b.admit(c, 60)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("over the budget: %v, want RESOURCE_EXHAUSTED", err)
	}
	// Released while it waits: admitted.
	done := make(chan error, 1)
	b.wait = 10 * time.Second
	go func() { done <- b.admit(c, 60) }()
	time.Sleep(20 * time.Millisecond)
	b.release(a)
	if err := <-done; err != nil {
		t.Fatalf("after the release: %v", err)
	}
	// A request heavier than the whole budget has it alone.
	b.release(c)
	if err := b.admit(a, 1000); err != nil {
		t.Fatalf("a request over the whole budget, alone: %v", err)
	}
	if b.used != b.limit {
		t.Errorf("used %d, want the whole %d", b.used, b.limit)
	}
	b.release(a)
	if b.used != 0 || len(b.held) != 0 {
		t.Errorf("after every release: used %d, held %v", b.used, b.held)
	}
}

func TestBudgetRefusesAtOnceWhenTooMuchWaits(t *testing.T) {
	b := newBudget(1600, 10*time.Second)
	held := new(int)
	if err := b.admit(held, 100); err != nil {
		t.Fatal(err)
	}
	// The waiting room holds 100 wire bytes: one waiter fills it.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); b.admit(new(int), 100) }()
	for {
		b.mu.Lock()
		w := b.waiting
		b.mu.Unlock()
		if w == 100 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if err := b.admit(new(int), 10); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("with the waiting room full: %v, want RESOURCE_EXHAUSTED at once", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Error("the refusal waited")
	}
	b.release(held)
	wg.Wait()
}

// TestServerBoundsTheRequestsItHolds sends large batches at once to a
// server whose budget holds one of them: each is answered or refused with
// RESOURCE_EXHAUSTED, never more are held than the budget, and the server
// answers afterwards.
func TestServerBoundsTheRequestsItHolds(t *testing.T) {
	c, _ := serve(t, false, Config{MaxInflightBytes: 64 << 20, MaxInflightWait: 200 * time.Millisecond})
	big := make([]core.Request, 40)
	for i := range big {
		big[i] = core.NewRequest("fa3", core.ModeExtend)
		big[i].Batch.ExtendPrefixLens = make([]int64, core.MaxBatchSize)
		big[i].Batch.SeqLens = make([]int64, core.MaxBatchSize)
		for j := range big[i].Batch.SeqLens {
			big[i].Batch.SeqLens[j] = 1 << 20 // 3 bytes on the wire
		}
		big[i].Batch.MaxChunkCapacity = 131072
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[codes.Code]int{}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.DispatchBatch(testContext(t), big, make([]core.BatchAnswer, len(big)))
			code := codes.OK
			switch {
			case errors.Is(err, core.ErrOverloaded):
				code = codes.ResourceExhausted
			case err != nil:
				code = codes.Unknown
				t.Errorf("a batch: %v", err)
			}
			mu.Lock()
			outcomes[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	for code := range outcomes {
		if code != codes.OK && code != codes.ResourceExhausted {
			t.Errorf("outcomes %v: want only answers and RESOURCE_EXHAUSTED", outcomes)
		}
	}
	if outcomes[codes.OK] == 0 {
		t.Errorf("outcomes %v: no batch was answered", outcomes)
	}
	if err := c.DispatchBatch(testContext(t), big[:1], make([]core.BatchAnswer, 1)); err != nil {
		t.Errorf("after the burst: %v", err)
	}
}

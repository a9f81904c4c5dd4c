package engine

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/stats"
)

// The memory of the requests a server holds at once is bounded: a
// Dispatch or DispatchBatch request is decoded only once its weight fits
// the server's budget (Config.MaxInflightBytes), and holds it until its
// answer is sent. A request's weight is expansion times its size on the
// wire: a length of one byte on the wire is an int64 of eight in the
// decoded message, and eight more in the request converted for the
// registry. A request that does not fit waits, holding only its wire
// bytes, for at most Config.MaxInflightWait; when that passes, or when the
// wire bytes of the requests already waiting exceed the budget's share of
// them, it is refused with RESOURCE_EXHAUSTED, which a client retries. A
// request heavier than the whole budget waits until it can have it alone.
const expansion = 16

// A request whose size on the wire no valid request of its kind reaches
// is refused (INVALID_ARGUMENT) before it is decoded or weighed: a
// Dispatch carries at most two length lists of core.MaxBatchSize entries
// of at most six bytes each (a length is at most core.MaxLength, 2^40), a
// plan request two of MaxPlanBatch entries, a modules request names only a
// backend and a device. A DispatchBatch may fill the message limit.
const (
	maxDispatchRequestBytes = 1 << 20
	maxPlanRequestBytes     = 2 << 20
	maxModulesRequestBytes  = 64 << 10
)

// maxRequestBytes is the size past which a request v cannot be valid, 0
// for none short of the message limit, and the request's name.
func maxRequestBytes(v any) (int, string) {
	switch v.(type) {
	case *dispatchv1.DispatchRequest:
		return maxDispatchRequestBytes, "Dispatch request"
	case *dispatchv1.PlanKernelRequest:
		return maxPlanRequestBytes, "PlanKernel request"
	case *dispatchv1.PlanStepRequest:
		return maxPlanRequestBytes, "PlanStep request"
	case *dispatchv1.KernelModulesRequest:
		return maxModulesRequestBytes, "KernelModules request"
	}
	return 0, ""
}

// A burst of large requests leaves the process's heap large when it ends,
// and the runtime gives the memory back to the system slowly, if at all,
// while the server is idle: once no request holds any of the budget after
// returnAfter bytes of messages came in since the last time, the free
// memory goes back at once (returnMemory), at most once every
// returnEvery.
const (
	returnAfter = 32 << 20
	returnEvery = 10 * time.Second
)

// DefaultMaxInflightBytes is Config.MaxInflightBytes's default: room for
// one request of the largest size the server accepts (wire.MaxMessageBytes)
// at a time, or many small ones.
const DefaultMaxInflightBytes = 1 << 30

// DefaultMaxInflightWait is Config.MaxInflightWait's default.
const DefaultMaxInflightWait = 5 * time.Second

// budget is the server's budget of request bytes, and what each admitted
// request holds of it.
type budget struct {
	limit int64
	wait  time.Duration

	mu      sync.Mutex
	cond    *sync.Cond
	used    int64
	waiting int64 // wire bytes of the requests waiting
	// held maps an admitted request message (an answerHold) to its weight; refused marks
	// a message that was not decoded, for the interceptor to refuse.
	held    map[any]int64
	refused map[any]error
	// since counts the bytes of the messages that came in since memory
	// was last returned, at returned.
	since    int64
	returned time.Time
	retry    *time.Timer // a settle to come, nil: none
}

func newBudget(limit int64, wait time.Duration) *budget {
	b := &budget{limit: limit, wait: wait, held: map[any]int64{}, refused: map[any]error{}}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// weighed reports whether messages of v's type are budgeted: the requests
// that carry batches.
func weighed(v any) bool {
	switch v.(type) {
	case *dispatchv1.DispatchRequest, *dispatchv1.DispatchBatchRequest:
		return true
	}
	return false
}

// admit waits until the weight of wire bytes n fits the budget, and
// records it for msg; an error says why it does not.
func (b *budget) admit(msg any, n int64) error {
	return b.acquire(context.Background(), msg, min(n*expansion, b.limit), n, "a request")
}

// acquire waits until w fits the budget, and records it for key; an
// error says why it does not. queued is what the caller holds while it
// waits (a request's wire bytes), counted against the share of the
// budget that waiting may hold; what names the caller in errors. The
// wait ends with ctx too (a call cancelled or past its deadline).
func (b *budget) acquire(ctx context.Context, key any, w, queued int64, what string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+w > b.limit {
		if b.waiting+queued > b.limit/expansion {
			return wire.ToStatus(fmt.Errorf("%w: the server holds %d of its %d request bytes and %d more wait: retry later", core.ErrOverloaded, b.used, b.limit, b.waiting))
		}
		b.waiting += queued
		deadline := time.Now().Add(b.wait)
		wake := func() {
			b.mu.Lock()
			b.cond.Broadcast()
			b.mu.Unlock()
		}
		timer := time.AfterFunc(b.wait, wake)
		stop := context.AfterFunc(ctx, wake)
		for b.used+w > b.limit && time.Now().Before(deadline) && ctx.Err() == nil {
			b.cond.Wait()
		}
		timer.Stop()
		stop()
		b.waiting -= queued
		if err := ctx.Err(); err != nil && b.used+w > b.limit {
			return wire.ToStatus(fmt.Errorf("%s of %d bytes waited for room in the server's %d request bytes: %w", what, w, b.limit, err))
		}
		if b.used+w > b.limit {
			return wire.ToStatus(fmt.Errorf("%w: %s of %d bytes waited %s for room in the server's %d request bytes: retry later", core.ErrOverloaded, what, w, b.wait, b.limit))
		}
	}
	b.used += w
	b.held[key] = w
	return nil
}

// An answer of KernelModules is as large as the device code it carries
// (tens of megabytes), and the server holds its encoding until the client
// has read it: each call holds the answer's size of the budget from the
// moment the answer is made until the call ends (answerHold).

// answerHold is what one KernelModules call holds of the budget, from the
// answer's making to the call's end.
type answerHold struct{}

type answerHoldKey struct{}

// holdAnswer waits until an answer of n bytes fits the budget, and holds
// it until the call of ctx ends; an error says why it does not fit. A
// call the budget's stats handler did not tag holds nothing.
func (b *budget) holdAnswer(ctx context.Context, n int64) error {
	h, ok := ctx.Value(answerHoldKey{}).(*answerHold)
	if !ok {
		return nil
	}
	return b.acquire(ctx, h, min(n, b.limit), 0, "an answer")
}

// budgetStats tags each KernelModules call with its answerHold, and
// releases it when the call ends: after its answer was sent, or it
// failed. It also keeps the requests each call decoded (rpcRequests) and
// releases them at its end, with the codec's refusal of them: the
// interceptor does so when it runs, but an interceptor a caller put ahead
// of the server's (ServerOptions) may answer without it.
type budgetStats struct{ b *budget }

// rpcRequests are the requests one call decoded.
type rpcRequests struct {
	mu   sync.Mutex
	msgs []any
}

type rpcRequestsKey struct{}

func (h budgetStats) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	ctx = context.WithValue(ctx, rpcRequestsKey{}, &rpcRequests{})
	if info.FullMethodName == dispatchv1.Kernels_KernelModules_FullMethodName {
		return context.WithValue(ctx, answerHoldKey{}, &answerHold{})
	}
	return ctx
}

func (h budgetStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	reqs, _ := ctx.Value(rpcRequestsKey{}).(*rpcRequests)
	switch s := s.(type) {
	case *stats.InPayload:
		if reqs != nil && s.Payload != nil {
			reqs.mu.Lock()
			reqs.msgs = append(reqs.msgs, s.Payload)
			reqs.mu.Unlock()
		}
	case *stats.End:
		if hold, ok := ctx.Value(answerHoldKey{}).(*answerHold); ok {
			h.b.release(hold)
		}
		if reqs != nil {
			reqs.mu.Lock()
			msgs := reqs.msgs
			reqs.msgs = nil
			reqs.mu.Unlock()
			for _, m := range msgs {
				h.b.release(m)
				h.b.takeRefusal(m)
			}
		}
	}
}

func (budgetStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (budgetStats) HandleConn(context.Context, stats.ConnStats)                       {}

// release returns what key (a request message, an answerHold) holds of
// the budget.
func (b *budget) release(key any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w, ok := b.held[key]; ok {
		delete(b.held, key)
		b.used -= w
		b.cond.Broadcast()
	}
	b.settle()
}

// came counts n bytes of a message that came in.
func (b *budget) came(n int) {
	b.mu.Lock()
	b.since += int64(n)
	b.mu.Unlock()
}

// settle returns the free memory to the system when nothing holds the
// budget any more and enough came in since the last time, or, when the
// last time is too recent, tries again once it is not; b.mu is held.
func (b *budget) settle() {
	if b.used != 0 || b.since < returnAfter || b.retry != nil {
		return
	}
	if wait := returnEvery - time.Since(b.returned); wait > 0 {
		b.retry = time.AfterFunc(wait, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.retry = nil
			b.settle()
		})
		return
	}
	b.since, b.returned = 0, time.Now()
	go returnMemory()
}

// returnMemory gives the heap's free memory back to the system: a first
// collection empties the pools of buffers (sync.Pool keeps what survives
// one), FreeOSMemory collects again and returns the pages.
func returnMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// takeRefusal returns why msg was not decoded, and forgets it.
func (b *budget) takeRefusal(msg any) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	err := b.refused[msg]
	delete(b.refused, msg)
	return err
}

// codec is the protobuf codec, decoding a budgeted request only once it
// is admitted. A request that is not is left empty and marked refused:
// the interceptor answers it, since an error of a codec reaches the client
// as INTERNAL.
type codec struct {
	encoding.CodecV2
	b *budget
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	n := data.Len()
	c.b.came(n)
	if max, what := maxRequestBytes(v); max > 0 && n > max {
		c.b.refuse(v, wire.ToStatus(core.NewFieldError("request", fmt.Sprintf("%d bytes on the wire, more than any valid %s has (%d): refused before decoding", n, what, max))))
		return nil
	}
	if !weighed(v) {
		return c.CodecV2.Unmarshal(data, v)
	}
	if err := c.b.admit(v, int64(n)); err != nil {
		c.b.refuse(v, err)
		return nil
	}
	if err := c.CodecV2.Unmarshal(data, v); err != nil {
		c.b.release(v)
		return err
	}
	return nil
}

// refuse marks v, left empty, refused with err, for the interceptor.
func (b *budget) refuse(v any, err error) {
	b.mu.Lock()
	b.refused[v] = err
	b.mu.Unlock()
}

// interceptor refuses the requests the codec refused or did not admit, and
// releases what an admitted one holds once it is answered.
func (b *budget) interceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if max, _ := maxRequestBytes(req); !weighed(req) && max == 0 {
		return handler(ctx, req)
	}
	defer b.release(req)
	if err := b.takeRefusal(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// options are the server options that put the budget in force.
func (b *budget) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(codec{CodecV2: encoding.GetCodecV2(proto.Name), b: b}),
		grpc.ChainUnaryInterceptor(b.interceptor),
		grpc.StatsHandler(budgetStats{b}),
	}
}

func (b *budget) String() string { return fmt.Sprintf("%d bytes", b.limit) }

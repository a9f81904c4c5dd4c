package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
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
	// held maps an admitted request message to its weight; refused marks
	// a message that was not decoded, for the interceptor to refuse.
	held    map[any]int64
	refused map[any]error
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
	w := min(n*expansion, b.limit)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+w > b.limit {
		if b.waiting+n > b.limit/expansion {
			return wire.ToStatus(fmt.Errorf("%w: the server holds %d of its %d request bytes and %d more wait: retry later", core.ErrOverloaded, b.used, b.limit, b.waiting))
		}
		b.waiting += n
		deadline := time.Now().Add(b.wait)
		timer := time.AfterFunc(b.wait, func() {
			b.mu.Lock()
			b.cond.Broadcast()
			b.mu.Unlock()
		})
		for b.used+w > b.limit && time.Now().Before(deadline) {
			b.cond.Wait()
		}
		timer.Stop()
		b.waiting -= n
		if b.used+w > b.limit {
			return wire.ToStatus(fmt.Errorf("%w: a request of %d bytes waited %s for room in the server's %d request bytes: retry later", core.ErrOverloaded, n, b.wait, b.limit))
		}
	}
	b.used += w
	b.held[msg] = w
	return nil
}

// release returns what msg holds of the budget.
func (b *budget) release(msg any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w, ok := b.held[msg]; ok {
		delete(b.held, msg)
		b.used -= w
		b.cond.Broadcast()
	}
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
	if !weighed(v) {
		return c.CodecV2.Unmarshal(data, v)
	}
	if err := c.b.admit(v, int64(data.Len())); err != nil {
		c.b.mu.Lock()
		c.b.refused[v] = err
		c.b.mu.Unlock()
		return nil
	}
	if err := c.CodecV2.Unmarshal(data, v); err != nil {
		c.b.release(v)
		return err
	}
	return nil
}

// interceptor refuses the requests the codec did not admit, and releases
// what an admitted one holds once it is answered.
func (b *budget) interceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !weighed(req) {
		return handler(ctx, req)
	}
	if err := b.takeRefusal(req); err != nil {
		return nil, err
	}
	defer b.release(req)
	return handler(ctx, req)
}

// options are the server options that put the budget in force.
func (b *budget) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(codec{CodecV2: encoding.GetCodecV2(proto.Name), b: b}),
		grpc.ChainUnaryInterceptor(b.interceptor),
	}
}

func (b *budget) String() string { return fmt.Sprintf("%d bytes", b.limit) }

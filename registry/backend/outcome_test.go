package backend_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
	"github.com/hashicorp/go-hclog"
)

// TestOutcomeOf: every error a call may return sorts into one kind of
// the closed set, with its reason.
func TestOutcomeOf(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		err    error
		kind   backend.Kind
		reason backend.Reason
	}{
		{"answered", context.Background(), nil, backend.Answered, ""},
		{"canceled", done, errors.New("stream closed"), backend.Canceled, ""},
		{"invalid request", context.Background(), fmt.Errorf("x: %w", core.ErrInvalidRequest), backend.Declined, backend.ReasonRefused},
		{"no kernel", context.Background(), core.ErrNoKernel, backend.Declined, backend.ReasonRefused},
		{"no plan", context.Background(), core.ErrNoPlan, backend.Declined, backend.ReasonRefused},
		{"deadline", context.Background(), context.DeadlineExceeded, backend.Failed, backend.ReasonTimeout},
		{"protocol", context.Background(), core.ErrProtocol, backend.Failed, backend.ReasonProtocol},
		{"unknown name", context.Background(), core.ErrUnknownBackend, backend.Failed, backend.ReasonProtocol},
		{"crash", context.Background(), errors.New("EOF"), backend.Failed, backend.ReasonCrashed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := backend.OutcomeOf(tc.ctx, tc.err)
			if o.Kind != tc.kind || o.Reason != tc.reason {
				t.Errorf("got kind %d reason %q, want %d %q", o.Kind, o.Reason, tc.kind, tc.reason)
			}
			if tc.kind != backend.Answered && o.Err == nil {
				t.Error("no error kept")
			}
		})
	}
}

type panicky struct{ core.Triton }

func (panicky) Dispatch(context.Context, *core.Request) (core.Method, error) { panic("a bug") }

// TestInProcessCall: a backend in the host's process answers through Call
// as a plugin does; a panic is a failed call, ReasonCrashed, and a name
// it does not serve is a protocol failure.
func TestInProcessCall(t *testing.T) {
	ctx := context.Background()
	tr, err := backend.NewInProcess(ctx, core.Triton{}, nil, nil, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	ask := func(b backend.Backend, name string) (core.Method, backend.Outcome) {
		req := core.NewRequest(name, core.ModeDecode)
		req.Runtime.Platform = core.PlatformCUDA
		var m core.Method
		o := b.Call(ctx, backend.DispatchCall, func(ctx context.Context, c backend.Conn) (err error) {
			m, err = c.Dispatch(ctx, &req)
			return err
		})
		return m, o
	}
	if m, o := ask(tr, core.TritonName); o.Kind != backend.Answered || !m.Valid() {
		t.Errorf("triton: got %v, %+v", m, o)
	}
	if _, o := ask(tr, "fa3"); o.Kind != backend.Failed || o.Reason != backend.ReasonProtocol {
		t.Errorf("fa3 asked of triton: got %+v, want a protocol failure", o)
	}
	p, err := backend.NewInProcess(ctx, panicky{}, nil, nil, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, o := ask(p, core.TritonName); o.Kind != backend.Failed || o.Reason != backend.ReasonCrashed {
		t.Errorf("panic: got %+v, want a crash", o)
	}
}

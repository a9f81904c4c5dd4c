package engine

import (
	"context"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry"
	"google.golang.org/grpc"
)

// stamp sets the generation of answers that were decided while the routes
// of generation gen were in force throughout; answers that a reload
// overlapped keep 0, which a client never caches.
func (s *dispatchServer) stamp(gen uint64, answers ...*dispatchv1.Answer) {
	if s.reg.Generation() != gen {
		return
	}
	for _, a := range answers {
		if a.GetError() == "" {
			a.Generation = gen
		}
	}
}

func (s *dispatchServer) Describe(context.Context, *dispatchv1.DescribeRequest) (*dispatchv1.DescribeResponse, error) {
	d, _ := s.describe()
	return d, nil
}

// Watch sends the description, then a new one after every reload, until
// the client goes or the server stops.
func (s *dispatchServer) Watch(_ *dispatchv1.WatchRequest, stream grpc.ServerStreamingServer[dispatchv1.DescribeResponse]) error {
	ctx := stream.Context()
	for {
		d, changed := s.describe()
		if err := stream.Send(d); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		case <-s.stop:
			return nil
		}
	}
}

// describe converts the registry's routes.
func (s *dispatchServer) describe() (*dispatchv1.DescribeResponse, <-chan struct{}) {
	routes, gen, changed := s.reg.Routes()
	out := &dispatchv1.DescribeResponse{Generation: gen, Platform: s.reg.Platform().String()}
	for _, r := range routes {
		pr := routeToProto(r)
		if r.Name == "" {
			out.DefaultRoute = pr
			continue
		}
		out.Routes = append(out.Routes, pr)
	}
	return out, changed
}

// routeToProto describes r for the engine API, whose reads are facts and
// constants: declared quantities are said in that form, and a route whose
// quantities have none is not cacheable (core.Reads.Shorthand).
func routeToProto(r registry.RouteInfo) *dispatchv1.Route {
	short, exact := r.Reads.Shorthand()
	return &dispatchv1.Route{
		Name: r.Name, Handler: r.Handler, Plugin: r.Plugin, Version: r.Version, Sha256: r.SHA256,
		Reads:     readsToProto(short),
		Cacheable: r.Cacheable && exact,
		Fallback:  string(r.Fallback),
	}
}

func readsToProto(r core.Reads) *dispatchv1.Reads {
	out := &dispatchv1.Reads{
		Facts:            r.Facts.Names(),
		PrefixSumAtLeast: r.PrefixSumAtLeast,
		SeqSumAtMost:     r.SeqSumAtMost,
		MaxSeqLenAtMost:  r.MaxSeqLenAtMost,
	}
	for _, c := range r.Conditions {
		out.Conditions = append(out.Conditions, &dispatchv1.ReadsCondition{When: c.When.String(), Reads: readsToProto(c.Reads)})
	}
	return out
}

package wire

import (
	"context"
	"testing"

	"github.com/attnplug/attnplug/core"
	pb "github.com/attnplug/attnplug/wire/pluginv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// FuzzServerDispatch feeds the plugin's gRPC server side arbitrary bytes,
// read as a DispatchRequest and as a DispatchBatchRequest, as a hostile or
// broken host could send them: the server must not panic, must refuse
// what is invalid with InvalidArgument (NotFound for a name the backend
// does not serve), and must answer every request of a batch.
func FuzzServerDispatch(f *testing.F) {
	cpr := core.ChunkedPrefixRule{OneShot: true}
	backend, err := core.NewRuleBackend("fuzz", "0.0.1", nil,
		core.TritonRule(),
		core.Rule{Name: "oneshot", Decide: cpr.Decide, Reads: cpr.Reads(), Methods: cpr.Methods()},
	)
	if err != nil {
		f.Fatal(err)
	}
	srv := NewServer(backend)

	seeds := []core.Request{
		core.NewRequest("triton", core.ModeDecode),
		core.NewRequest("oneshot", core.ModeExtend),
		core.NewRequest("unknown", core.ModeMixed),
	}
	seeds[1].Batch.ExtendPrefixLens = []int64{0, 8192, 1 << 40}
	seeds[1].Batch.SeqLens = []int64{100, 9000, 1 << 40}
	seeds[1].Batch.MaxChunkCapacity = 131072
	seeds[1].Runtime.Platform = core.PlatformCUDA
	batch := &pb.DispatchBatchRequest{}
	for i := range seeds {
		one, err := proto.Marshal(&pb.DispatchRequest{Request: requestToProto(&seeds[i])})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(one)
		batch.Requests = append(batch.Requests, requestToProto(&seeds[i]))
	}
	many, err := proto.Marshal(batch)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(many)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x02, 0x1a, 0x00}) // a request with an empty batch

	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		var one pb.DispatchRequest
		if proto.Unmarshal(data, &one) == nil {
			resp, err := srv.Dispatch(ctx, &one)
			switch code := status.Code(err); {
			case err == nil:
				if _, err := methodFromProto(resp.GetMethod()); err != nil {
					t.Errorf("Dispatch answered %v: %v", resp.GetMethod(), err)
				}
			case code != codes.InvalidArgument && code != codes.NotFound:
				t.Errorf("Dispatch: code %s (%v), want InvalidArgument or NotFound", code, err)
			}
		}
		var many pb.DispatchBatchRequest
		if proto.Unmarshal(data, &many) == nil {
			resp, err := srv.DispatchBatch(ctx, &many)
			if err != nil {
				if code := status.Code(err); code != codes.InvalidArgument {
					t.Errorf("DispatchBatch: code %s (%v), want InvalidArgument", code, err)
				}
				return
			}
			if got, want := len(resp.GetResults()), len(many.GetRequests()); got != want {
				t.Fatalf("DispatchBatch: %d results for %d requests", got, want)
			}
			for i, r := range resp.GetResults() {
				switch r.GetErrorCode() {
				case pb.ErrorCode_ERROR_CODE_UNSPECIFIED:
					if _, err := methodFromProto(r.GetMethod()); err != nil {
						t.Errorf("result %d: %v", i, err)
					}
				case pb.ErrorCode_ERROR_CODE_INVALID_REQUEST, pb.ErrorCode_ERROR_CODE_UNKNOWN_BACKEND:
					if r.GetErrorMessage() == "" {
						t.Errorf("result %d: error without a message", i)
					}
				default:
					t.Errorf("result %d: error code %s (%s), want invalid request or unknown backend", i, r.GetErrorCode(), r.GetErrorMessage())
				}
			}
		}
	})
}

package wire

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	pb "github.com/attnplug/attnplug/wire/pluginv1"
	"google.golang.org/protobuf/proto"
)

// overTheWire marshals and unmarshals m, as a real connection does.
func overTheWire[M proto.Message](t *testing.T, m M, into M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatalf("proto.Marshal: %v", err)
	}
	if err := proto.Unmarshal(b, into); err != nil {
		t.Fatalf("proto.Unmarshal: %v", err)
	}
	return into
}

func TestRequestRoundTrip(t *testing.T) {
	full := core.Request{
		Backend: "flashinfer",
		Layer: core.Layer{ChunkedPrefixCacheThreshold: 4096, DisableChunkedPrefixCache: true, FlashinferMLADisableRagged: true,
			ROCmFusedDecodeMLA: true, UseDSA: true, FusedQKVAProjWithMQA: true, IntelAMX: true},
		Batch: core.Batch{Mode: core.ModeDLLMExtend, ExtendPrefixLens: []int64{0, 512}, SeqLens: []int64{1024, 2048},
			MaxChunkCapacity: 131072, MLAPrefillCP: true},
		Runtime: core.Runtime{Platform: core.PlatformHIP, PiecewiseCUDAGraph: true, BreakableCUDAGraph: true,
			DeterministicInference: true, DSAUseMHA: true, TwoBatchOverlap: true, DSAUseMHASet: true,
			ComputeCapability: 90, KVCacheDType: "fp8_e4m3"},
	}
	tests := []struct {
		name string
		req  core.Request
	}{
		{"minimal_nil_lens", core.NewRequest("fa3", core.ModeDecode)},
		{"empty_lens_not_nil", func() core.Request {
			r := core.NewRequest("fa3", core.ModeExtend)
			r.Batch.ExtendPrefixLens, r.Batch.SeqLens = []int64{}, []int64{}
			return r
		}()},
		{"prefix_known_seq_not", func() core.Request {
			r := core.NewRequest("fa3", core.ModeExtend)
			r.Batch.ExtendPrefixLens = []int64{0, 0}
			return r
		}()},
		{"seq_known_prefix_empty", func() core.Request {
			r := core.NewRequest("fa3", core.ModeExtend)
			r.Batch.SeqLens = []int64{3}
			r.Batch.ExtendPrefixLens = nil
			return r
		}()},
		{"every_field", full},
	}
	for _, p := range []core.Platform{core.PlatformUnset, core.PlatformCUDA, core.PlatformNPU, core.PlatformXPU, core.PlatformCPU} {
		r := full
		r.Runtime.Platform = p
		tests = append(tests, struct {
			name string
			req  core.Request
		}{"platform_" + p.String(), r})
	}
	for _, m := range core.ForwardModes() {
		r := core.NewRequest("x", m)
		tests = append(tests, struct {
			name string
			req  core.Request
		}{"mode_" + m.String(), r})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := requestFromProto(requestToProto(&tt.req))
			if err != nil {
				t.Fatalf("in process: %v", err)
			}
			if !reflect.DeepEqual(got, tt.req) {
				t.Errorf("in process:\n got %#v\nwant %#v", got, tt.req)
			}
			got, err = requestFromProto(overTheWire(t, requestToProto(&tt.req), &pb.Request{}))
			if err != nil {
				t.Fatalf("over the wire: %v", err)
			}
			if !reflect.DeepEqual(got, tt.req) {
				t.Errorf("over the wire:\n got %#v\nwant %#v", got, tt.req)
			}
		})
	}
}

func TestRequestFromProtoRejects(t *testing.T) {
	valid := func() *pb.Request {
		r := core.NewRequest("fa3", core.ModeExtend)
		r.Batch.ExtendPrefixLens, r.Batch.SeqLens = []int64{0, 1}, []int64{2, 3}
		return requestToProto(&r)
	}
	tests := []struct {
		name    string
		edit    func(*pb.Request) *pb.Request
		wantErr string
	}{
		{"nil_request", func(*pb.Request) *pb.Request { return nil }, "request: missing"},
		{"empty_backend", func(r *pb.Request) *pb.Request { r.Backend = ""; return r }, "backend: must not be empty"},
		{"long_backend", func(r *pb.Request) *pb.Request { r.Backend = strings.Repeat("b", 300); return r }, "backend: name of 300 bytes is longer than 256"},
		{"missing_batch", func(r *pb.Request) *pb.Request { r.Batch = nil; return r }, "forward_mode: unknown mode 0"},
		{"unspecified_mode", func(r *pb.Request) *pb.Request { r.Batch.ForwardMode = 0; return r }, "forward_mode: unknown mode 0"},
		{"newer_mode", func(r *pb.Request) *pb.Request { r.Batch.ForwardMode = 10; return r }, "forward_mode: unknown mode 10"},
		{"mode_past_uint8", func(r *pb.Request) *pb.Request { r.Batch.ForwardMode = 257; return r }, "forward_mode: unknown mode 257"},
		{"negative_mode", func(r *pb.Request) *pb.Request { r.Batch.ForwardMode = -1; return r }, "forward_mode: unknown mode -1"},
		{"newer_platform", func(r *pb.Request) *pb.Request { r.Runtime.Platform = 6; return r }, "runtime.platform: unknown platform 6"},
		{"platform_past_uint8", func(r *pb.Request) *pb.Request { r.Runtime.Platform = 258; return r }, "runtime.platform: unknown platform 258"},
		{"negative_platform", func(r *pb.Request) *pb.Request { r.Runtime.Platform = -2; return r }, "runtime.platform: unknown platform -2"},
		{"negative_prefix", func(r *pb.Request) *pb.Request { r.Batch.ExtendPrefixLens[1] = -1; return r }, "extend_prefix_lens[1]: negative length -1"},
		{"negative_seq", func(r *pb.Request) *pb.Request { r.Batch.SeqLens[0] = -5; return r }, "seq_lens[0]: negative length -5"},
		{"lengths_differ", func(r *pb.Request) *pb.Request { r.Batch.SeqLens = []int64{1, 2, 3}; return r }, "extend_prefix_lens: has 2 entries but seq_lens has 3"},
		{"known_but_empty_differs", func(r *pb.Request) *pb.Request { r.Batch.ExtendPrefixLens = nil; return r }, "extend_prefix_lens: has 0 entries but seq_lens has 2"},
		{"prefix_longer_than_seq", func(r *pb.Request) *pb.Request { r.Batch.ExtendPrefixLens[1] = 4; return r }, "extend_prefix_lens[1]: prefix 4 is longer than seq_lens[1] = 3"},
		{"too_long", func(r *pb.Request) *pb.Request { r.Batch.SeqLens[1] = core.MaxLength + 1; return r }, "seq_lens[1]: length 1099511627777 is past the limit of 1099511627776"},
		{"too_many", func(r *pb.Request) *pb.Request {
			r.Batch.ExtendPrefixLensKnown = false
			r.Batch.SeqLens = make([]int64, core.MaxBatchSize+1)
			return r
		}, "seq_lens: has 65537 entries, more than the limit of 65536"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := requestFromProto(tt.edit(valid()))
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("RequestFromProto: got %v, want %q", err, tt.wantErr)
			}
			if !errors.Is(err, core.ErrInvalidRequest) {
				t.Errorf("errors.Is(err, ErrInvalidRequest): got false, want true")
			}
		})
	}
	t.Run("empty_lens_without_known_are_not_known", func(t *testing.T) {
		r := valid()
		r.Batch.ExtendPrefixLensKnown, r.Batch.SeqLensKnown = false, false
		r.Batch.ExtendPrefixLens, r.Batch.SeqLens = nil, nil
		got, err := requestFromProto(r)
		if err != nil || got.Batch.ExtendPrefixLens != nil || got.Batch.SeqLens != nil {
			t.Errorf("got %+v, %v, want nil lens and no error", got.Batch, err)
		}
	})
	t.Run("non_empty_lens_are_known_without_the_flag", func(t *testing.T) {
		// A client that sets the list but not its flag means the list: the
		// JSON format has no flag.
		r := valid()
		r.Batch.ExtendPrefixLensKnown, r.Batch.SeqLensKnown = false, false
		got, err := requestFromProto(r)
		if err != nil || len(got.Batch.ExtendPrefixLens) != 2 || len(got.Batch.SeqLens) != 2 {
			t.Errorf("got %+v, %v, want both lists", got.Batch, err)
		}
		r.Batch.SeqLens = []int64{-1, 3}
		if _, err := requestFromProto(r); err == nil || err.Error() != "seq_lens[0]: negative length -1" {
			t.Errorf("a negative length without the known flag: %v", err)
		}
	})
	t.Run("absent_fields_get_the_format_defaults", func(t *testing.T) {
		r := valid()
		r.Layer, r.Runtime = nil, nil
		got, err := requestFromProto(r)
		if err != nil || got.Layer.ChunkedPrefixCacheThreshold != core.DefaultChunkedPrefixCacheThreshold || got.Runtime.DSAUseMHAGiven() {
			t.Errorf("without layer and runtime: %+v, %v; want threshold %d and dsa_use_mha not given", got, err, core.DefaultChunkedPrefixCacheThreshold)
		}
		r.Layer = &pb.Layer{UseDsa: true}
		r.Runtime = &pb.Runtime{DsaUseMha: proto.Bool(false)}
		got, err = requestFromProto(r)
		if err != nil || got.Layer.ChunkedPrefixCacheThreshold != core.DefaultChunkedPrefixCacheThreshold || !got.Layer.UseDSA || !got.Runtime.DSAUseMHAGiven() || got.Runtime.DSAUseMHA {
			t.Errorf("layer without threshold, dsa_use_mha false given: %+v, %v", got, err)
		}
		r.Layer.ChunkedPrefixCacheThreshold = proto.Int64(0)
		got, err = requestFromProto(r)
		if err != nil || got.Layer.ChunkedPrefixCacheThreshold != 0 {
			t.Errorf("threshold 0 given: %+v, %v", got.Layer, err)
		}
		// Round trip: what the host sends keeps both.
		back, err := requestFromProto(requestToProto(&got))
		if err != nil || back.Layer.ChunkedPrefixCacheThreshold != 0 || !back.Runtime.DSAUseMHAGiven() || back.Runtime.DSAUseMHA {
			t.Errorf("round trip: %+v, %v", back, err)
		}
	})
}

// TestEnumParity checks, by name, that core's enums and pluginv1's share
// their numbers, and that pluginv1 has no value core lacks.
func TestEnumParity(t *testing.T) {
	t.Run("forward_mode", func(t *testing.T) {
		for _, m := range core.ForwardModes() {
			if got, want := strings.TrimPrefix(modeToProto(m).String(), "FORWARD_MODE_"), m.String(); got != want {
				t.Errorf("mode %d: pluginv1 %s, core %s", int(m), got, want)
			}
			back, err := modeFromProto(modeToProto(m))
			if err != nil || back != m {
				t.Errorf("modeFromProto(%v): got %v, %v, want %v", modeToProto(m), back, err, m)
			}
		}
		if got, want := len(pb.ForwardMode_name), len(core.ForwardModes())+1; got != want {
			t.Errorf("pluginv1 ForwardMode values: got %d, want %d (the modes and UNSPECIFIED)", got, want)
		}
	})
	t.Run("method", func(t *testing.T) {
		for _, m := range core.Methods() {
			if got, want := strings.TrimPrefix(methodToProto(m).String(), "METHOD_"), m.String(); got != want {
				t.Errorf("method %d: pluginv1 %s, core %s", int(m), got, want)
			}
			back, err := methodFromProto(methodToProto(m))
			if err != nil || back != m {
				t.Errorf("methodFromProto(%v): got %v, %v, want %v", methodToProto(m), back, err, m)
			}
		}
		if got, want := core.MHAChunkedKV.String(), strings.TrimPrefix(pb.Method_METHOD_MHA_CHUNKED_KV.String(), "METHOD_"); got != want {
			t.Errorf("MHA_CHUNKED_KV: core %s, pluginv1 %s", got, want)
		}
		if got, want := len(pb.Method_name), len(core.Methods())+1; got != want {
			t.Errorf("pluginv1 Method values: got %d, want %d", got, want)
		}
	})
	t.Run("platform", func(t *testing.T) {
		n := 0
		for p := core.PlatformUnset; p.Valid(); p++ {
			want := strings.ToUpper(p.String())
			if p == core.PlatformUnset {
				want = "UNSPECIFIED"
			}
			if got := strings.TrimPrefix(pb.Platform(p).String(), "PLATFORM_"); got != want {
				t.Errorf("platform %d: pluginv1 %s, want %s", int(p), got, want)
			}
			back, err := platformFromProto(pb.Platform(p))
			if err != nil || back != p {
				t.Errorf("platformFromProto(%d): got %v, %v, want %v", int(p), back, err, p)
			}
			n++
		}
		if got := len(pb.Platform_name); got != n {
			t.Errorf("pluginv1 Platform values: got %d, want %d", got, n)
		}
	})
	t.Run("fact", func(t *testing.T) {
		n := 0
		for i := 0; core.Fact(1)<<i&core.AllFacts != 0; i++ {
			f := core.Fact(1) << i
			ps := factsToProto(f)
			if len(ps) != 1 {
				t.Fatalf("factsToProto(%v): got %v, want one value", f, ps)
			}
			if got, want := strings.TrimPrefix(ps[0].String(), "FACT_"), strings.ToUpper(f.String()); got != want {
				t.Errorf("fact bit %d: pluginv1 %s, core %s", i, got, want)
			}
			back, ok := factsFromProto(ps)
			if !ok || back != f {
				t.Errorf("factsFromProto(%v): got %v, %v, want %v, true", ps, back, ok, f)
			}
			n++
		}
		// FACT_UNSPECIFIED and FACT_QUANTITIES have no core bit.
		if got := len(pb.Fact_name); got != n+2 {
			t.Errorf("pluginv1 Fact values: got %d, want %d", got, n+2)
		}
		all, ok := factsFromProto(factsToProto(core.AllFacts))
		if !ok || all != core.AllFacts {
			t.Errorf("AllFacts round trip: got %v, %v", all, ok)
		}
		if got := factsToProto(0); got != nil {
			t.Errorf("factsToProto(0): got %v, want nil", got)
		}
	})
}

func TestQuantityParity(t *testing.T) {
	qs := core.Quantities()
	for _, q := range qs {
		if got, want := strings.TrimPrefix(pb.Quantity(q).String(), "QUANTITY_"), strings.ToUpper(q.String()); got != want {
			t.Errorf("quantity %d: pluginv1 %s, core %s", q, got, want)
		}
	}
	if got := len(pb.Quantity_name); got != len(qs)+1 {
		t.Errorf("pluginv1 Quantity values: got %d, want %d", got, len(qs)+1)
	}
}

// TestReadsRoundTrip sends declared quantities over the wire, and checks
// that a host older than them (one that does not know FACT_QUANTITIES)
// would find the reads not cacheable.
func TestReadsRoundTrip(t *testing.T) {
	r := core.Reads{
		Facts:            core.FactMode | core.FactPrefixSumZero | core.FactDSAUseMHASet,
		PrefixSumAtLeast: []int64{16384},
		SeqSumAtMost:     []int64{131072},
		MaxSeqLenAtMost:  []int64{2048},
		Quantities: []core.Read{
			{Quantity: core.QuantityComputeCapability, At: []int64{100}},
			{Quantity: core.QuantityKVCacheDType},
		},
		Conditions: []core.ReadsCondition{
			{When: core.FactDSAUseMHASet, Reads: core.Reads{Facts: core.FactMode}},
			{When: core.FactPrefixSumZero, Reads: core.Reads{PrefixSumAtLeast: []int64{16384}, Quantities: []core.Read{{Quantity: core.QuantityKVCacheDType}}}},
			{When: core.FactKVCacheDenseDType},
		},
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	// Every field of Reads is set, so that a field the converters forget
	// fails the round trip.
	rv := reflect.ValueOf(r)
	for i := range rv.NumField() {
		if rv.Field(i).IsZero() {
			t.Fatalf("the test leaves Reads.%s unset", rv.Type().Field(i).Name)
		}
	}
	p := overTheWire(t, readsToProto(&r), &pb.Reads{})
	if !slices.Contains(p.GetFacts(), pb.Fact_FACT_QUANTITIES) {
		t.Errorf("facts %v lack FACT_QUANTITIES", p.GetFacts())
	}
	back := readsFromProto(p)
	if !reflect.DeepEqual(back, r) {
		t.Errorf("round trip: got %+v, want %+v", back, r)
	}
	if !back.Cacheable() {
		t.Errorf("round trip is not cacheable: %v", back.Validate())
	}
	// An older host knew facts 1-20 only: FACT_QUANTITIES is unknown to it.
	if _, ok := factsFromProto([]pb.Fact{pb.Fact_FACT_MODE, pb.Fact(21)}); ok {
		t.Errorf("a fact past the known ones must make the reads unknown")
	}
	// Without quantities, nothing is added: a v1 plugin's reads are as
	// they were.
	if got := readsToProto(&core.Reads{Facts: core.FactMode}).GetFacts(); !slices.Equal(got, []pb.Fact{pb.Fact_FACT_MODE}) {
		t.Errorf("facts: got %v", got)
	}
	// A condition on a fact from a newer plugin is left out; the rest stay.
	p.Conditions = append(p.Conditions, &pb.ReadsCondition{When: 99, Reads: &pb.Reads{}}, &pb.ReadsCondition{Reads: &pb.Reads{}})
	if back := readsFromProto(p); !reflect.DeepEqual(back.Conditions, r.Conditions) || !back.Cacheable() {
		t.Errorf("conditions on unknown facts: got %+v (cacheable %v), want %+v", back.Conditions, back.Cacheable(), r.Conditions)
	}
	// A quantity from a newer plugin is kept as unknown: not cacheable.
	p.Quantities = append(p.Quantities, &pb.QuantityRead{Quantity: 99})
	if back := readsFromProto(p); back.Cacheable() {
		t.Errorf("an unknown quantity is cacheable: %+v", back)
	}
	p.Quantities[len(p.Quantities)-1].Quantity = 1 << 20
	if back := readsFromProto(p); back.Cacheable() {
		t.Errorf("a quantity past 8 bits is cacheable: %+v", back)
	}
}

func TestHardwareDevicesRoundTrip(t *testing.T) {
	hw := core.Hardware{PlatformName: "acme", Devices: []core.PCIDevice{{VendorID: 0xacce, DeviceIDs: []uint16{1, 2}, Drivers: []string{"acme"}}}}
	back := hardwareFromProto(hardwareToProto(hw))
	if !reflect.DeepEqual(back, hw) {
		t.Errorf("round trip: got %+v, want %+v", back, hw)
	}
	wide := hardwareFromProto(&pb.Hardware{Devices: []*pb.PCIDevice{{VendorId: 0x1acce, DeviceIds: []uint32{0x10001}}}})
	if d := wide.Devices[0]; d.VendorID != 0xffff || d.DeviceIDs[0] != 0xffff {
		t.Errorf("IDs past 16 bits: got %+v, want 0xffff", d)
	}
	info := core.HostInfo{Platform: core.PlatformCPU, Devices: []core.HostDevice{{VendorID: 0xacce, DeviceID: 1, Driver: "acme", PCIAddress: "0000:41:00.0"}}}
	gotInfo, err := hostInfoFromProto(hostInfoToProto(info))
	if err != nil || !reflect.DeepEqual(gotInfo, info) {
		t.Errorf("host info round trip: got %+v, %v, want %+v", gotInfo, err, info)
	}
	if _, err := hostInfoFromProto(&pb.HostInfo{Devices: []*pb.HostDevice{{VendorId: 1 << 16}}}); !errors.Is(err, core.ErrInvalidRequest) {
		t.Errorf("a vendor ID past 16 bits: got %v, want an invalid-request error", err)
	}
}

func TestMethodFromProtoUnknown(t *testing.T) {
	tests := []struct {
		name string
		in   pb.Method
		want string
	}{
		{"unspecified", 0, "protocol violation: unknown method 0"},
		{"newer_peer", 42, "protocol violation: unknown method 42"},
		{"one_past_last", 10, "protocol violation: unknown method 10"},
		{"wraps_to_valid_uint8", 257, "protocol violation: unknown method 257"},
		{"negative", -1, "protocol violation: unknown method -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := methodFromProto(tt.in)
			if err == nil || err.Error() != tt.want || m != 0 {
				t.Fatalf("methodFromProto(%d): got %v, %v, want 0, %q", int32(tt.in), m, err, tt.want)
			}
			if !errors.Is(err, core.ErrProtocol) {
				t.Errorf("errors.Is(err, ErrProtocol): got false, want true")
			}
		})
	}
}

func TestFactsFromProtoUnknown(t *testing.T) {
	tests := []struct {
		name   string
		in     []pb.Fact
		want   core.Fact
		wantOK bool
	}{
		{"none", nil, 0, true},
		{"newer_fact_99", []pb.Fact{pb.Fact_FACT_MODE, 99}, core.FactMode, false},
		{"one_past_last", []pb.Fact{21}, 0, false},
		{"bit_31", []pb.Fact{32}, 0, false},
		{"past_32_bits", []pb.Fact{33}, 0, false},
		{"unspecified", []pb.Fact{0, pb.Fact_FACT_USE_DSA}, core.FactUseDSA, false},
		{"negative", []pb.Fact{-3}, 0, false},
		{"duplicates", []pb.Fact{pb.Fact_FACT_MODE, pb.Fact_FACT_MODE}, core.FactMode, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := factsFromProto(tt.in)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("factsFromProto(%v): got %v, %v, want %v, %v", tt.in, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func sampleDescription() *core.Description {
	return &core.Description{
		Name: "sample", Version: "1.2.3", ProtocolVersion: ProtocolVersion, Vendor: "Acme Corp", DeviceCode: true,
		Handlers: []core.HandlerInfo{
			{Name: "a", Reads: core.Reads{Facts: core.AllFacts, PrefixSumAtLeast: []int64{1, 8192}, SeqSumAtMost: []int64{131072}},
				Methods: core.Methods()},
			{Name: "b", AliasOf: "a", Deprecated: "use a", Reads: core.Reads{Facts: core.FactMode | core.FactUseDSA},
				Methods: []core.Method{core.DSANPU},
				Hardware: []core.Hardware{
					{Platforms: []core.Platform{core.PlatformCUDA, core.PlatformHIP}, MinCapability: 90, MaxCapability: 109, Archs: []string{"gfx942"}, NeedsAMX: true},
					{},
				}},
			{Name: "c"},
		},
	}
}

func TestDescriptionRoundTrip(t *testing.T) {
	want := sampleDescription()
	got, err := descriptionFromProto(descriptionToProto(want))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("in process:\n got %#v\nwant %#v", got, want)
	}
	got, err = descriptionFromProto(overTheWire(t, descriptionToProto(want), &pb.DescribeResponse{}))
	if err != nil {
		t.Fatal(err)
	}
	// An empty Hardware entry comes back with nil slices, as it went.
	if !reflect.DeepEqual(got, want) {
		t.Errorf("over the wire:\n got %#v\nwant %#v", got, want)
	}
	for _, h := range got.Handlers {
		if !h.Reads.Cacheable() {
			t.Errorf("%s: Reads not Cacheable after the round trip", h.Name)
		}
	}
}

func TestDescriptionFromProtoNewerPeer(t *testing.T) {
	t.Run("unknown_fact_not_cacheable", func(t *testing.T) {
		d := descriptionToProto(sampleDescription())
		d.Handlers[1].Reads.Facts = append(d.Handlers[1].Reads.Facts, 99)
		got, err := descriptionFromProto(d)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := got.Handler("b")
		if h.Reads.Cacheable() {
			t.Errorf("handler with fact 99: got Cacheable Reads %v, want not Cacheable", h.Reads.Facts)
		}
		if h.Reads.Facts&core.AllFacts != core.AllFacts {
			t.Errorf("handler with fact 99: got facts %v, want every known fact", h.Reads.Facts)
		}
		if a, _ := got.Handler("a"); !a.Reads.Cacheable() {
			t.Errorf("other handler: got not Cacheable, want Cacheable")
		}
	})
	t.Run("unspecified_fact_not_cacheable", func(t *testing.T) {
		d := descriptionToProto(sampleDescription())
		d.Handlers[0].Reads.Facts = []pb.Fact{0}
		got, err := descriptionFromProto(d)
		if err != nil {
			t.Fatal(err)
		}
		if got.Handlers[0].Reads.Cacheable() {
			t.Errorf("handler with fact 0: got Cacheable, want not")
		}
	})
	t.Run("unknown_platform_in_hardware_matches_nothing", func(t *testing.T) {
		d := descriptionToProto(sampleDescription())
		d.Handlers[1].Hardware = []*pb.Hardware{{Platforms: []pb.Platform{77, 0}}}
		got, err := descriptionFromProto(d)
		if err != nil {
			t.Fatal(err)
		}
		hw := got.Handlers[1].Hardware[0]
		for p := core.PlatformUnset; p.Valid(); p++ {
			if ok, _ := hw.Supports(core.HostInfo{Platform: p}); ok {
				t.Errorf("hardware of platforms 77 and 0: supports %v, want nothing", p)
			}
		}
	})
	tests := []struct {
		name    string
		edit    func(*pb.DescribeResponse) *pb.DescribeResponse
		wantErr string
	}{
		{"nil", func(*pb.DescribeResponse) *pb.DescribeResponse { return nil }, "protocol violation: empty description"},
		{"empty_handler_name", func(d *pb.DescribeResponse) *pb.DescribeResponse { d.Handlers[2].Name = ""; return d },
			"protocol violation: handler with an empty name"},
		{"unknown_method", func(d *pb.DescribeResponse) *pb.DescribeResponse {
			d.Handlers[1].Methods = append(d.Handlers[1].Methods, 42)
			return d
		}, `handler "b": protocol violation: unknown method 42`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := descriptionFromProto(tt.edit(descriptionToProto(sampleDescription())))
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("DescriptionFromProto: got %v, %v, want %q", got, err, tt.wantErr)
			}
			if !errors.Is(err, core.ErrProtocol) {
				t.Errorf("errors.Is(err, ErrProtocol): got false, want true")
			}
		})
	}
}

func TestHostInfoRoundTrip(t *testing.T) {
	for _, info := range []core.HostInfo{
		{},
		{Platform: core.PlatformCUDA, ComputeCapability: 90, Archs: []string{"sm_90"}},
		{Platform: core.PlatformCPU, Archs: []string{"amd64"}, AMX: true},
	} {
		got, err := hostInfoFromProto(overTheWire(t, hostInfoToProto(info), &pb.HostInfo{}))
		if err != nil || !reflect.DeepEqual(got, info) {
			t.Errorf("round trip of %+v: got %+v, %v", info, got, err)
		}
	}
	if _, err := hostInfoFromProto(&pb.HostInfo{Platform: 9}); !errors.Is(err, core.ErrInvalidRequest) {
		t.Errorf("platform 9: got %v, want an ErrInvalidRequest", err)
	}
	if got, err := hostInfoFromProto(nil); err != nil || !reflect.DeepEqual(got, core.HostInfo{}) {
		t.Errorf("nil: got %+v, %v, want the zero HostInfo", got, err)
	}
}

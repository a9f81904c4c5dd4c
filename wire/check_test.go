package wire

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-plugin"
)

// connectChecked is connect with the server checking requests.
func connectChecked(t *testing.T, b core.Backend, check bool) *Client {
	t.Helper()
	set := VersionedPlugins(b)[ProtocolVersion]
	set[PluginName].(*GRPCPlugin).CheckRequests = check
	client, _ := plugin.TestPluginGRPCConn(t, false, set)
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(PluginName)
	if err != nil {
		t.Fatal(err)
	}
	return raw.(*Client)
}

// TestCheckRequests: with CheckRequests, a rule that changes its request
// fails the call, naming the field, alone and in a batch, while a rule that
// does not is unaffected; without it, nothing is checked.
func TestCheckRequests(t *testing.T) {
	ctx := testContext(t)
	sorting := core.Rule{Name: "sorts", Methods: []core.Method{core.MLA}, Decide: func(r *core.Request) core.Method {
		slices.Sort(r.Batch.SeqLens) // changes the caller's slice
		return core.MLA
	}}
	layer := core.Rule{Name: "layer", Methods: []core.Method{core.MLA}, Decide: func(r *core.Request) core.Method {
		r.Layer.ChunkedPrefixCacheThreshold = 0
		return core.MLA
	}}
	fine := core.Rule{Name: "fine", Methods: []core.Method{core.MLA}, Decide: func(*core.Request) core.Method { return core.MLA }}
	b, err := core.NewRuleBackend("check", "1.0.0", nil, sorting, layer, fine)
	if err != nil {
		t.Fatal(err)
	}
	c := connectChecked(t, b, true)
	for _, tc := range []struct{ name, says string }{
		{"sorts", "seq_lens [9 3] became [3 9]"},
		{"layer", `layer {"chunked_prefix_cache_threshold":8192} became {"chunked_prefix_cache_threshold":0}`},
		{"fine", ""},
	} {
		r := request(tc.name, core.ModeDecode, []int64{1, 2}, []int64{9, 3})
		_, err := c.Dispatch(ctx, &r)
		if tc.says == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, core.ErrProtocol) || !strings.Contains(err.Error(), ErrRequestChanged.Error()) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: got %v, want a protocol error saying %q", tc.name, err, tc.says)
		}
	}
	reqs := []core.Request{request("fine", core.ModeDecode, nil, []int64{9, 3}), request("sorts", core.ModeDecode, nil, []int64{9, 3})}
	out := make([]core.Result, 2)
	if err := c.DispatchBatch(ctx, reqs, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Err != nil || !strings.Contains(errString(out[1].Err), "seq_lens [9 3] became [3 9]") {
		t.Errorf("batch: %+v", out)
	}
	unchecked := connectChecked(t, b, false)
	r := request("sorts", core.ModeDecode, nil, []int64{9, 3})
	if m, err := unchecked.Dispatch(ctx, &r); err != nil || m != core.MLA {
		t.Errorf("unchecked: %v, %v", m, err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/engine/client"
)

// TestConnectKeepsErrorIdentity: the Go client of dispatch --connect,
// against a real attnplug serve --strict with the real plugins, gets
// errors for which errors.Is (and errors.As for a field) hold as they do
// in process; and dispatch --connect writes the lines dispatch writes.
func TestConnectKeepsErrorIdentity(t *testing.T) {
	s := startServer(t, bins, nil, "--plugin-dir", bins.PluginDir, "--strict")
	ctx := testContext(t)
	c, err := client.Dial("unix://"+s.socket, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	good := core.NewRequest("fa3", core.ModeDecode)
	bad := core.NewRequest("fa3", core.ModeExtend)
	bad.Batch.ExtendPrefixLens, bad.Batch.SeqLens = []int64{10}, []int64{5}
	unknown := core.NewRequest("no_such_backend", core.ModeDecode)
	reqs := []core.Request{good, bad, unknown}
	out := make([]core.BatchAnswer, len(reqs))
	if err := c.DispatchBatch(ctx, reqs, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Err != nil || out[0].Answer.Plugin != "fa3" || out[0].Answer.Method != core.MLA {
		t.Errorf("fa3 decode: %+v", out[0])
	}
	var fe *core.FieldError
	if !errors.Is(out[1].Err, core.ErrInvalidRequest) || !errors.As(out[1].Err, &fe) {
		t.Errorf("prefix longer than its sequence: %v, want a *core.FieldError", out[1].Err)
	}
	if !errors.Is(out[2].Err, core.ErrRefused) || !strings.Contains(out[2].Err.Error(), "no_such_backend") {
		t.Errorf("unknown name under --strict: %v, want core.ErrRefused", out[2].Err)
	}
	if _, err := c.Dispatch(ctx, &unknown); !errors.Is(err, core.ErrRefused) {
		t.Errorf("Dispatch of an unknown name under --strict: %v, want core.ErrRefused", err)
	}

	stdin := `{"backend":"fa3","forward_mode":"DECODE"}
{"backend":"fa3","forward_mode":"EXTEND","extend_prefix_lens":[10],"seq_lens":[5]}
{"backend":"no_such_backend","forward_mode":"DECODE"}
`
	local := host(t, bins, stdin, "dispatch", "--plugin-dir", bins.PluginDir, "--strict")
	remote := host(t, bins, stdin, "dispatch", "--connect", "unix://"+s.socket)
	if local.stdout != remote.stdout || local.code != remote.code || local.code != 1 {
		t.Errorf("dispatch (exit %d):\n%s\ndispatch --connect (exit %d):\n%s", local.code, local.stdout, remote.code, remote.stdout)
	}
}

package wire

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
)

// captureStdout runs f with os.Stdout sent to a pipe, and returns what was
// written there.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = old }()
	f()
	os.Stdout = old
	_ = w.Close()
	out := <-done
	_ = r.Close()
	return out
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

type failingDescribe struct{ badBackend }

func (*failingDescribe) Describe(context.Context) (*core.Description, error) {
	return nil, errors.New("no description")
}

func TestRunByHand(t *testing.T) {
	factory := func(hclog.Logger) (core.Backend, error) { return ruleBackend(t), nil }
	tests := []struct {
		name    string
		factory Factory
		args    []string
		env     map[string]string
		want    []string
	}{
		{"no_cookie", factory, []string{"/opt/plugins/attnplug-backend-test"}, nil, []string{
			`attnplug-backend-test: attnplug backend plugin "test", version 1.2.3, protocol version 1`,
			"serves the backend names: old, oneshot, triton",
			"This binary is started by the attnplug host, not by hand.",
			"attnplug dispatch",
		}},
		{"wrong_cookie", factory, []string{"attnplug-backend-test"}, map[string]string{MagicCookieKey: "wrong", "ATTNPLUG_PLUGIN_LOG_LEVEL": "debug"}, []string{
			`attnplug-backend-test: attnplug backend plugin "test", version 1.2.3, protocol version 1`,
		}},
		{"no_args", factory, nil, nil, []string{`plugin: attnplug backend plugin "test"`}},
		{"factory_fails", func(hclog.Logger) (core.Backend, error) { return nil, errors.New("no GPU") },
			[]string{"attnplug-backend-test"}, map[string]string{MagicCookieKey: MagicCookieValue}, []string{"attnplug-backend-test: no GPU\n"}},
		{"describe_fails", func(hclog.Logger) (core.Backend, error) { return &failingDescribe{}, nil },
			[]string{"attnplug-backend-x"}, nil, []string{"attnplug-backend-x: an attnplug backend plugin (describe failed: no description)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			var code int
			stdout := captureStdout(t, func() {
				code = run(testContext(t), tt.factory, tt.args, env(tt.env), &stderr)
			})
			if code != 1 {
				t.Errorf("run: got status %d, want 1", code)
			}
			if stdout != "" {
				t.Errorf("stdout: got %q, want nothing (go-plugin owns it)", stdout)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q: want it to contain %q", stderr.String(), w)
				}
			}
		})
	}
}

func TestHandshake(t *testing.T) {
	h := Handshake()
	if h.ProtocolVersion != ProtocolVersion || h.MagicCookieKey != MagicCookieKey || h.MagicCookieValue != MagicCookieValue {
		t.Errorf("Handshake: got %+v", h)
	}
	ps := VersionedPlugins(nil)
	if len(ps) != 1 {
		t.Fatalf("VersionedPlugins: got %d versions, want 1", len(ps))
	}
	if _, ok := ps[ProtocolVersion][PluginName].(*GRPCPlugin); !ok {
		t.Errorf("VersionedPlugins[%d][%q]: got %T, want *GRPCPlugin", ProtocolVersion, PluginName, ps[ProtocolVersion][PluginName])
	}
}

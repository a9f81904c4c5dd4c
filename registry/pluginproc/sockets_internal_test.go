package pluginproc

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
)

// TestRedactSockets: the paths of plugin sockets in gRPC's dial errors
// leave the text of a failure; what the error wraps stays.
func TestRedactSockets(t *testing.T) {
	inner := fmt.Errorf("%w: rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: dial unix /run/user/0/attnplug/81-2417/plugin3829104: connect: no such file or directory\"", core.ErrUnavailable)
	err := redactSockets(inner)
	if strings.Contains(err.Error(), "/plugin") || strings.Contains(err.Error(), "/run/user") || !strings.Contains(err.Error(), "dial unix [plugin socket]: connect") {
		t.Errorf("redacted: %q", err)
	}
	if !errors.Is(err, core.ErrUnavailable) {
		t.Error("the redacted error no longer wraps its sentinel")
	}
	plain := errors.New("error reading from server: EOF")
	if redactSockets(plain) != plain {
		t.Error("an error without a socket path was rewrapped")
	}
}

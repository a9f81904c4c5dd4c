package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/jsonl"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
)

// tritonRegistry is a registry without plugins: the triton rules answer,
// and under strict a name nobody serves is refused.
func tritonRegistry(t *testing.T, strict bool) *registry.Registry {
	t.Helper()
	reg, err := registry.New(testContext(t), registry.Config{PluginDirs: []string{t.TempDir()}, Platform: core.PlatformCUDA, Strict: strict,
		CallTimeout: 2 * time.Second, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

// streamLines returns n request lines, every seventh one bad in a way
// that names its line and every eleventh one for a name nobody serves.
func streamLines(n int) []string {
	modes := []string{"DECODE", "EXTEND", "TARGET_VERIFY", "IDLE"}
	lines := make([]string, n)
	for i := range lines {
		switch {
		case i%7 == 3:
			lines[i] = `{"backend":"triton","forward_mode":"SIDEWAYS"}`
		case i%11 == 5:
			lines[i] = `{"backend":"no_such_backend","forward_mode":"DECODE"}`
		default:
			lines[i] = fmt.Sprintf(`{"backend":"triton","forward_mode":%q,"seq_lens":[%d]}`, modes[i%len(modes)], 1+i%300)
		}
	}
	return lines
}

// wantStream is what Stream must write for lines: each line answered by
// reg.Dispatch on its own, in order.
func wantStream(t *testing.T, reg *registry.Registry, lines []string) (string, int) {
	t.Helper()
	var out []byte
	refused := 0
	for i, line := range lines {
		var req core.Request
		err := jsonl.DecodeRequest([]byte(line), &req)
		if err == nil {
			var a core.Answer
			if a, err = reg.Dispatch(testContext(t), &req); err == nil {
				out = jsonl.AppendAnswer(out, a)
				continue
			}
		}
		refused++
		out = jsonl.AppendError(out, i+1, err)
	}
	return string(out), refused
}

// TestStreamAnswersInOrder: a stream long enough to cross several chunks
// is answered line by line as Dispatch answers each request alone, bad
// lines and refused requests named by their line numbers and counted.
func TestStreamAnswersInOrder(t *testing.T) {
	reg := tritonRegistry(t, true)
	lines := streamLines(3*chunkLines + 17)
	want, wantRefused := wantStream(t, reg, lines)
	var out bytes.Buffer
	refused, err := Stream(testContext(t), reg, strings.NewReader(strings.Join(lines, "\n")+"\n"), &out, StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if refused != wantRefused || wantRefused == 0 {
		t.Errorf("refused %d lines, want %d (more than none)", refused, wantRefused)
	}
	if got := out.String(); got != want {
		gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("answer %d: got %s, want %s", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("got %d answer lines, want %d", len(gl), len(wl))
	}
}

// TestStreamLineLimitAndRouting: a line past MaxLine is refused and
// skipped; a request without a backend is refused unless Routed.
func TestStreamLineLimitAndRouting(t *testing.T) {
	reg := tritonRegistry(t, false)
	in := `{"backend":"triton","forward_mode":"DECODE","seq_lens":[` + strings.Repeat("1,", 100) + "1]}\n" +
		`{"forward_mode":"DECODE"}` + "\n" +
		`{"backend":"triton","forward_mode":"DECODE"}` + "\n"
	var out bytes.Buffer
	refused, err := Stream(testContext(t), reg, strings.NewReader(in), &out, StreamOptions{MaxLine: 100})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if refused != 2 || len(got) != 3 || !strings.HasPrefix(got[0], `{"error":"line 1: line too long`) || !strings.HasPrefix(got[1], `{"error":"line 2: backend: `) ||
		!strings.Contains(got[2], `"method":"MLA"`) {
		t.Fatalf("refused %d:\n%s", refused, out.String())
	}
	// Routed, the request without a backend goes to a server that routes
	// it: decode batches to triton.
	c, _ := serve(t, false, Config{Prefill: "triton", Decode: "triton"})
	out.Reset()
	refused, err = Stream(testContext(t), c, strings.NewReader(in), &out, StreamOptions{MaxLine: 100, Routed: true})
	if err != nil {
		t.Fatal(err)
	}
	got = strings.Split(strings.TrimSpace(out.String()), "\n")
	if refused != 1 || len(got) != 3 || got[1] != `{"method":"MLA","handler":"triton","plugin":"core"}` {
		t.Fatalf("routed: refused %d:\n%s", refused, out.String())
	}
}

// failingBatcher answers through reg until it has been called calls
// times, then fails.
type failingBatcher struct {
	reg   *registry.Registry
	calls int
}

var errGone = errors.New("server gone")

func (f *failingBatcher) DispatchBatch(ctx context.Context, reqs []core.Request, out []core.BatchAnswer) error {
	if f.calls == 0 {
		return errGone
	}
	f.calls--
	return f.reg.DispatchBatch(ctx, reqs, out)
}

// TestStreamStopsSayingHowFarItGot: when the Batcher fails, the answers
// written are those of the lines the error counts, and the error names
// the first line not answered, so that a caller can resume there.
func TestStreamStopsSayingHowFarItGot(t *testing.T) {
	reg := tritonRegistry(t, false)
	lines := streamLines(2*chunkLines + 5)
	for _, calls := range []int{0, 1, 2} {
		var out bytes.Buffer
		_, err := Stream(testContext(t), &failingBatcher{reg: reg, calls: calls}, strings.NewReader(strings.Join(lines, "\n")+"\n"), &out, StreamOptions{})
		if !errors.Is(err, errGone) {
			t.Fatalf("%d calls: got %v, want the Batcher's error", calls, err)
		}
		m := regexp.MustCompile(`^dispatch: server gone \((\d+) request lines answered; none from line (\d+) on\)$`).FindStringSubmatch(err.Error())
		if m == nil {
			t.Fatalf("%d calls: error %q does not say how far it got", calls, err)
		}
		answered, _ := strconv.Atoi(m[1])
		from, _ := strconv.Atoi(m[2])
		if written := strings.Count(out.String(), "\n"); written != answered || from != answered+1 || (calls > 0) != (answered > 0) {
			t.Errorf("%d calls: %d answers written, error says %d answered and none from line %d on", calls, written, answered, from)
		}
	}
}

// failingWriter fails every write.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// TestStreamEndsOnWriteErrorAndCancel: an output that fails ends the
// stream with the write error; a cancelled context ends it with ctx's.
func TestStreamEndsOnWriteErrorAndCancel(t *testing.T) {
	reg := tritonRegistry(t, false)
	in := strings.Join(streamLines(10), "\n")
	_, err := Stream(testContext(t), reg, strings.NewReader(in), failingWriter{}, StreamOptions{})
	if !errors.Is(err, io.ErrClosedPipe) || !strings.HasPrefix(err.Error(), "dispatch: write answers: ") {
		t.Errorf("failing output: got %v", err)
	}
	ctx, cancel := context.WithCancel(testContext(t))
	cancel()
	pr, pw := io.Pipe()
	defer pw.Close()
	_, err = Stream(ctx, reg, pr, io.Discard, StreamOptions{})
	if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "dispatch: ") {
		t.Errorf("cancelled: got %v", err)
	}
}

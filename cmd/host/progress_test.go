package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProgressOnlyOnATerminal: the progress line is drawn when stderr is
// a terminal (the decision injected here) and the output is not JSON;
// each step replaces the line, and done clears it. Otherwise nothing is
// written, and a nil progress may be used as one.
func TestProgressOnlyOnATerminal(t *testing.T) {
	for _, tc := range []struct {
		name     string
		terminal bool
		quiet    bool
		want     string
	}{
		{"terminal", true, false, "\r\x1b[Kattnplug bench: cold start of the plugins...\r\x1b[Kattnplug bench: (a) the rules in process...\r\x1b[K"},
		{"piped", false, false, ""},
		{"terminal, --json", true, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			e := &env{stderr: &stderr, isTerminal: func(w io.Writer) bool { return w == &stderr && tc.terminal }}
			p := newProgress(e, "attnplug bench", tc.quiet)
			if (p != nil) != (tc.want != "") {
				t.Fatalf("newProgress: %v, want a progress line: %v", p, tc.want != "")
			}
			p.Step("cold start of the plugins")
			p.Step("(a) the rules in process")
			p.Done()
			if got := stderr.String(); got != tc.want {
				t.Errorf("stderr %q, want %q", got, tc.want)
			}
		})
	}
}

// TestIsTerminal: a pseudo-terminal is a terminal; a pipe, a file,
// /dev/null and a buffer are not.
func TestIsTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for name, w := range map[string]io.Writer{"pipe": w, "file": f, "/dev/null": null, "buffer": &bytes.Buffer{}} {
		if isTerminal(w) {
			t.Errorf("%s: a terminal", name)
		}
	}
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Logf("no pseudo-terminal to check: %v", err)
		return
	}
	defer pty.Close()
	if !isTerminal(pty) {
		t.Error("/dev/ptmx: not a terminal")
	}
}

// TestBenchQuietWhenPiped: attnplug bench with its stderr piped draws no
// progress line, as text or JSON.
func TestBenchQuietWhenPiped(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs attnplug bench twice, which measures for seconds (make test runs it)")
	}
	res := host(t, bins, "", "bench", "--passes", "20", "--rpc-passes", "2", "--min-time", "1ms", "--stream", "0")
	if res.code != 0 || !strings.Contains(res.stdout, "(c) production") {
		t.Fatalf("exit %d:\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	if strings.ContainsAny(res.stderr, "\r\x1b") {
		t.Errorf("a progress line on a pipe: %q", res.stderr)
	}
}

package reference

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/attnplug/attnplug/internal/modroot"
)

//go:embed oracle.py
var oracleSource []byte

// Answer is the reference's answer to one request.
type Answer struct {
	Method  string `json:"method"`
	Handler string `json:"handler"`
	Error   string `json:"error"`
}

// Oracle evaluates requests with the reference's Python code.
type Oracle struct {
	python    string
	reference string
	script    string
}

// ErrNotAvailable is returned by Find when python3 or the reference file is
// missing.
var ErrNotAvailable = errors.New("reference oracle not available")

// referenceName is the reference file's name.
const referenceName = "attention_backend_handler.py.txt"

// findReference returns shared/reference/<referenceName> of the nearest
// directory above root that has it (the repository's parent for a clone
// beside shared/, further up for a worktree), or "".
func findReference(root string) string {
	for d := filepath.Dir(root); ; d = filepath.Dir(d) {
		p := filepath.Join(d, "shared", "reference", referenceName)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

// Find locates python3 and the reference file: $ATTNPLUG_REFERENCE, else
// shared/reference/attention_backend_handler.py.txt beside the repository
// or in a directory above it. dir is a directory inside
// the repository; the script is written to tmp.
func Find(dir, tmp string) (*Oracle, error) {
	python, err := exec.LookPath("python3")
	if err != nil {
		return nil, fmt.Errorf("%w: python3 not found", ErrNotAvailable)
	}
	ref := os.Getenv("ATTNPLUG_REFERENCE")
	if ref == "" {
		root, err := modroot.Find(dir)
		if err != nil {
			return nil, err
		}
		if ref = findReference(root); ref == "" {
			return nil, fmt.Errorf("%w: no %s in a shared/reference directory beside or above %s, and $ATTNPLUG_REFERENCE is not set", ErrNotAvailable, referenceName, root)
		}
	}
	if _, err := os.Stat(ref); err != nil {
		return nil, fmt.Errorf("%w: reference file: %v", ErrNotAvailable, err)
	}
	script := filepath.Join(tmp, "oracle.py")
	if err := os.WriteFile(script, oracleSource, 0o600); err != nil {
		return nil, err
	}
	return &Oracle{python: python, reference: ref, script: script}, nil
}

// Evaluate returns the reference's answer to every line of requests (JSON
// Lines), in order. defaultPlatform stands for a request without one.
func (o *Oracle) Evaluate(ctx context.Context, requests []byte, defaultPlatform string) ([]Answer, error) {
	out, err := o.Output(ctx, requests, defaultPlatform)
	if err != nil {
		return nil, err
	}
	var answers []Answer
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var a Answer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			return nil, fmt.Errorf("oracle answer %d: %w", len(answers)+1, err)
		}
		answers = append(answers, a)
	}
	return answers, sc.Err()
}

// Output runs the reference's Python code on requests (JSON Lines) and
// returns what it wrote: one JSON answer per line. It is Evaluate without
// the decoding, for timing the Python process alone.
func (o *Oracle) Output(ctx context.Context, requests []byte, defaultPlatform string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, o.python, o.script, o.reference, defaultPlatform)
	cmd.Stdin = bytes.NewReader(requests)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("oracle: %w: %s", err, stderr.String())
	}
	return out, nil
}

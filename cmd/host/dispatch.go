package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/jsonl"
	"github.com/attnplug/attnplug/registry"
)

func runDispatch(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("dispatch", flag.ContinueOnError)
	var h hostFlags
	h.register(fs)
	maxLine := fs.Int("max-line-bytes", jsonl.MaxLineBytes, "longest request line accepted; longer lines are refused")
	if err := parseFlags(fs, e, args, "attnplug dispatch [flags] < requests.jsonl > answers.jsonl"); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Sprintf("dispatch: unexpected argument %q (requests come on stdin)", fs.Arg(0))}
	}
	logger, err := h.logger(e)
	if err != nil {
		return err
	}
	reg, err := h.openRegistry(ctx, logger)
	if err != nil {
		return err
	}
	defer reg.Close()
	refused, err := dispatchStream(ctx, reg, e.stdin, e.stdout, *maxLine)
	if err != nil {
		return err
	}
	if refused > 0 {
		return &refusedError{refused}
	}
	return nil
}

// inputLine is one line read from the request stream.
type inputLine struct {
	data []byte
	n    int
	err  error
}

// readLines sends every line of r to out, then closes it. It stops early
// when ctx ends.
func readLines(ctx context.Context, r *jsonl.Reader, out chan<- inputLine) {
	defer close(out)
	for {
		line, n, err := r.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		l := inputLine{n: n, err: err}
		if err == nil {
			l.data = bytes.Clone(line)
		}
		select {
		case out <- l:
		case <-ctx.Done():
			return
		}
		if err != nil && n == 0 {
			return // a read error, not a bad line
		}
	}
}

// dispatchStream answers every request line of in on out, in order, and
// returns how many lines were refused. An answer is flushed as soon as no
// further input is waiting.
func dispatchStream(ctx context.Context, reg *registry.Registry, in io.Reader, out io.Writer, maxLine int) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lines := make(chan inputLine, 256)
	go readLines(ctx, jsonl.NewReader(in, maxLine), lines)

	w := bufio.NewWriterSize(out, 64<<10)
	refused := 0
	var req core.Request
	var buf []byte
	for {
		var l inputLine
		var ok bool
		select {
		case l, ok = <-lines:
		case <-ctx.Done():
			w.Flush()
			return refused, fmt.Errorf("dispatch: %w", ctx.Err())
		}
		if !ok {
			break
		}
		if l.err != nil && l.n == 0 {
			w.Flush()
			return refused, fmt.Errorf("dispatch: read requests: %w", l.err)
		}
		buf = buf[:0]
		if err := decideLine(ctx, reg, l, &req, &buf); err != nil {
			if ctx.Err() != nil {
				w.Flush()
				return refused, fmt.Errorf("dispatch: %w", ctx.Err())
			}
			refused++
			buf = jsonl.AppendError(buf[:0], l.n, err)
		}
		if _, err := w.Write(buf); err != nil {
			return refused, fmt.Errorf("dispatch: write answers: %w", err)
		}
		if len(lines) == 0 {
			if err := w.Flush(); err != nil {
				return refused, fmt.Errorf("dispatch: write answers: %w", err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		return refused, fmt.Errorf("dispatch: write answers: %w", err)
	}
	return refused, nil
}

// decideLine appends the answer of one line to buf, or returns why it has
// none.
func decideLine(ctx context.Context, reg *registry.Registry, l inputLine, req *core.Request, buf *[]byte) error {
	if l.err != nil {
		return l.err
	}
	if len(bytes.TrimSpace(l.data)) == 0 {
		return errors.New("empty line (want one JSON request object per line)")
	}
	if err := jsonl.DecodeRequest(l.data, req); err != nil {
		return err
	}
	a, err := reg.Dispatch(ctx, req)
	if err != nil {
		return err
	}
	*buf = jsonl.AppendAnswer(*buf, a)
	return nil
}

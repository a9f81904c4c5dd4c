package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/jsonl"
)

// Batcher answers batches of requests: a *registry.Registry in process,
// or a *client.Client (package engine/client) of a running attnplug
// serve.
type Batcher interface {
	DispatchBatch(ctx context.Context, reqs []core.Request, out []core.BatchAnswer) error
}

// Chunks bound what the pipeline holds: a chunk is at most chunkLines
// requests or chunkBytes of input lines, and at most pipelineDepth chunks
// wait between the reader and the dispatcher.
const (
	chunkLines    = 1024
	chunkBytes    = 8 << 20
	pipelineDepth = 2
)

// chunk is a run of consecutive input lines, decoded.
type chunk struct {
	items []item
	reqs  []core.Request // the valid requests, in order
	out   []core.BatchAnswer
	err   error // a read error after the items: the stream ends
}

// item is one input line: its request index in reqs, or why it has none.
type item struct {
	n   int
	req int // index into reqs; -1 when err is set
	err error
}

// readChunks decodes the lines of r into chunks. It sends a chunk when it
// is full or when no more input is already waiting: it never waits for
// input to fill a chunk.
func readChunks(ctx context.Context, r *jsonl.Reader, routed bool, out chan<- *chunk, free <-chan *chunk) {
	defer close(out)
	for {
		var c *chunk
		select {
		case c = <-free:
		default:
			c = &chunk{}
		}
		c.items, c.reqs, c.err = c.items[:0], c.reqs[:0], nil
		bytesIn := 0
		for len(c.items) < chunkLines && bytesIn < chunkBytes {
			line, n, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil && n == 0 {
				c.err = err
				break
			}
			bytesIn += len(line)
			it := item{n: n, req: -1, err: err}
			if err == nil {
				it.err = decodeInto(line, c, routed)
				if it.err == nil {
					it.req = len(c.reqs) - 1
				}
			}
			c.items = append(c.items, it)
			if !r.Buffered() {
				break
			}
		}
		if len(c.items) == 0 && c.err == nil {
			return // end of input
		}
		select {
		case out <- c:
		case <-ctx.Done():
			return
		}
		if c.err != nil {
			return
		}
	}
}

// decodeInto decodes line as the next request of c, reusing the slices of
// the request that stood there in an earlier use of the chunk.
func decodeInto(line []byte, c *chunk, routed bool) error {
	if len(c.reqs) < cap(c.reqs) {
		c.reqs = c.reqs[:len(c.reqs)+1]
	} else {
		c.reqs = append(c.reqs, core.Request{})
	}
	req := &c.reqs[len(c.reqs)-1]
	decode := jsonl.DecodeRequest
	if routed {
		decode = jsonl.DecodeRoutedRequest
	}
	if err := decode(line, req); err != nil {
		c.reqs = c.reqs[:len(c.reqs)-1]
		return err
	}
	return nil
}

// StreamOptions are how Stream reads its input.
type StreamOptions struct {
	// MaxLine is the longest request line accepted (jsonl.NewReader's
	// limit; 0: jsonl.MaxLineBytes).
	MaxLine int
	// Routed lets requests leave the backend to the server (a Client of
	// attnplug serve routes them as sglang's hybrid backend does).
	Routed bool
}

// Stream answers every JSON Lines request of in on out, in order, as
// attnplug dispatch does, and returns how many lines were refused (a line
// that does not decode, or a request d did not decide, answered with its
// error). Lines already waiting are decided together, one DispatchBatch
// call for a chunk of them (one call per plugin for what the answer
// caches do not hold); the answers are flushed as soon as no further
// input is waiting. A stream that ends before its input does (d failed,
// ctx ended, in or out failed) returns an error that says how many lines
// were answered and from which line on none was.
func Stream(ctx context.Context, d Batcher, in io.Reader, out io.Writer, o StreamOptions) (refused int, err error) {
	maxLine, routed := o.MaxLine, o.Routed
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chunks := make(chan *chunk, pipelineDepth)
	free := make(chan *chunk, pipelineDepth+1)
	go readChunks(ctx, jsonl.NewReader(in, maxLine), routed, chunks, free)

	w := bufio.NewWriterSize(out, 256<<10)
	answered := 0
	// stopped is the error of a stream that ends before its input does:
	// it says how many lines were answered (their answers are written)
	// and from which line on none was, so that a caller can resume.
	stopped := func(c *chunk, err error) error {
		w.Flush()
		if c == nil || len(c.items) == 0 {
			return fmt.Errorf("dispatch: %w (%d request lines answered)", err, answered)
		}
		return fmt.Errorf("dispatch: %w (%d request lines answered; none from line %d on)", err, answered, c.items[0].n)
	}
	var buf []byte
	for {
		var c *chunk
		var ok bool
		select {
		case c, ok = <-chunks:
		case <-ctx.Done():
			return refused, stopped(nil, ctx.Err())
		}
		if !ok {
			break
		}
		if cap(c.out) < len(c.reqs) {
			c.out = make([]core.BatchAnswer, len(c.reqs))
		}
		c.out = c.out[:len(c.reqs)]
		if err := d.DispatchBatch(ctx, c.reqs, c.out); err != nil {
			return refused, stopped(c, err)
		}
		buf = buf[:0]
		for _, it := range c.items {
			err := it.err
			if err == nil {
				res := c.out[it.req]
				if err = res.Err; err == nil {
					buf = jsonl.AppendAnswer(buf, res.Answer)
					continue
				}
			}
			refused++
			buf = jsonl.AppendError(buf, it.n, err)
		}
		if _, err := w.Write(buf); err != nil {
			return refused, fmt.Errorf("dispatch: write answers: %w", err)
		}
		answered += len(c.items)
		readErr := c.err
		select {
		case free <- c:
		default:
		}
		if readErr != nil {
			w.Flush()
			return refused, fmt.Errorf("dispatch: read requests: %w", readErr)
		}
		if len(chunks) == 0 {
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

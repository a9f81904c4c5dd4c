package jsonl

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// MaxLineBytes is the default longest input line. A longer line is
// refused with an error and skipped without being held in memory.
const MaxLineBytes = 4 << 20

// errLineTooLong is the error of a line longer than the Reader's limit.
var errLineTooLong = errors.New("line too long")

// Reader splits a stream into lines of at most a limit of bytes.
type Reader struct {
	r     *bufio.Reader
	limit int
	buf   []byte
	line  int
}

// NewReader returns a Reader of r with lines of at most limit bytes
// (MaxLineBytes when limit <= 0).
func NewReader(r io.Reader, limit int) *Reader {
	if limit <= 0 {
		limit = MaxLineBytes
	}
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), limit: limit}
}

// Next returns the next line without its line ending, and its 1-based
// number. The line is valid until the next call. A line past the limit
// returns its number with a non-nil error (and is skipped); the stream's
// end returns io.EOF.
func (r *Reader) Next() (line []byte, n int, err error) {
	r.buf = r.buf[:0]
	tooLong := false
	for {
		chunk, err := r.r.ReadSlice('\n')
		if !tooLong {
			if len(r.buf)+len(chunk) > r.limit+2 {
				tooLong = true
				r.buf = r.buf[:0]
			} else {
				r.buf = append(r.buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && (err != io.EOF || (len(r.buf) == 0 && !tooLong)) {
			if err == io.EOF {
				return nil, r.line, io.EOF
			}
			return nil, r.line, err
		}
		break
	}
	r.line++
	if tooLong {
		return nil, r.line, fmt.Errorf("%w: longer than the limit of %d bytes", errLineTooLong, r.limit)
	}
	line = bytes.TrimSuffix(r.buf, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) > r.limit {
		return nil, r.line, fmt.Errorf("%w: longer than the limit of %d bytes", errLineTooLong, r.limit)
	}
	return line, r.line, nil
}

// Buffered reports whether input is already waiting to be read, so that a
// writer may delay a flush.
func (r *Reader) Buffered() bool { return r.r.Buffered() > 0 }

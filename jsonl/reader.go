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

// MaxLimit is the largest line limit a Reader takes (1 GiB): NewReader
// lowers a larger one to it, and the commands refuse a larger
// --max-line-bytes.
const MaxLimit = 1 << 30

// errLineTooLong is the error of a line longer than the Reader's limit.
var errLineTooLong = errors.New("line too long")

// bom is the UTF-8 byte order mark, skipped at the start of a stream.
var bom = []byte{0xef, 0xbb, 0xbf}

// Reader splits a stream into lines of at most a limit of bytes. It skips
// a UTF-8 byte order mark at the start of the stream and lines that hold
// only white space (blank lines), counting them in the line numbers.
type Reader struct {
	r     *bufio.Reader
	limit int
	buf   []byte
	line  int
}

// NewReader returns a Reader of r with lines of at most limit bytes
// (MaxLineBytes when limit <= 0, MaxLimit when limit is larger).
func NewReader(r io.Reader, limit int) *Reader {
	if limit <= 0 {
		limit = MaxLineBytes
	}
	limit = min(limit, MaxLimit)
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), limit: limit}
}

// Next returns the next line that is not blank, without its line ending,
// and its 1-based number. The line is valid until the next call. A line
// past the limit returns its number with a non-nil error (and is skipped);
// the stream's end returns io.EOF, and so does every call after it.
func (r *Reader) Next() (line []byte, n int, err error) {
	for {
		line, err := r.next()
		if err == nil && len(bytes.TrimLeft(line, " \t\r")) == 0 {
			continue // blank
		}
		return line, r.line, err
	}
}

// next reads one line, blank or not, and counts it.
func (r *Reader) next() ([]byte, error) {
	r.buf = r.buf[:0]
	read := 0 // bytes of this line read so far, kept or not
	tooLong := false
	for {
		chunk, err := r.r.ReadSlice('\n')
		read += len(chunk)
		if !tooLong {
			// The limit plus a line ending of up to two bytes; a sum of
			// lengths held in memory cannot overflow.
			if n := len(r.buf) + len(chunk); n > 2 && n-2 > r.limit {
				tooLong = true
				r.buf = r.buf[:0]
			} else {
				r.buf = r.grow(r.buf, chunk)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && (err != io.EOF || read == 0) {
			return nil, err
		}
		break
	}
	r.line++
	if tooLong {
		return nil, fmt.Errorf("%w: longer than the limit of %d bytes", errLineTooLong, r.limit)
	}
	line := bytes.TrimSuffix(r.buf, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if r.line == 1 {
		line = bytes.TrimPrefix(line, bom)
	}
	if len(line) > r.limit {
		return nil, fmt.Errorf("%w: longer than the limit of %d bytes", errLineTooLong, r.limit)
	}
	return line, nil
}

// grow is append that doubles the capacity of buf, up to the limit and a
// line ending: a long line leaves less garbage behind than append's
// smaller steps.
func (r *Reader) grow(buf, b []byte) []byte {
	if n := len(buf) + len(b); n > cap(buf) {
		grown := make([]byte, len(buf), max(n, min(2*cap(buf), r.limit+2)))
		copy(grown, buf)
		buf = grown
	}
	return append(buf, b...)
}

// Buffered reports whether input is already waiting to be read, so that a
// writer may delay a flush.
func (r *Reader) Buffered() bool { return r.r.Buffered() > 0 }

package jsonl

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"testing/iotest"
)

type line struct {
	text    string
	n       int
	tooLong bool
}

// readAll reads r to its end, and returns the lines and the final error.
func readAll(t *testing.T, r *Reader) ([]line, error) {
	t.Helper()
	var out []line
	for i := 0; i < 1000; i++ {
		b, n, err := r.Next()
		switch {
		case err == nil:
			out = append(out, line{text: string(b), n: n})
		case errors.Is(err, errLineTooLong):
			if b != nil {
				t.Errorf("line %d too long: got %d bytes with the error, want none", n, len(b))
			}
			out = append(out, line{n: n, tooLong: true})
		default:
			return out, err
		}
	}
	t.Fatal("Reader never ended")
	return nil, nil
}

func TestReader(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		limit int
		want  []line
	}{
		{"lines", "a\nbb\nccc\n", 0, []line{{"a", 1, false}, {"bb", 2, false}, {"ccc", 3, false}}},
		{"crlf", "a\r\nb\r\n", 0, []line{{"a", 1, false}, {"b", 2, false}}},
		{"last_line_without_newline", "a\nb", 0, []line{{"a", 1, false}, {"b", 2, false}}},
		{"last_line_cr_without_newline", "a\nb\r", 0, []line{{"a", 1, false}, {"b", 2, false}}},
		{"blank_lines_skipped_and_counted", "\n\na\n\r\n \t\nb\n", 0, []line{{"a", 3, false}, {"b", 6, false}}},
		{"only_blank_lines", "\n \n\r\n", 0, nil},
		{"bom_skipped", "\xef\xbb\xbfa\nb\n", 0, []line{{"a", 1, false}, {"b", 2, false}}},
		{"bom_then_blank", "\xef\xbb\xbf\r\na\n", 0, []line{{"a", 2, false}}},
		{"bom_only_first_line", "a\n\xef\xbb\xbfb\n", 0, []line{{"a", 1, false}, {"\xef\xbb\xbfb", 2, false}}},
		{"empty_input", "", 0, nil},
		{"only_cr_kept_inside", "a\rb\n", 0, []line{{"a\rb", 1, false}}},
		{"exactly_at_limit", "abcd\nabcd\r\n", 4, []line{{"abcd", 1, false}, {"abcd", 2, false}}},
		{"one_over_limit", "abcde\nab\n", 4, []line{{"", 1, true}, {"ab", 2, false}}},
		{"one_over_limit_crlf", "abcde\r\nab\n", 4, []line{{"", 1, true}, {"ab", 2, false}}},
		{"one_over_limit_at_eof", "ab\nabcde", 4, []line{{"ab", 1, false}, {"", 2, true}}},
		{"limit_plus_2_over_limit", "abcdef\nx", 4, []line{{"", 1, true}, {"x", 2, false}}},
		{"long_line_then_more", strings.Repeat("x", 200<<10) + "\nok\n" + strings.Repeat("y", 200<<10) + "\nend", 1024,
			[]line{{"", 1, true}, {"ok", 2, false}, {"", 3, true}, {"end", 4, false}}},
		{"line_larger_than_buffer_under_limit", strings.Repeat("z", 150<<10) + "\nok\n", 200 << 10,
			[]line{{strings.Repeat("z", 150<<10), 1, false}, {"ok", 2, false}}},
	}
	for _, tt := range tests {
		for _, wrap := range []struct {
			name string
			f    func(io.Reader) io.Reader
		}{
			{"whole", func(r io.Reader) io.Reader { return r }},
			{"one_byte_reads", iotest.OneByteReader},
			{"half_reads", iotest.HalfReader},
		} {
			if wrap.name == "one_byte_reads" && len(tt.in) > 1<<16 {
				continue
			}
			t.Run(tt.name+"/"+wrap.name, func(t *testing.T) {
				r := NewReader(wrap.f(strings.NewReader(tt.in)), tt.limit)
				got, err := readAll(t, r)
				if err != io.EOF {
					t.Errorf("final error: got %v, want io.EOF", err)
				}
				if len(got) != len(tt.want) {
					t.Fatalf("got %d lines, want %d", len(got), len(tt.want))
				}
				for i := range got {
					if got[i] != tt.want[i] {
						g, w := got[i], tt.want[i]
						g.text, w.text = shortText(g.text), shortText(w.text)
						t.Errorf("line %d: got %+v, want %+v", i, g, w)
					}
				}
				// After the end, the end again.
				if _, _, err := r.Next(); err != io.EOF {
					t.Errorf("Next after the end: got %v, want io.EOF", err)
				}
			})
		}
	}
}

func shortText(s string) string {
	if len(s) > 20 {
		return s[:10] + "..." + s[len(s)-5:]
	}
	return s
}

func TestReaderTooLongMessage(t *testing.T) {
	r := NewReader(strings.NewReader("abcdef\n"), 4)
	_, n, err := r.Next()
	if want := "line too long: longer than the limit of 4 bytes"; err == nil || err.Error() != want || n != 1 {
		t.Errorf("Next: got line %d, %v, want line 1, %q", n, err, want)
	}
}

// TestReaderHugeLineBounded reads a 10 MB line with a small limit: it is
// reported with its number, skipped, the next lines are read, and the
// Reader never holds more than about the limit.
func TestReaderHugeLineBounded(t *testing.T) {
	const limit = 4096
	huge := bytes.Repeat([]byte("x"), 10<<20)
	in := io.MultiReader(strings.NewReader("first\n"), bytes.NewReader(huge), strings.NewReader("\nsecond\nthird"))
	r := NewReader(in, limit)
	want := []line{{"first", 1, false}, {"", 2, true}, {"second", 3, false}, {"third", 4, false}}
	for i, w := range want {
		b, n, err := r.Next()
		got := line{text: string(b), n: n, tooLong: errors.Is(err, errLineTooLong)}
		if err != nil && !got.tooLong {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if got != w {
			t.Errorf("line %d: got %+v, want %+v", i+1, got, w)
		}
		if c := cap(r.buf); c >= 2*limit {
			t.Errorf("after line %d: buffer capacity %d, want below %d", i+1, c, 2*limit)
		}
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Errorf("end: got %v, want io.EOF", err)
	}
}

func TestReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name     string
		in       io.Reader
		want     []line
		wantLine int
	}{
		{"error_at_once", iotest.ErrReader(boom), nil, 0},
		{"error_after_lines", io.MultiReader(strings.NewReader("a\nb\n"), iotest.ErrReader(boom)), []line{{"a", 1, false}, {"b", 2, false}}, 2},
		{"error_mid_line", io.MultiReader(strings.NewReader("a\npartial"), iotest.ErrReader(boom)), []line{{"a", 1, false}}, 1},
		{"error_mid_long_line", io.MultiReader(strings.NewReader("a\n"+strings.Repeat("x", 100)), iotest.ErrReader(boom)), []line{{"a", 1, false}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(tt.in, 10)
			var got []line
			for {
				b, n, err := r.Next()
				if err != nil {
					if !errors.Is(err, boom) {
						t.Fatalf("Next: got %v, want boom", err)
					}
					if n != tt.wantLine {
						t.Errorf("line number with the error: got %d, want %d", n, tt.wantLine)
					}
					break
				}
				got = append(got, line{text: string(b), n: n})
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got lines %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("line %d: got %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestReaderBuffered(t *testing.T) {
	r := NewReader(strings.NewReader("a\nb\n"), 0)
	if r.Buffered() {
		t.Errorf("before reading: got Buffered true, want false")
	}
	if _, _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if !r.Buffered() {
		t.Errorf("after the first of two lines: got Buffered false, want true")
	}
	if _, _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if r.Buffered() {
		t.Errorf("after the last line: got Buffered true, want false")
	}
}

// TestReaderHugeLimit is the endless output of a limit near the largest
// int: every limit a caller can pass reads the stream once and ends.
func TestReaderHugeLimit(t *testing.T) {
	for _, limit := range []int{math.MaxInt, math.MaxInt - 1, math.MaxInt - 2, math.MaxInt / 2, MaxLimit, MaxLimit + 1} {
		for _, in := range []string{"", "{}", "{}\n", "a\nbb\n\nccc"} {
			r := NewReader(strings.NewReader(in), limit)
			got, err := readAll(t, r)
			if err != io.EOF {
				t.Errorf("limit %d, input %q: final error %v, want io.EOF", limit, in, err)
			}
			want := 0
			for _, l := range strings.Split(in, "\n") {
				if l != "" {
					want++
				}
			}
			if len(got) != want {
				t.Errorf("limit %d, input %q: got %d lines %+v, want %d", limit, in, len(got), got, want)
			}
			for _, l := range got {
				if l.tooLong {
					t.Errorf("limit %d, input %q: line %d reported too long", limit, in, l.n)
				}
			}
		}
	}
}

// TestReaderNoPhantomLines: at the end of the stream, after a line too
// long or not, Next reports io.EOF and no further line, however often it
// is called.
func TestReaderNoPhantomLines(t *testing.T) {
	for _, in := range []string{"abcdefgh", "abcdefgh\n", "ab\nabcdefgh", "abcdefgh\r\n"} {
		r := NewReader(strings.NewReader(in), 4)
		got, err := readAll(t, r)
		if err != io.EOF || len(got) == 0 || !got[len(got)-1].tooLong {
			t.Fatalf("input %q: got %+v, %v; want the last line too long, then io.EOF", in, got, err)
		}
		for i := 0; i < 3; i++ {
			if b, n, err := r.Next(); err != io.EOF {
				t.Errorf("input %q: Next after the end: got %q, line %d, %v; want io.EOF", in, b, n, err)
			}
		}
	}
}

func TestNewReaderDefaultLimit(t *testing.T) {
	for _, limit := range []int{0, -1} {
		if r := NewReader(strings.NewReader(""), limit); r.limit != MaxLineBytes {
			t.Errorf("NewReader(limit %d): got limit %d, want MaxLineBytes %d", limit, r.limit, MaxLineBytes)
		}
	}
	for _, limit := range []int{MaxLimit + 1, math.MaxInt} {
		if r := NewReader(strings.NewReader(""), limit); r.limit != MaxLimit {
			t.Errorf("NewReader(limit %d): got limit %d, want MaxLimit %d", limit, r.limit, MaxLimit)
		}
	}
}

// FuzzReader: whatever the input and the limit, the Reader ends, reports
// no more lines than the input has, numbers them in order, and returns no
// line longer than its limit.
func FuzzReader(f *testing.F) {
	f.Add([]byte("{}\n{}"), 0)
	f.Add([]byte("\xef\xbb\xbf{}\r\n\n  \nabc"), 2)
	f.Add([]byte("abcdef"), math.MaxInt)
	f.Fuzz(func(t *testing.T, in []byte, limit int) {
		r := NewReader(bytes.NewReader(in), limit)
		max := bytes.Count(in, []byte("\n")) + 1
		last := 0
		for i := 0; ; i++ {
			if i > max {
				t.Fatalf("more than %d lines from %d newlines", max, max-1)
			}
			b, n, err := r.Next()
			if err == io.EOF {
				return
			}
			if n <= last || n > max {
				t.Fatalf("line number %d after %d (at most %d)", n, last, max)
			}
			last = n
			if err == nil && len(b) > r.limit {
				t.Fatalf("line %d of %d bytes, limit %d", n, len(b), r.limit)
			}
		}
	})
}

package shm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	return len(ents)
}

func shmFiles(t *testing.T) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(DefaultDir, filePrefix+"*"))
	return m
}

func TestSegmentRoundTrip(t *testing.T) {
	for _, kind := range []string{"memfd", "file"} {
		t.Run(kind, func(t *testing.T) {
			if kind == "file" {
				if _, err := os.Stat(DefaultDir); err != nil {
					t.Skip("no", DefaultDir)
				}
			}
			fds := countFDs(t)
			before := len(shmFiles(t))
			var s *Segment
			var err error
			if kind == "memfd" {
				s, err = Create(1 << 20)
			} else {
				s, err = CreateFile("", 1<<20)
			}
			if err != nil {
				t.Fatal(err)
			}
			copy(s.Bytes(), "hello from the host")
			m, err := Open(s.Path(), s.Size())
			if err != nil {
				t.Fatal(err)
			}
			if got := string(m.Bytes()[:19]); got != "hello from the host" {
				t.Errorf("peer reads %q", got)
			}
			copy(m.Bytes()[1000:], "answer")
			if got := string(s.Bytes()[1000:1006]); got != "answer" {
				t.Errorf("host reads %q", got)
			}
			if err := m.Close(); err != nil {
				t.Error(err)
			}
			if err := s.Close(); err != nil {
				t.Error(err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if got := countFDs(t); got != fds {
				t.Errorf("descriptors: %d before, %d after", fds, got)
			}
			if got := len(shmFiles(t)); got != before {
				t.Errorf("%s files: %d before, %d after", DefaultDir, before, got)
			}
			if _, err := Open(s.Path(), 1<<20); err == nil && kind == "file" {
				t.Error("Open after Close: got nil error")
			}
		})
	}
}

func TestOpenRefuses(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/etc/passwd", "not a shared-memory segment"},
		{"/dev/shm/other", "not a shared-memory segment"},
		{"/proc/1/fd/x", "not a shared-memory segment"},
		{"/proc/self/fd/0/../../..", "not a shared-memory segment"},
	} {
		if _, err := Open(tc.path, 16); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q): got %v, want %q", tc.path, err, tc.want)
		}
	}
	s, err := Create(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Open(s.Path(), 8192); err == nil || !strings.Contains(err.Error(), "has 4096 bytes, want 8192") {
		t.Errorf("Open past the end: got %v", err)
	}
	for _, n := range []int64{0, -1, MaxSize + 1} {
		if _, err := Create(n); err == nil {
			t.Errorf("Create(%d): got nil error", n)
		}
	}
}

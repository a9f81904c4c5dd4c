package shm

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxSize is the largest segment Create and Open accept (64 GiB).
const MaxSize = 64 << 30

// DefaultDir is where CreateFile puts its files.
const DefaultDir = "/dev/shm"

// filePrefix starts the name of every file CreateFile makes.
const filePrefix = "attnplug-"

// Segment is shared memory the calling process owns, mapped read-write.
// It is not safe for concurrent Close.
type Segment struct {
	f    *os.File
	mem  []byte
	path string
	file bool // a named file to unlink at Close
}

// Create returns a new segment of size bytes: a memfd, or a /dev/shm file
// when the kernel has no memfd_create.
func Create(size int64) (*Segment, error) {
	if err := checkSize(size); err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("attnplug-tensors", unix.MFD_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			return CreateFile(DefaultDir, size)
		}
		return nil, fmt.Errorf("shm: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "memfd:attnplug-tensors")
	s := &Segment{f: f, path: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd)}
	if err := s.mapFile(size); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

// CreateFile returns a new segment of size bytes backed by a file of a
// random name in dir (DefaultDir when empty), created with O_EXCL and mode
// 0600; Close unlinks it.
func CreateFile(dir string, size int64) (*Segment, error) {
	if err := checkSize(size); err != nil {
		return nil, err
	}
	if dir == "" {
		dir = DefaultDir
	}
	var rnd [12]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("shm: random name: %w", err)
	}
	path := filepath.Join(dir, filePrefix+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	s := &Segment{f: f, path: path, file: true}
	if err := s.mapFile(size); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return s, nil
}

func checkSize(size int64) error {
	if size <= 0 || size > MaxSize {
		return fmt.Errorf("shm: size %d is out of [1, %d]", size, int64(MaxSize))
	}
	return nil
}

func (s *Segment) mapFile(size int64) error {
	if err := s.f.Truncate(size); err != nil {
		return fmt.Errorf("shm: size the segment: %w", err)
	}
	mem, err := unix.Mmap(int(s.f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("shm: mmap: %w", err)
	}
	s.mem = mem
	return nil
}

// Bytes returns the mapped memory; it is invalid after Close.
func (s *Segment) Bytes() []byte { return s.mem }

// Size returns the segment's size in bytes.
func (s *Segment) Size() int64 { return int64(len(s.mem)) }

// Path returns what another process opens to map the segment.
func (s *Segment) Path() string { return s.path }

// Close unmaps the segment, closes its descriptor and, for a file, unlinks
// it. It is idempotent.
func (s *Segment) Close() error {
	var errs []error
	if s.mem != nil {
		errs = append(errs, unix.Munmap(s.mem))
		s.mem = nil
	}
	if s.f != nil {
		errs = append(errs, s.f.Close())
		s.f = nil
		if s.file {
			if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Mapping is a segment another process created, mapped by Open.
type Mapping struct {
	mem []byte
}

// procFD matches the path of a memfd seen through /proc.
var procFD = regexp.MustCompile(`^/proc/[0-9]+/fd/[0-9]+$`)

// CheckPath reports whether path names a segment: a /proc/<pid>/fd/<n>
// descriptor, or a file made by CreateFile in DefaultDir. Open refuses
// anything else, so that a request cannot make a plugin map other files.
func CheckPath(path string) error {
	if procFD.MatchString(path) {
		return nil
	}
	if filepath.Dir(path) == DefaultDir && strings.HasPrefix(filepath.Base(path), filePrefix) {
		return nil
	}
	return fmt.Errorf("shm: %q is not a shared-memory segment (want /proc/<pid>/fd/<n> or %s/%s*)", path, DefaultDir, filePrefix)
}

// Open maps the first size bytes of the segment at path read-write. The
// descriptor is closed at once: the mapping keeps the memory alive.
func Open(path string, size int64) (*Mapping, error) {
	if err := checkSize(size); err != nil {
		return nil, err
	}
	if err := CheckPath(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("shm: %s is not a regular file", path)
	}
	if st.Size() < size {
		return nil, fmt.Errorf("shm: %s has %d bytes, want %d", path, st.Size(), size)
	}
	// MAP_POPULATE maps every page at once: the host has written them all,
	// and faulting them in one by one costs more than the kernel's read.
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap %s: %w", path, err)
	}
	return &Mapping{mem: mem}, nil
}

// Bytes returns the mapped memory; it is invalid after Close.
func (m *Mapping) Bytes() []byte { return m.mem }

// Close unmaps the memory; it is idempotent.
func (m *Mapping) Close() error {
	if m.mem == nil {
		return nil
	}
	err := unix.Munmap(m.mem)
	m.mem = nil
	return err
}

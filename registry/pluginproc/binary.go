package pluginproc

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// verifiedBinary is an open descriptor of a plugin binary and the SHA-256
// of its bytes: every start of the plugin runs that descriptor
// (wire.LaunchConfig.File), so that what runs is exactly what was hashed,
// described, checked against the lock and accepted by a reload. A file
// put at the path since (a hot swap that a reload refused, a binary
// replaced without a reload) is never run in its place; a file changed in
// place, whose bytes are gone, is hashed again and refused unless its
// bytes are still the accepted ones.
type verifiedBinary struct {
	path   string
	sha256 string

	mu     sync.Mutex
	f      *os.File // nil once closed
	id     string   // the descriptor's identity when its bytes were hashed
	closed bool
}

// ErrBinaryChanged marks a plugin binary whose accepted bytes are gone: the
// file was changed in place since it was verified. The plugin is not
// started; a reload reads the new file.
var ErrBinaryChanged = errors.New("plugin binary changed in place since it was verified")

// openBinary opens the binary at path and hashes it: by the hash index of
// the description cache when the descriptor's identity is the one indexed
// (a start reads no binary it hashed before), else by reading the
// descriptor.
func (c descCache) openBinary(path string) (*verifiedBinary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	id := statIdentity(st)
	var index string
	if c.dir != "" && id != "" {
		index = c.hashFile(path)
		if data, err := os.ReadFile(index); err == nil {
			var e hashEntry
			if json.Unmarshal(data, &e) == nil && e.Path == path && e.Stat == id && len(e.SHA256) == 64 {
				c.touch(index, time.Now())
				return &verifiedBinary{path: path, sha256: e.SHA256, f: f, id: id}, nil
			}
		}
	}
	sum, err := hashFD(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("hash %s: %w", path, err)
	}
	if after, err := f.Stat(); err != nil || statIdentity(after) != id {
		// Written to while it was read: no hash holds for it.
		f.Close()
		return nil, fmt.Errorf("%s changed while it was read; try again", path)
	}
	if index != "" {
		c.write(index, hashEntry{Path: path, Stat: id, SHA256: sum})
	}
	return &verifiedBinary{path: path, sha256: sum, f: f, id: id}, nil
}

// hashFD returns the hex SHA-256 of f's bytes, read from offset 0.
func hashFD(f *os.File) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// file returns the descriptor to start the binary from, after checking
// that its bytes are still the verified ones: when its identity changed,
// it is hashed again.
func (b *verifiedBinary) file() (*os.File, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("%s: %w", b.path, os.ErrClosed)
	}
	st, err := b.f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.path, err)
	}
	if id := statIdentity(st); id == "" || id != b.id {
		sum, err := hashFD(b.f)
		if err != nil {
			return nil, fmt.Errorf("%s: hash: %w", b.path, err)
		}
		if sum != b.sha256 {
			return nil, fmt.Errorf("%w: %s: sha256 %s, accepted %s", ErrBinaryChanged, b.path, sum, b.sha256)
		}
		b.id = id
	}
	return b.f, nil
}

// close closes the descriptor; later starts fail.
func (b *verifiedBinary) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		b.f.Close()
	}
}

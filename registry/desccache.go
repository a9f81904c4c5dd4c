package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/attnplug/attnplug/core"
)

// descCache keeps plugin descriptions on disk, keyed by the SHA-256 of the
// binary that gave them, so that learning a plugin's names does not need
// to start it. A zero descCache (no directory) caches nothing.
type descCache struct {
	dir string
}

// cachedDescription is the file format of one cache entry.
type cachedDescription struct {
	SHA256      string           `json:"sha256"`
	Description core.Description `json:"description"`
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (c descCache) get(sum string) (*core.Description, bool) {
	if c.dir == "" {
		return nil, false
	}
	data, err := os.ReadFile(c.file(sum))
	if err != nil {
		return nil, false
	}
	var e cachedDescription
	if err := json.Unmarshal(data, &e); err != nil || e.SHA256 != sum {
		return nil, false
	}
	return &e.Description, true
}

// put stores d for sum; a cache that cannot be written is skipped, since
// it only saves a start.
func (c descCache) put(sum string, d *core.Description) error {
	if c.dir == "" {
		return nil
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(cachedDescription{SHA256: sum, Description: *d})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(c.dir, ".desc-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), c.file(sum))
}

// cacheFormat versions the entries: a core whose description changes
// meaning bumps it, and old entries are then ignored.
const cacheFormat = "v2" // v2: kernel catalogs, max_seq_len_at_most

func (c descCache) file(sum string) string {
	return filepath.Join(c.dir, "desc-"+cacheFormat+"-"+sum+".json")
}

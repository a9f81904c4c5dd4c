package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

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
	Key         string           `json:"key"`
	Description core.Description `json:"description"`
}

// envDigest identifies the environment a plugin inherits, as far as it may
// change a description: a plugin may read its configuration from
// ATTNPLUG_* variables (the dsa plugin's dense-prefill threshold), so a
// description is cached for a binary and those variables together.
func envDigest() string {
	var vars []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ATTNPLUG_") {
			vars = append(vars, kv)
		}
	}
	sort.Strings(vars)
	h := sha256.Sum256([]byte(strings.Join(vars, "\x00")))
	return hex.EncodeToString(h[:8])
}

// FileSHA256 returns the hex SHA-256 of the file at path: how plugin
// binaries are identified in the description cache and the lock file.
func FileSHA256(path string) (string, error) {
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

// get returns the description cached under key (a binary's SHA-256 and
// the environment digest).
func (c descCache) get(key string) (*core.Description, bool) {
	if c.dir == "" {
		return nil, false
	}
	data, err := os.ReadFile(c.file(key))
	if err != nil {
		return nil, false
	}
	var e cachedDescription
	if err := json.Unmarshal(data, &e); err != nil || e.Key != key {
		return nil, false
	}
	return &e.Description, true
}

// put stores d for sum; a cache that cannot be written is skipped, since
// it only saves a start.
func (c descCache) put(key string, d *core.Description) error {
	if c.dir == "" {
		return nil
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(cachedDescription{Key: key, Description: *d})
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
	return os.Rename(tmp.Name(), c.file(key))
}

// cacheFormat versions the entries: a core whose description changes
// meaning bumps it, and old entries are then ignored.
const cacheFormat = "v4" // v2: kernel catalogs, max_seq_len_at_most; v4: device_code

func (c descCache) file(key string) string {
	return filepath.Join(c.dir, "desc-"+cacheFormat+"-"+key+".json")
}

package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
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
	// SelfCheckPassed records that the binary passed the kernel
	// self-check (selfcheck.go) in this environment: its starts skip it.
	SelfCheckPassed bool `json:"self_check_passed,omitempty"`
}

// envDigest identifies the environment a plugin inherits, as far as it may
// change a description: a plugin may read its configuration from
// ATTNPLUG_* variables (the dsa plugin's dense-prefill threshold), so a
// description is cached for a binary and those variables together. The
// host's own settings (hostOnlyEnv) are left out: they change no plugin.
func envDigest() string {
	var vars []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "ATTNPLUG_") && !slices.Contains(hostOnlyEnv(), name) {
			vars = append(vars, kv)
		}
	}
	sort.Strings(vars)
	h := sha256.Sum256([]byte(strings.Join(vars, "\x00")))
	return hex.EncodeToString(h[:8])
}

// hostOnlyEnv are the ATTNPLUG_* variables that configure the host, not
// the plugins: where plugins and caches are, log levels, the backend to
// choose.
func hostOnlyEnv() []string {
	return []string{"ATTNPLUG_LOG_LEVEL", "ATTNPLUG_PLUGIN_LOG_LEVEL", "ATTNPLUG_PLUGIN_DIR", "ATTNPLUG_CACHE_DIR", "ATTNPLUG_BACKEND"}
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

// hashEntry is the file format of one entry of the hash index: the
// SHA-256 of the binary at Path when it had the identity Stat.
type hashEntry struct {
	Path   string `json:"path"`
	Stat   string `json:"stat"`
	SHA256 string `json:"sha256"`
}

// statIdentity is what changes whenever a file's content does: device,
// inode, size, and modification and change times to the nanosecond (the
// change time cannot be set back by the file's owner). Git's index trusts
// the same to skip rehashing.
func statIdentity(st os.FileInfo) string { return fileIdentity(st) }

func (c descCache) hashFile(path string) string {
	h := sha256.Sum256([]byte(path))
	return filepath.Join(c.dir, "sum-"+cacheFormat+"-"+hex.EncodeToString(h[:12])+".json")
}

// get returns the entry cached under key (a binary's SHA-256 and the
// environment digest).
func (c descCache) get(key string) (cachedDescription, bool) {
	var e cachedDescription
	if c.dir == "" {
		return e, false
	}
	data, err := os.ReadFile(c.file(key))
	if err != nil {
		return e, false
	}
	if err := json.Unmarshal(data, &e); err != nil || e.Key != key {
		return cachedDescription{}, false
	}
	return e, true
}

// put stores d under key, and whether the binary passed the kernel
// self-check; a cache that cannot be written is skipped, since it only
// saves a start.
func (c descCache) put(key string, d *core.Description, selfCheckPassed bool) error {
	if c.dir == "" {
		return nil
	}
	return c.write(c.file(key), cachedDescription{Key: key, Description: *d, SelfCheckPassed: selfCheckPassed})
}

// write stores v as JSON in file, atomically: a reader sees the old entry
// or the new one.
func (c descCache) write(file string, v any) error {
	if c.dir == "" {
		return nil
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(c.dir, ".entry-*")
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
	return os.Rename(tmp.Name(), file)
}

// cacheFormat versions the entries: a core whose description changes
// meaning bumps it, and old entries are then ignored.
const cacheFormat = "v4" // v2: kernel catalogs, max_seq_len_at_most; v4: device_code

func (c descCache) file(key string) string {
	return filepath.Join(c.dir, "desc-"+cacheFormat+"-"+key+".json")
}

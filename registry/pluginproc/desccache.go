package pluginproc

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
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/localsock"
	"github.com/hashicorp/go-hclog"
)

// descCache keeps plugin descriptions on disk, keyed by the SHA-256 of the
// binary that gave them, so that learning a plugin's names does not need
// to start it. A zero descCache (no directory) caches nothing.
type descCache struct {
	dir string
}

// usableCacheDir returns dir, made with mode 0700 when absent, when it is
// a directory of the caller's that no other user may write; else "" (no
// cache), with a warning: a description says which rules answer for a
// binary, and an entry another user wrote would be believed.
func usableCacheDir(dir string, log hclog.Logger) string {
	if dir == "" {
		return ""
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Info("no description cache", "dir", dir, "error", err)
		return ""
	}
	if err := localsock.CheckOwnedDir(dir); err != nil {
		log.Warn("description cache not used: another user owns it or may write it", "dir", dir, "error", err)
		return ""
	}
	return dir
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
	c.touch(c.file(key), time.Now())
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

// startFailure is the file format of a failed start remembered for a
// binary: a binary that did not start (or describe itself) is not started
// again, by this host or the next one, before RetryAt. A binary with other
// bytes has another key, so a fixed build is tried at once.
type startFailure struct {
	Key     string    `json:"key"`
	Error   string    `json:"error"`
	Count   int       `json:"count"`
	At      time.Time `json:"at"`
	RetryAt time.Time `json:"retry_at"`
}

// The backoff of remembered start failures: it doubles with each failure
// in a row, from startFailureBackoff to maxStartFailureBackoff.
const (
	startFailureBackoff    = 30 * time.Second
	maxStartFailureBackoff = 10 * time.Minute
)

func (c descCache) failureFile(key string) string {
	return filepath.Join(c.dir, "fail-"+cacheFormat+"-"+key+".json")
}

// failed returns the failed start remembered under key, when its backoff
// has not passed yet.
func (c descCache) failed(key string, now time.Time) (startFailure, bool) {
	var f startFailure
	if c.dir == "" {
		return f, false
	}
	data, err := os.ReadFile(c.failureFile(key))
	if err != nil || json.Unmarshal(data, &f) != nil || f.Key != key {
		return startFailure{}, false
	}
	return f, now.Before(f.RetryAt)
}

// fail remembers a failed start under key, with a backoff that doubles
// with each failure in a row.
func (c descCache) fail(key string, err error, now time.Time) startFailure {
	prev, _ := c.failed(key, now)
	f := startFailure{Key: key, Error: err.Error(), Count: prev.Count + 1, At: now}
	backoff := startFailureBackoff << min(f.Count-1, 16)
	if backoff > maxStartFailureBackoff || backoff <= 0 {
		backoff = maxStartFailureBackoff
	}
	f.RetryAt = now.Add(backoff)
	c.write(c.failureFile(key), f)
	return f
}

// started forgets a failed start under key.
func (c descCache) started(key string) {
	if c.dir != "" {
		os.Remove(c.failureFile(key))
	}
}

// cacheMaxAge is how long an entry of a binary no host has read lives:
// every read of an entry renews it, and writing one prunes the others
// past it, so that the cache holds the binaries in use and not every
// build ever seen.
const cacheMaxAge = 30 * 24 * time.Hour

// touch renews the entry in file, as read now.
func (c descCache) touch(file string, now time.Time) {
	if st, err := os.Stat(file); err == nil && now.Sub(st.ModTime()) > time.Hour {
		os.Chtimes(file, now, now)
	}
}

// prune removes the entries of the cache's formats that no host has read
// for cacheMaxAge, and the temporary files of writes that died.
func (c descCache) prune(now time.Time) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") && !strings.HasPrefix(name, ".entry-") {
			continue
		}
		if !strings.HasPrefix(name, "desc-") && !strings.HasPrefix(name, "sum-") && !strings.HasPrefix(name, "fail-") && !strings.HasPrefix(name, ".entry-") {
			continue
		}
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > cacheMaxAge {
			os.Remove(filepath.Join(c.dir, name))
		}
	}
}

package testbin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// EnvCacheDir names the directory the tests keep their built binaries in
// between test processes. Default: attnplug-testbin/<hash of the
// repository root> in the user cache directory, else in the temporary
// directory.
const EnvCacheDir = "ATTNPLUG_TESTBIN_CACHE"

// Cache is the set of binaries every test package shares: the host, the
// plugins under plugins/ and the test plugins under internal/testplugins/,
// each named by its package's last path element. Its files are never run
// or changed by tests: Build and BuildTestPlugin hand out copies.
type Cache struct {
	Dir     string
	Host    string   // the attnplug host
	Plugins []string // family names, in the order of plugins/
	// TestPlugins maps the name of each test plugin (fault, liar, lab) to
	// its binary.
	TestPlugins map[string]string
}

// Plugin returns the path of the named plugin's binary in the cache.
func (c *Cache) Plugin(family string) string {
	return filepath.Join(c.Dir, "plugins", family)
}

// Copy copies files of the cache, each pair a source in the cache and its
// destination, under the cache's lock: a test process bringing the cache
// up to date at the same time never hands a half-written binary.
func (c *Cache) Copy(pairs ...[2]string) error {
	unlock, err := lockDir(c.Dir)
	if err != nil {
		return err
	}
	defer unlock()
	for _, p := range pairs {
		if err := copyFile(p[0], p[1]); err != nil {
			return err
		}
	}
	return nil
}

var (
	cacheOnce sync.Once
	cache     *Cache
	cacheErr  error
)

// Cached returns the cache, brought up to date once per test process: the
// go command links again only the binaries whose inputs changed (it reads
// the build ID of the binary already there), so the first test package
// of a go test ./... links them, and the others, and later runs on an
// unchanged tree, only check them. Test processes running at once take
// turns under a file lock.
func Cached() (*Cache, error) {
	cacheOnce.Do(func() { cache, cacheErr = buildCache() })
	return cache, cacheErr
}

func buildCache() (*Cache, error) {
	root, err := ModuleRoot(".")
	if err != nil {
		return nil, err
	}
	dir, err := cacheDir(root)
	if err != nil {
		return nil, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()

	c := &Cache{Dir: dir, Host: filepath.Join(dir, "host", "host"), TestPlugins: map[string]string{}}
	plugins, err := mains(root, "plugins")
	if err != nil {
		return nil, err
	}
	tests, err := mains(root, filepath.Join("internal", "testplugins"))
	if err != nil {
		return nil, err
	}
	// One go command for each directory: it links the binaries that are
	// not current, in parallel. With -o DIR/ each binary is named by its
	// package's last path element.
	for _, g := range []struct {
		out  string
		pkgs []string
	}{
		{"plugins", plugins},
		{"test", tests},
		{"host", []string{"./cmd/host"}},
	} {
		out := filepath.Join(dir, g.out)
		if err := os.MkdirAll(out, 0o755); err != nil {
			return nil, err
		}
		if err := goBuild(root, nil, out+string(filepath.Separator), g.pkgs...); err != nil {
			return nil, err
		}
	}
	for _, pkg := range plugins {
		c.Plugins = append(c.Plugins, filepath.Base(pkg))
	}
	for _, pkg := range tests {
		c.TestPlugins[filepath.Base(pkg)] = filepath.Join(dir, "test", filepath.Base(pkg))
	}
	return c, nil
}

// BuildModule puts at out the binary of the main package of the separate
// module in moduleDir (examples/vendor-backend, a protocol fixture): a
// copy of the one in the cache, built there with go build run in that
// directory, as its vendor would, and linked again only when its inputs
// changed.
func BuildModule(moduleDir, out string) error {
	root, err := ModuleRoot(".")
	if err != nil {
		return err
	}
	dir, err := cacheDir(root)
	if err != nil {
		return err
	}
	moduleDir, err = filepath.Abs(moduleDir)
	if err != nil {
		return err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	sum := sha256.Sum256([]byte(moduleDir))
	bin := filepath.Join(dir, "modules", hex.EncodeToString(sum[:8]), filepath.Base(moduleDir))
	for _, d := range []string{filepath.Dir(bin), filepath.Dir(out)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := goBuild(moduleDir, []string{"GOWORK=off", "GOFLAGS=-mod=mod -buildvcs=false"}, bin, "."); err != nil {
		return err
	}
	return copyFile(bin, out)
}

// mains returns ./under/NAME for every directory under root/under with a
// main.go, in the order of the directory.
func mains(root, under string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, under))
	if err != nil {
		return nil, err
	}
	var pkgs []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(root, under, e.Name(), "main.go")); e.IsDir() && err == nil {
			pkgs = append(pkgs, "./"+filepath.ToSlash(filepath.Join(under, e.Name())))
		}
	}
	return pkgs, nil
}

// cacheDir returns the cache directory of the repository at root,
// created private to this user.
func cacheDir(root string) (string, error) {
	if dir := os.Getenv(EnvCacheDir); dir != "" {
		dir, err := filepath.Abs(dir)
		if err != nil {
			return "", err
		}
		return dir, os.MkdirAll(dir, 0o700)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = filepath.Join(os.TempDir(), fmt.Sprintf("attnplug-testbin-%d", os.Getuid()))
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(base, "attnplug-testbin", hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return dir, checkOwned(filepath.Dir(dir))
}

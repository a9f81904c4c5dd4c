package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/attnplug/attnplug/backendkit"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/detect"
	"github.com/attnplug/attnplug/jsonl"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
)

// errHelp is returned when -h was asked: exit status 0.
var errHelp = flag.ErrHelp

// hostFlags are the flags every command that loads plugins shares. They
// hold the flags' values only: a command reads the registry configuration
// they give (config) and changes it where it must before registry.New.
type hostFlags struct {
	pluginDirs  string
	logLevel    string
	logJSON     bool
	platform    string
	callTimeout time.Duration
	noCache     bool
	strict      bool
	lockFile    string
	insecureDir bool
	memoryMiB   int64
}

// maxPluginMemoryMiB bounds --plugin-memory-mib (1 PiB).
const maxPluginMemoryMiB = 1 << 30

// register adds the host flags to fs, but those named in without: the
// flags a command would ignore are not offered (a listing has no use for
// --platform or --strict).
func (h *hostFlags) register(fs *flag.FlagSet, without ...string) {
	all := flag.NewFlagSet("", flag.ContinueOnError)
	all.StringVar(&h.pluginDirs, "plugin-dir", "", "plugin directories, ':'-separated, each of which must exist (default $ATTNPLUG_PLUGIN_DIR, else plugins/ beside attnplug)")
	all.StringVar(&h.logLevel, "log-level", "", "log level: trace, debug, info, warn, error, off (default $ATTNPLUG_LOG_LEVEL, else warn)")
	all.BoolVar(&h.logJSON, "log-json", false, "log JSON lines instead of text")
	all.StringVar(&h.platform, "platform", "", "platform of requests that give none: cuda, hip, npu, xpu, cpu (default: detected)")
	all.DurationVar(&h.callTimeout, "timeout", 2*time.Second, "deadline of one call to a plugin")
	all.BoolVar(&h.noCache, "no-cache", false, "do not read or write the plugin description cache")
	all.BoolVar(&h.strict, "strict", false, "refuse requests instead of falling back to the triton rules")
	all.StringVar(&h.lockFile, "lock", "", "lock file pinning the plugin binaries by SHA-256 (default: "+registry.LockFileName+" in the first plugin directory, when present)")
	all.BoolVar(&h.insecureDir, "insecure-plugin-dir", false, "accept plugin directories and binaries that other users can write")
	all.Int64Var(&h.memoryMiB, "plugin-memory-mib", registry.DefaultPluginMemoryLimit>>20, "memory each plugin process may write, in MiB (its RLIMIT_DATA; 0: no limit)")
	all.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(without, f.Name) {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
}

// given reports whether the command line set the flag name.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// maxLineFlag adds --max-line-bytes to fs with the default def; the
// command checks the value with checkMaxLine.
func maxLineFlag(fs *flag.FlagSet, def int) *int {
	return fs.Int("max-line-bytes", def, fmt.Sprintf("longest request line accepted, at most %d (1 GiB); longer lines are refused", jsonl.MaxLimit))
}

// checkMaxLine refuses a --max-line-bytes that is not positive or is past
// what a line reader holds.
func checkMaxLine(n int) error {
	if n <= 0 || n > jsonl.MaxLimit {
		return &usageError{fmt.Sprintf("--max-line-bytes: %d is out of range (want 1 to %d)", n, jsonl.MaxLimit)}
	}
	return nil
}

// parseFlags parses args with fs; -h prints the flags and returns errHelp.
func parseFlags(fs *flag.FlagSet, e *env, args []string, usage string) error {
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: %s\n", usage)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintf(e.stderr, "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return &usageError{err.Error()}
	}
	return nil
}

// noArgs refuses the arguments left after the flags of a command that
// takes none; hint, when set, says where the input comes from instead.
func noArgs(fs *flag.FlagSet, hint string) error {
	if fs.NArg() == 0 {
		return nil
	}
	msg := fmt.Sprintf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	if hint != "" {
		msg += " (" + hint + ")"
	}
	return &usageError{msg}
}

// parse is the preamble of a command that loads plugins: it parses args
// with fs (-h prints the flags and returns errHelp), refuses arguments left
// after the flags (hint, when set, says where the input comes from), and
// builds the logger the flags ask for.
func (h *hostFlags) parse(fs *flag.FlagSet, e *env, args []string, usage, hint string) (hclog.Logger, error) {
	if err := parseFlags(fs, e, args, usage); err != nil {
		return nil, err
	}
	if err := noArgs(fs, hint); err != nil {
		return nil, err
	}
	return h.logger(e)
}

func (h *hostFlags) logger(e *env) (hclog.Logger, error) {
	level := h.logLevel
	if level == "" {
		level = os.Getenv("ATTNPLUG_LOG_LEVEL")
	}
	if level == "" {
		level = "warn"
	}
	lvl := hclog.LevelFromString(level)
	if lvl == hclog.NoLevel {
		return nil, &usageError{fmt.Sprintf("--log-level: unknown level %q (want trace, debug, info, warn, error or off)", level)}
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       "attnplug",
		Level:      lvl,
		Output:     e.stderr,
		JSONFormat: h.logJSON,
	}), nil
}

// dirs returns the plugin directories: --plugin-dir, else
// $ATTNPLUG_PLUGIN_DIR, else plugins/ beside the binary. A directory the
// user named must exist: a typo is a usage error, not an empty registry.
// The default one may be missing (no plugins: triton answers).
func (h *hostFlags) dirs() ([]string, error) {
	list, source := h.pluginDirs, "--plugin-dir"
	if list == "" {
		list, source = os.Getenv("ATTNPLUG_PLUGIN_DIR"), "$ATTNPLUG_PLUGIN_DIR"
	}
	if list != "" {
		dirs, err := registry.PluginDirs(list)
		if err != nil {
			return nil, &usageError{source + ": " + err.Error()}
		}
		return dirs, nil
	}
	d, err := registry.DefaultPluginDir()
	if err != nil {
		return nil, err
	}
	return []string{d}, nil
}

func (h *hostFlags) hostPlatform(ctx context.Context) (core.Platform, error) {
	if h.platform != "" {
		p, err := core.ParsePlatform(h.platform)
		if err != nil || p == core.PlatformUnset {
			return 0, &usageError{fmt.Sprintf("--platform: unknown platform %q (want cuda, hip, npu, xpu or cpu)", h.platform)}
		}
		return p, nil
	}
	return detect.FilePlatform(ctx, "/"), nil
}

// lockPath returns the lock file the flags name: --lock, else
// attnplug.lock in the first plugin directory; explicit says whether
// --lock gave it.
func (h *hostFlags) lockPath(dirs []string) (path string, explicit bool) {
	if h.lockFile != "" {
		return h.lockFile, true
	}
	if len(dirs) == 0 {
		return "", false
	}
	return filepath.Join(dirs[0], registry.LockFileName), false
}

// config returns the registry configuration the flags give, with the lock
// file in use (Lock; nil when none). A command changes what it must
// before registry.New.
func (h *hostFlags) config(ctx context.Context, logger hclog.Logger) (registry.Config, error) {
	cfg, err := h.configWithoutLock(ctx, logger)
	if err != nil {
		return cfg, err
	}
	// The lock file --lock names must exist; the default one is read
	// when it exists.
	if path, explicit := h.lockPath(cfg.PluginDirs); path != "" {
		cfg.Lock, err = registry.ReadLockIfPresent(path, explicit)
	}
	return cfg, err
}

// configWithoutLock is config with no lock file, whatever the flags say:
// for attnplug lock, which pins the binaries as they are now.
func (h *hostFlags) configWithoutLock(ctx context.Context, logger hclog.Logger) (registry.Config, error) {
	dirs, err := h.dirs()
	if err != nil {
		return registry.Config{}, err
	}
	platform, err := h.hostPlatform(ctx)
	if err != nil {
		return registry.Config{}, err
	}
	if h.callTimeout <= 0 {
		return registry.Config{}, &usageError{fmt.Sprintf("--timeout: %s is not a positive duration", h.callTimeout)}
	}
	if h.memoryMiB < 0 || h.memoryMiB > maxPluginMemoryMiB {
		return registry.Config{}, &usageError{fmt.Sprintf("--plugin-memory-mib: %d is outside [0, %d] (0: no limit)", h.memoryMiB, maxPluginMemoryMiB)}
	}
	memory := h.memoryMiB << 20
	if h.memoryMiB == 0 {
		memory = -1 // no limit
	}
	cfg := registry.Config{
		PluginDirs:        dirs,
		Logger:            logger.Named("registry"),
		Platform:          platform,
		CallTimeout:       h.callTimeout,
		Strict:            h.strict,
		InsecurePluginDir: h.insecureDir,
		Kernels:           backendkit.Run,
		PluginMemoryLimit: memory,
	}
	if !h.noCache {
		cfg.CacheDir = registry.DefaultCacheDir()
	}
	logger.Debug("opening registry", "plugin_dirs", strings.Join(dirs, ":"), "platform", platform.String())
	return cfg, nil
}

// open builds the registry of the flags as they are, for a command that
// changes nothing of the configuration; the caller closes it.
func (h *hostFlags) open(ctx context.Context, logger hclog.Logger) (*registry.Registry, error) {
	cfg, err := h.config(ctx, logger)
	if err != nil {
		return nil, err
	}
	return registry.New(ctx, cfg)
}

// processArgs are the flags that make another attnplug process load the
// same plugins as these flags do.
func (h *hostFlags) processArgs() ([]string, error) {
	dirs, err := h.dirs()
	if err != nil {
		return nil, err
	}
	args := []string{"--plugin-dir", strings.Join(dirs, string(filepath.ListSeparator)), "--timeout", h.callTimeout.String()}
	if h.lockFile != "" {
		args = append(args, "--lock", h.lockFile)
	}
	if h.insecureDir {
		args = append(args, "--insecure-plugin-dir")
	}
	if h.memoryMiB != registry.DefaultPluginMemoryLimit>>20 {
		args = append(args, "--plugin-memory-mib", fmt.Sprint(h.memoryMiB))
	}
	if h.platform != "" {
		args = append(args, "--platform", h.platform)
	}
	return args, nil
}

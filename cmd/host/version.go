package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
)

// version is the release of this build, set by the linker:
// go build -ldflags "-X main.version=v1.2.3" (make build sets it from
// git describe). Empty in a plain go build: versionOf reads the build
// information then.
var version string

func runVersion(_ context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parseFlags(fs, e, args, "attnplug version (also attnplug --version, -v)"); err != nil {
		return err
	}
	if err := noArgs(fs, ""); err != nil {
		return err
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintf(e.stdout, "attnplug %s (core rules %s, plugin protocol %d, %s %s/%s)\n",
		versionOf(version, bi), core.Version, wire.ProtocolVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}

// versionOf is the version to print: the one the linker set; else the
// module version of a go install; else the VCS revision that go build
// recorded, with -dirty for uncommitted changes; else "devel" with how to
// get a real one.
func versionOf(linked string, bi *debug.BuildInfo) string {
	if linked != "" {
		return linked
	}
	if bi == nil {
		return "devel (no build information)"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel (built without version information; make build sets it)"
	}
	v := "devel-" + rev[:min(12, len(rev))]
	if dirty {
		v += "-dirty"
	}
	if at != "" {
		v += " " + strings.TrimSuffix(at, "Z")
	}
	return v
}

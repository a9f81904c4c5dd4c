package wire

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// Factory builds a plugin's backend; the logger writes JSON lines to
// stderr, which the host forwards into its own log.
type Factory func(logger hclog.Logger) (core.Backend, error)

// Main is the whole main function of a plugin binary: it builds the backend
// with f and serves it until the host ends the process. Run by hand (without
// the host's magic cookie), it prints what the binary is and how it is
// used, and exits with status 1. It never writes to stdout except for
// go-plugin's handshake line.
func Main(f Factory) {
	// Main is a program's entry point, so the root context starts here.
	os.Exit(run(context.Background(), f, os.Args, os.Getenv, os.Stderr))
}

func run(ctx context.Context, f Factory, args []string, getenv func(string) string, stderr io.Writer) int {
	name := "plugin"
	if len(args) > 0 {
		name = filepath.Base(args[0])
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       strings.TrimPrefix(name, BinaryPrefix),
		Output:     stderr,
		JSONFormat: true,
		Level:      hclog.Info,
	})
	if lvl := getenv("ATTNPLUG_PLUGIN_LOG_LEVEL"); lvl != "" {
		logger.SetLevel(hclog.LevelFromString(lvl))
	}
	backend, err := f(logger)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	if getenv(MagicCookieKey) != MagicCookieValue {
		fmt.Fprint(stderr, usage(ctx, name, backend))
		return 1
	}
	watchParent(getenv(EnvParentPipe), logger)
	plugins := VersionedPlugins(backend)
	if getenv(EnvCheckRequests) == "1" {
		for _, set := range plugins {
			if p, ok := set[PluginName].(*GRPCPlugin); ok {
				p.CheckRequests = true
			}
		}
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  Handshake(),
		VersionedPlugins: plugins,
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return plugin.DefaultGRPCServer(append(opts, ServerOptions()...))
		},
		Logger: logger,
	})
	return 0
}

// usage says what a plugin binary is, for a person who ran it by hand.
func usage(ctx context.Context, bin string, b core.Backend) string {
	var sb strings.Builder
	d, err := b.Describe(ctx)
	if err != nil {
		fmt.Fprintf(&sb, "%s: an attnplug backend plugin (describe failed: %v)\n", bin, err)
	} else {
		names := make([]string, 0, len(d.Handlers))
		for _, h := range d.Handlers {
			names = append(names, h.Name)
		}
		sort.Strings(names)
		fmt.Fprintf(&sb, "%s: attnplug backend plugin %q, version %s, protocol version %d\n", bin, d.Name, d.Version, ProtocolVersion)
		fmt.Fprintf(&sb, "serves the backend names: %s\n", strings.Join(names, ", "))
	}
	fmt.Fprintf(&sb, "\nThis binary is started by the attnplug host, not by hand. Put it in a plugin\n")
	fmt.Fprintf(&sb, "directory (--plugin-dir, ATTNPLUG_PLUGIN_DIR, or plugins/ beside attnplug) and\n")
	fmt.Fprintf(&sb, "run, for example:\n\n    attnplug plugins\n    echo '{\"backend\":\"NAME\",\"forward_mode\":\"DECODE\"}' | attnplug dispatch\n")
	return sb.String()
}

// watchParent exits the process when the host's end of the parent-death
// pipe closes. fdText is the descriptor number the host passed.
func watchParent(fdText string, logger hclog.Logger) {
	fd, err := strconv.Atoi(fdText)
	if fdText == "" || err != nil || fd < 3 {
		return
	}
	f := os.NewFile(uintptr(fd), "parent-pipe")
	if f == nil {
		return
	}
	go func() {
		var b [1]byte
		for {
			if _, err := f.Read(b[:]); err != nil {
				logger.Info("host is gone; exiting")
				os.Exit(0)
			}
		}
	}()
}

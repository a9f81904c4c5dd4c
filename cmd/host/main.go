package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// command is one subcommand of attnplug.
type command struct {
	name  string
	usage string
	run   func(ctx context.Context, env *env, args []string) error
}

// env is what a command reads and writes.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// isTerminal reports whether a writer is a terminal, which may show
	// a progress line (isTerminal; tests give their own).
	isTerminal func(io.Writer) bool
}

// commands is every subcommand, in the order help lists them.
func commands() []command {
	return []command{
		{"dispatch", "answer JSON Lines dispatch requests from stdin", runDispatch},
		{"run", "dispatch JSON Lines requests and run the chosen kernel on their tensors", runRun},
		{"plugins", "list the plugins found, their versions and names", runPlugins},
		{"lock", "pin the plugin binaries by SHA-256 in attnplug.lock", runLock},
		{"detect", "show the hardware, each device's verdict, the default backends and the plugins it serves", runDetect},
		{"doctor", "explain every unusable device and what to do about it", runDoctor},
		{"demo", "replay sample DeepSeek-V3 batches through every backend name", runDemo},
		{"serve", "serve dispatch over gRPC for engines not written in Go; SIGHUP hot-swaps changed plugins", runServe},
		{"bench", "measure dispatch: rules in process, one gRPC call per layer, the production path", runBench},
		{"conform", "run the conformance suite on a plugin binary", runConform},
		{"version", "print the version", runVersion},
	}
}

// usageError is a command-line mistake: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// refusedError means some requests were refused: exit status 1.
type refusedError struct{ n int }

func (e *refusedError) Error() string { return fmt.Sprintf("%d requests refused", e.n) }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := shutdownContext(stderr, os.Exit)
	defer stop()
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, isTerminal: isTerminal}
	if len(args) == 0 {
		printUsage(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		printUsage(stdout)
		return 0
	case "-v", "-version", "--version":
		name = "version"
	}
	for _, c := range commands() {
		if c.name == name {
			err := c.run(ctx, e, args[1:])
			return exitCode(err, stderr)
		}
	}
	fmt.Fprintf(stderr, "attnplug: unknown command %q\n\n", name)
	printUsage(stderr)
	return 2
}

func exitCode(err error, stderr io.Writer) int {
	var ue *usageError
	var re *refusedError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "attnplug: %v\n", err)
		return 2
	case errors.As(err, &re):
		return 1
	}
	fmt.Fprintf(stderr, "attnplug: %v\n", err)
	return 1
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "attnplug: choose and run DeepSeek attention backends that ship as plugins\n\nUsage:\n  attnplug <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.usage)
	}
	fmt.Fprintf(w, "\nRun \"attnplug <command> -h\" for a command's flags; \"attnplug --version\" (-v) for the version.\n")
}

// shutdownContext returns a context that SIGINT or SIGTERM ends: the
// command then shuts down in good order (every wait in it is bounded). A
// second signal ends the process at once through exit, with 128 plus the
// signal's number, as a shell reports a process the signal killed; the
// plugins die with it (wire.Launch's parent-death signal and pipe). stop
// releases the signals.
func shutdownContext(stderr io.Writer, exit func(int)) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(stderr, "attnplug: %s: shutting down; a second signal ends it at once\n", s)
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			fmt.Fprintf(stderr, "attnplug: %s again: ending at once\n", s)
			code := 128 + 15
			if n, ok := s.(syscall.Signal); ok {
				code = 128 + int(n)
			}
			exit(code)
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(sigs)
			close(done)
			cancel()
		})
	}
}

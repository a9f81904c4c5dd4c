// Command apicheck lists the exported API of attnplug's Go SDK (the
// packages a plugin imports) one feature a line, and checks it against the
// snapshot of the last release in sdkapi/.
//
//	go run ./internal/apicheck                 # check: exit 1 on an incompatible change
//	go run ./internal/apicheck -list           # print the current API
//	go run ./internal/apicheck -write v0.2.0   # write sdkapi/v0.2.0.txt at a release
//
// The check passes when every feature of the newest sdkapi/vX.Y.Z.txt is
// still in the current API, or is listed in sdkapi/except.txt (a
// deliberate incompatible change, recorded under "Breaking" in
// CHANGELOG.md). New features never fail it. It reads the packages' export
// data through `go list -export`, so it needs only the go command and works
// on a fresh clone without tags.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("apicheck", flag.ContinueOnError)
	dir := fs.String("C", ".", "the module's root directory")
	list := fs.Bool("list", false, "print the current API and exit")
	write := fs.String("write", "", "write the current API to sdkapi/`VERSION`.txt (at a release)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cur, err := features(*dir, sdkPackages())
	if err != nil {
		return err
	}
	switch {
	case *list:
		_, err := fmt.Println(strings.Join(cur, "\n"))
		return err
	case *write != "":
		if _, ok := parseVersion(*write); !ok {
			return fmt.Errorf("-write %q: want a version such as v0.2.0", *write)
		}
		path := filepath.Join(*dir, snapshotDir, *write+".txt")
		return os.WriteFile(path, []byte(snapshotHeader(*write)+strings.Join(cur, "\n")+"\n"), 0o644)
	}
	res, err := check(*dir, cur)
	if err != nil {
		return err
	}
	fmt.Println(res.Summary())
	if len(res.Missing()) > 0 {
		return fmt.Errorf("%d incompatible changes", len(res.Missing()))
	}
	return nil
}

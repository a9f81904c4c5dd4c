// Command gengolden writes the golden file of package reference: requests
// from the generator with the answers sglang's own code gives them. It
// needs python3 and the reference file (see reference.Find); go generate
// ./internal/reference (make golden) runs it.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/attnplug/attnplug/internal/reference"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "gengolden: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("o", "testdata/"+reference.GoldenName, "file to write")
	n := flag.Int("n", 40000, "requests")
	platform := flag.String("platform", "cpu", "platform of requests that give none")
	flag.Parse()
	tmp, err := os.MkdirTemp("", "gengolden-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	o, err := reference.Find(".", tmp)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, err := reference.MakeGolden(ctx, o, *n, [2]uint64{10, 11}, *platform)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := g.Write(&buf); err != nil {
		return err
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Printf("gengolden: wrote %s: %d requests, %d bytes, reference %s sha256 %s\n", *out, *n, buf.Len(), g.Header.Reference, g.Header.ReferenceSHA256)
	return nil
}

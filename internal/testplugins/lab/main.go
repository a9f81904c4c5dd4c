package main

import (
	"fmt"
	"os"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/testplugins/lab/rules"
	"github.com/attnplug/attnplug/wire"
	"github.com/hashicorp/go-hclog"
)

func main() {
	b, err := rules.Parse(os.Getenv("ATTNPLUG_LAB"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	wire.Main(func(logger hclog.Logger) (core.Backend, error) { return rules.New(b, logger) })
}

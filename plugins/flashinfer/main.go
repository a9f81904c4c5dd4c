package main

import (
	"github.com/attnplug/attnplug/plugins/flashinfer/rules"
	"github.com/attnplug/attnplug/wire"
)

func main() { wire.Main(rules.New) }

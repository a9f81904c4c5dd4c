package main

import (
	"github.com/attnplug/attnplug/plugins/intel_xpu/rules"
	"github.com/attnplug/attnplug/wire"
)

func main() { wire.Main(rules.New) }

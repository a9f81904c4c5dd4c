package main

import (
	"github.com/attnplug/attnplug/plugins/ascend/rules"
	"github.com/attnplug/attnplug/wire"
)

func main() { wire.Main(rules.New) }

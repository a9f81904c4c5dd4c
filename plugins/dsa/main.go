package main

import (
	"github.com/attnplug/attnplug/plugins/dsa/rules"
	"github.com/attnplug/attnplug/wire"
)

func main() { wire.Main(rules.New) }

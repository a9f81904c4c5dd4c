package main

import (
	"github.com/attnplug/attnplug/plugins/fa3/rules"
	"github.com/attnplug/attnplug/wire"
)

func main() { wire.Main(rules.New) }

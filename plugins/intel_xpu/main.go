// Command attnplug-backend-intel_xpu is the attnplug backend plugin of the intel_xpu
// family: the intel_xpu name (Intel XPU). The attnplug host starts it; run by hand it says so.
package main

import (
	"github.com/attnplug/attnplug/plugins/intel_xpu/rules"
	"github.com/attnplug/attnplug/wire"
)

func main() { wire.Main(rules.New) }

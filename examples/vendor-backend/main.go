// Command attnplug-backend-acme_mla is the plugin of a made-up vendor
// backend, acme_mla, built out of the attnplug tree against its public SDK
// (packages core, wire and refkernels), as a static binary. The unchanged
// attnplug host loads it from a plugin directory; run by hand, it says what
// it is and exits.
package main

import (
	"example.com/acme-backend/rules"
	"github.com/attnplug/attnplug/wire"
)

func main() { wire.Main(rules.New) }

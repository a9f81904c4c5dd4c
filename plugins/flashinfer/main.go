// Command attnplug-backend-flashinfer is the attnplug backend plugin of the flashinfer
// family: the flashinfer, flashmla, cutlass_mla, trtllm_mla and tokenspeed_mla names. The attnplug host starts it; run by hand it says so.
package main

import (
	"github.com/attnplug/attnplug/plugins/flashinfer/rules"
	"github.com/attnplug/attnplug/wire"
)

func main() { wire.Main(rules.New) }

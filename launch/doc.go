// Package launch is the host's side of device execution: it checks the
// launch plans a plugin answers (Check), loads the plugin's kernel modules
// into the host's GPU context once, pinned by SHA-256, and launches a
// checked plan on the host's own device memory and stream, per layer, with
// no RPC, no host copy and no allocation, also inside a CUDA graph.
//
// Start with Check and Tensors (pure Go, every platform), then Executor
// (CUDA, through package cuda). docs/device.md describes the model.
package launch

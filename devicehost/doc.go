// Package devicehost is the device side of a Go host: Host, the one object
// through which any command reaches a GPU (FlashInfer's plan then run). A
// Host asks its Source (a *registry.Registry, or a client of attnplug
// serve) for a backend's kernel modules once and loads them
// (launch/cudaexec), asks for a batch's plan, which the Source has
// checked, and prepares it without a second check; a Step then launches
// the plan as a serving loop runs a batch, its per-batch launches once and
// every layer's on that layer's tensors, bound by name (Tensors), with no
// RPC, no host copy and no allocation. When the Source moves a backend to
// another plugin (a registry's Reload, a hot swap of attnplug serve), the
// next plan names other images (core.Plan.ModuleSHA256, which the
// registry stamps) and the Host loads them; plans prepared before keep
// running the images they were made on, which stay loaded until the last
// of them closes. Each backend holds its own plugin's images, so plugins
// of other builds serving other backends share the device.
//
// Start with OpenHost and Host.Plan. Checking kernels against the float64
// reference and timing them is the verification layer's, package
// devicecheck, which builds on a Host.
//
// It needs a CUDA GPU at run time only: libcuda is loaded dynamically, so
// it builds everywhere, and OpenHost fails with cuda.ErrUnavailable where
// there is no GPU.
package devicehost

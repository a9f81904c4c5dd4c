// Package launch holds the host's rules for device execution: the tensor
// layout a plan binds (Tensors), the limits on a plan request
// (CheckRequest), the checks every plan a plugin answers must pass
// before the host launches it (Check), the check of a PTX module's
// entry signatures against the entries it declares (CheckEntries,
// ParsePTXEntries), which a vendor's own tests can call too, and what an
// image needs of the host's driver (DriverFloor: a PTX image's ISA, a
// cubin's architecture and building release, mapped to the oldest CUDA
// release and Linux driver that load it; CheckDriver, the host's refusal
// of a driver older than that).
//
// This package is pure Go and builds everywhere, static with
// CGO_ENABLED=0: Check, CheckEntries, DriverFloor and Tensors. The
// CUDA executor is package launch/cudaexec. docs/device.md describes the
// model.
package launch

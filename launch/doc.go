// Package launch holds the host's rules for device execution: the tensor
// layout a plan binds (Tensors), the limits on a plan request
// (CheckRequest), the checks every plan a plugin answers must pass
// before the host launches it (Check), and the check of a PTX module's
// entry signatures against the entries it declares (CheckEntries,
// ParsePTXEntries), which a vendor's own tests can call too.
//
// This package is pure Go and builds everywhere, static with
// CGO_ENABLED=0: Check, CheckEntries and Tensors. The
// CUDA executor is package launch/cudaexec. docs/device.md describes the
// model.
package launch

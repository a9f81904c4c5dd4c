// Package inproc links every plugin of this repository into one process:
// Backends, for a registry that serves every name in process
// (registry.Config.Backends, the same routes, cache and fallback as the
// plugin processes get), and Rules, the bare rules, the baseline a
// benchmark compares a dispatch with. The host's own command never links
// it: plugins run as processes there.
package inproc

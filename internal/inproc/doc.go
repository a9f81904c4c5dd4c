// Package inproc links every plugin of this repository into one process:
// Backends, for a registry that serves every name in process
// (registry.Config.Backends, the same routes, cache and fallback as the
// plugin processes get), and Rules, the bare rules, the baseline a
// benchmark compares a dispatch with. The attnplug command links it for
// that baseline alone (attnplug bench, through internal/hostbench, path
// (a)); everywhere else in the host, plugins run as processes.
package inproc

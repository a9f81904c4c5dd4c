// Package inproc links the rules of every plugin in this repository into
// one process: the baseline that benchmarks and tests compare the plugin
// processes with. The host's production path never uses it.
package inproc

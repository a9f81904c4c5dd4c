// Package rules holds the dispatch rules of the intel_xpu plugin: the
// intel_xpu name (Intel GPUs), as sglang's handle_attention_intel_xpu, and
// the intel_amx name (Intel CPUs with AMX), which sglang's registry leaves
// to the triton rules.
package rules

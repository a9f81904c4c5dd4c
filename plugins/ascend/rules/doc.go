// Package rules holds the dispatch rules of the ascend plugin (Ascend NPU),
// as sglang's handle_attention_ascend.
package rules

// Package rules holds the dispatch rules of the aiter plugin (ROCm), as
// sglang's handle_attention_aiter.
package rules

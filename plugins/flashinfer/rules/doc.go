// Package rules holds the dispatch rules of the flashinfer plugin: the
// flashinfer, flashmla, cutlass_mla, trtllm_mla and tokenspeed_mla names.
package rules

// Package rules holds the dispatch rules of the fa3 plugin: the fa3 and fa4
// names, as sglang's handle_attention_fa3 and handle_attention_fa4.
package rules

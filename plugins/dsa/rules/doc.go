// Package rules holds the dispatch rules of the dsa plugin (DeepSeek sparse
// attention): the dsa name and its deprecated alias nsa, as sglang's
// handle_attention_dsa, and the DSA backend's own prefill choice when the
// request does not carry it.
package rules

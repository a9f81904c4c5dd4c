// Command attnplug-backend-flashinfer is the attnplug backend plugin of the flashinfer
// family: the flashinfer, flashmla, cutlass_mla, trtllm_mla and tokenspeed_mla names. The attnplug host starts it; run by hand it says so.
package main

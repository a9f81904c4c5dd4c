// Command attnplug-backend-lab is a plugin built only for tests: a vendor's
// rules that read every kind of quantity of core's vocabulary (a flag, the
// KV cache dtype, the backend name, the forward mode, the compute
// capability, the longest sequence, the prefix sum, the raw chunk
// capacity, the batch size, the longest prefix, the platform), declared
// with their thresholds and a condition (inside a piecewise CUDA graph,
// the flag alone), with a kernel catalog; and, on command, each of
// the ways a vendor's plugin goes wrong that attnplug conform must catch.
//
// The breaks come from $ATTNPLUG_LAB, a comma-separated list (rules.Parse):
//
//	undeclared=Q     leave quantity Q out of the declarations
//	off_by_one       declare the prefix sum's threshold as 999, read 1000
//	condition_lies   declare that with a dense KV cache dtype the rules
//	                 read the CUDA graph flag alone (they read more)
//	rare_method      answer MHA_NPU, undeclared, to batches of more than
//	                 8 sequences with an fp4_e2m1 KV cache
//	time             flip decode answers every 100 ms
//	stdout           write a line to stdout on the 50th dispatch
//	mutate           sort the request's seq_lens in place
//	sleep=DURATION   sleep that long in every dispatch
//	catalog=K        break the kernel catalog: dtype (bfloat17), headdim
//	                 (-3), hardware (an entry with no platform), method (a
//	                 kernel for MHA_NPU, which no name declares)
//
// Without breaks it conforms.
package main

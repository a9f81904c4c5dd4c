// Command genptx regenerates cuda/mla_ptx.go, the PTX of cuda.MLASource that package
// cuda loads when NVRTC is missing on the machine. It needs only an NVRTC library (no
// GPU); point ATTNPLUG_NVRTC at one if it is not found. Run from the cuda directory:
//
//	go generate ./cuda
//
// Use an old NVRTC (11.8 emits PTX ISA 7.8, which every driver since CUDA 11.8 loads)
// so that the PTX loads on as many drivers as possible.
package main

// Package gpucheck is the harness of the GPU tests (make test-gpu): the
// device kernels of package devkernels run on a CUDA device the way a host
// runs them (plan, prepare, launch on its own tensors), through package
// devicehost, and are checked against the float64 reference, over random
// batches (RandomCase), a serving loop through a registry (ServingLoop)
// and the methods' agreement (Agreement). Only tests import it: the host
// runs the same checks through devicehost.
package gpucheck

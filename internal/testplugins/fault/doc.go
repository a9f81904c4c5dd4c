// Command attnplug-backend-fault is a plugin built only for tests: it
// serves the name "fault" and misbehaves on command, so that tests can show
// what the host does when a plugin crashes, hangs, sleeps, answers garbage
// or breaks the protocol.
//
// The faults come from $ATTNPLUG_FAULT, a comma-separated list:
//
//	crash_at_start   exit with status 3 before the handshake
//	hang_at_start    never shake hands (sleep forever before serving)
//	orphan_child     start a copy of itself that sleeps two minutes, in a
//	                 session of its own, holding the plugin's stdout and
//	                 stderr; then exit with status 5
//	crash_after=N    exit with status 2 on the Nth dispatch (1-based)
//	hang_after=N     from the Nth dispatch on, never answer
//	sleep=DURATION   sleep that long in every dispatch
//	garbage          answer a method number no protocol version has
//	undeclared       answer MHA_NPU, which "fault" does not declare
//	refuse           refuse every request as invalid
//	protocol=N       speak plugin protocol version N
//	bad_cookie       expect another magic cookie
//	stdout_noise     write to stdout before the handshake
//	version=V        describe itself with version V
//	name=N           call itself N (the family name) instead of "fault"
//	names=A+B        serve the names A and B instead of "fault"
//	rules=R          decide like R: mla (default), mha, flip (MHA for
//	                 even prefix sums, else MLA)
//	kernels          declare a kernel catalog (MLA and MHA) and run its
//	                 kernels (RunKernel) with the reference kernels
//	kernel_crash     like kernels, but exit with status 2 in every
//	                 RunKernel, with the tensors' segment mapped
//	parent_pipe      exit with status 4 at start unless the host gave the
//	                 parent-death pipe ($ATTNPLUG_PARENT_PIPE=3, a pipe)
//	describe_pad=N   also serve "fault_padded", a deprecated alias whose
//	                 reason is N bytes: a description of any size
//	alloc_mib=N      allocate N MiB more, every page written, at every
//	                 dispatch, and keep it: memory that grows without end
//	many_names=N     also serve N names, fault_0 to fault_N-1
//	mark=PATH        create the file PATH at every dispatch, before any
//	                 sleep: a test's sign that a call reached the plugin
//
// Without faults it answers MLA for every request, like a well-behaved
// plugin.
package main

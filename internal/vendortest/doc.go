// Package vendortest holds the tests of plugins built outside this module,
// the way a vendor builds them, against the unchanged attnplug host:
//
//   - examples/vendor-backend, the made-up acme_mla backend, a module of
//     its own that imports only the public SDK (core, wire, refkernels,
//     launch): the host loads it, dispatches through it, gets its device
//     code (a PTX module of its own CUDA C kernel) and plans it checks and
//     keeps, and `attnplug conform` passes it, with --arch sm_90 too;
//   - testdata/protocol/v1fixture, a plugin generated from the pinned copy
//     of protocol v1 without the wire package: every later host must still
//     load it;
//   - v1pluspb, a test-only "v1 plus" protocol with an added field and an
//     added RPC: old and new peers still interoperate, both ways;
//   - the pinned v1 descriptor against the live wire/pluginv1: v1 only ever
//     gains fields and RPCs.
//
// The package has tests only.
package vendortest

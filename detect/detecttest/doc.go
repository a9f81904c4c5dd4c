// Package detecttest gives tests outside package detect the fixture trees
// of detect/testdata: small sysfs/procfs/dev roots for h100, h200, b200,
// a100, rtx4090, mi300x, mi355x, ascend910b, intel_max1550, spr_amx,
// cpu_noamx, arm64, container_no_driver, nvidia_plus_igpu and vfio.
//
// The trees spell ':' as "%3A" in file names and symlink targets, since a
// Go module zip may not hold a ':' in a path; Fixture and Materialize copy
// a tree and restore the ':'. Start with Fixture.
package detecttest

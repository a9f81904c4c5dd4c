// Command attnplug-backend-narrow is a plugin built only for tests: the fa3
// plugin, calling itself fa3, whose MLA decode plans have a grid that
// covers one query token per request (the head blocks of a single token's
// rows), the mistake of a vendor who sized the grid by requests (install
// it as attnplug-backend-fa3). Every
// check that reads plans passes it; only running them (attnplug conform
// on a GPU) finds the target-verify rows its kernels never write.
//
// With ATTNPLUG_NARROW=swap its plans are fa3's, but the modules declare
// the decode entries' pointer parameters "q" and "out" swapped: no check
// of the plans or of the PTX signatures can see it (both are 64-bit
// pointers), and running the plans on a GPU does.
package main

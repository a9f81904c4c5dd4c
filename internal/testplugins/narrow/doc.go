// Command attnplug-backend-narrow is a plugin built only for tests: the fa3
// plugin, calling itself fa3, whose MLA decode plans have a grid that
// covers one query token per request (the head blocks of a single token's
// rows), the mistake of a vendor who sized the grid by requests (install
// it as attnplug-backend-fa3). Every
// check that reads plans passes it; only running them (attnplug conform
// on a GPU) finds the target-verify rows its kernels never write.
package main

// Command attnplug-backend-intel_xpu is the attnplug backend plugin of the
// Intel family: the intel_xpu name (Intel XPU) and intel_amx (the Intel AMX
// CPU backend, by the triton rules). The attnplug host starts it; run by
// hand it says so.
package main

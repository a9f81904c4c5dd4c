// Command attnplug-backend-aiter is the attnplug backend plugin of the aiter
// family: the aiter name (ROCm). The attnplug host starts it; run by hand it says so.
package main

// Command attnplug-backend-ascend is the attnplug backend plugin of the ascend
// family: the ascend name (Ascend NPU). The attnplug host starts it; run by hand it says so.
package main

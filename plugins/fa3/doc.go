// Command attnplug-backend-fa3 is the attnplug backend plugin of the fa3
// family: the fa3 and fa4 names (FlashAttention 3 and 4). The attnplug host starts it; run by hand it says so.
package main

// Command attnplug-backend-dsa is the attnplug backend plugin of the dsa
// family: the dsa name and its deprecated alias nsa (DeepSeek sparse attention). The attnplug host starts it; run by hand it says so.
package main

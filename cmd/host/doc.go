// Command attnplug is the attnplug host: it finds the backend plugins,
// starts those the requests need, and answers which forward method each
// DeepSeek attention layer runs.
//
// Usage:
//
//	attnplug <command> [flags]
//
// Run "attnplug help" for the commands.
package main

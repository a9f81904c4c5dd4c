// Package testbin builds the real attnplug binaries for tests: the host and
// every plugin under plugins/, with the go command, into a directory laid
// out as make build lays out bin/.
package testbin

// Package testbin builds the real attnplug binaries for tests: the host,
// every plugin under plugins/ and the test plugins under
// internal/testplugins/. They are built once into a cache shared by every
// test package and run ($ATTNPLUG_TESTBIN_CACHE, default in the user cache
// directory), where the go command links again only what changed, and
// each package gets copies, laid out as make build lays out bin/.
package testbin

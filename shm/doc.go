// Package shm holds the shared memory that carries kernel tensors between
// the attnplug host and a plugin process, so that the tensors never travel
// through gRPC messages: the host creates a Segment, writes the inputs into
// it, and names it in the call (Segment.Path); the plugin maps it with Open,
// runs its kernel on views of the mapping, writes the output there and
// unmaps it. The host owns the segment: Close unmaps it and frees it (a
// memfd disappears with its last descriptor; a /dev/shm file is unlinked).
//
// A segment is an anonymous memfd (memfd_create) by default: nothing is
// left in any file system, even when the host dies, and the plugin opens it
// through /proc/<host pid>/fd/<n>. Where memfds are not available, or when
// asked (CreateFile), it is a file of a random name created with O_EXCL
// under /dev/shm, mode 0600.
package shm

// Package localsock keeps attnplug's Unix sockets to the user who runs
// it: the private directory they live in by default (Dir), the checks of
// that directory (MakePrivateDir, CheckPrivateDir) and of a cache
// directory (CheckOwnedDir), and the credentials of the process at the
// other end of a connection (PeerOf), which a Policy admits or refuses.
//
// A socket's file mode keeps other users from connecting to it only
// while its directory holds, and says nothing to a client about who
// listens: any local user may bind a path in a directory others can
// write (/tmp) before the server does. So the server checks each peer it
// accepts, and the client checks the server it reached, both by the
// kernel's record of the peer's credentials (SO_PEERCRED on Linux,
// LOCAL_PEERCRED on Darwin and FreeBSD). An abstract socket (Linux,
// "@name") has no file at all: the peer check is all that guards it.
package localsock

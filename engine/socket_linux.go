package engine

import "golang.org/x/sys/unix"

// ioctlReadable asks a socket how many bytes are waiting to be read
// (FIONREAD, which Linux also calls SIOCINQ).
const ioctlReadable = unix.SIOCINQ

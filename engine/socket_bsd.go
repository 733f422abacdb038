//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package engine

// ioctlReadable asks a socket how many bytes are waiting to be read:
// FIONREAD, _IOR('f', 127, int) on every BSD, which golang.org/x/sys/unix
// does not name.
const ioctlReadable = 0x4004667f

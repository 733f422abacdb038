package testproc

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// listensOn reports whether process pid itself holds a TCP socket listening
// on port: a listening socket's inode in /proc/net/tcp that is also one of
// pid's descriptors. Another process's server on the same port does not
// count, so that Launch never takes it for the one it started. Read by
// hand, not through procfs, as procstat does: the deploy module's tests
// import testproc alone.
func listensOn(pid, port int) (bool, error) {
	inodes, err := listenerInodes(port)
	if err != nil || len(inodes) == 0 {
		return false, err
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		// A descriptor closed since the listing has no target.
		target, _ := os.Readlink(dir + "/" + fd.Name())
		if inode, ok := strings.CutPrefix(target, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
			return true, nil
		}
	}
	return false, nil
}

// listenerInodes returns the inodes of the TCP sockets listening on port,
// from /proc/net/tcp and tcp6 (the namespace's sockets, one a line: "sl
// local_address rem_address st ... inode ...", addresses as hex IP:port, st
// 0A for LISTEN). tcp6 holds Go's dual-stack listeners: a server told to
// listen on 0.0.0.0 listens on [::].
func listenerInodes(port int) (map[string]bool, error) {
	suffix := fmt.Sprintf(":%04X", port)
	inodes := make(map[string]bool)
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if errors.Is(err, fs.ErrNotExist) && table == "/proc/net/tcp6" {
			continue // IPv6 is off
		}
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 10 && fields[3] == "0A" && strings.HasSuffix(fields[1], suffix) {
				inodes[fields[9]] = true
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return inodes, nil
}

package main

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// listenFDsStart is the first descriptor systemd passes (SD_LISTEN_FDS_START).
const listenFDsStart = 3

// prepareListener sets opts.cfg.Listener to the socket systemd handed
// over, if there is one. Otherwise Listener stays nil and the engine opens
// -l and -p itself. It returns the exit code on failure, exitOK otherwise.
func prepareListener(opts *options, log zerolog.Logger) int {
	ln, err := inheritedListener(log)
	if err != nil {
		log.Error().Err(err).Msg("cannot use the socket systemd handed over")
		return exitSocket
	}
	if ln != nil {
		// beanstalkd warns for each -l and -p it then ignores; Sprout
		// keeps only the address they made, so it warns when that is
		// not the default (an explicit -p 11300 goes unremarked).
		if opts.cfg.Network != "tcp" || opts.cfg.Address != net.JoinHostPort("", defaultPort) {
			log.Warn().Str("ignored", opts.cfg.Address).Str("address", ln.Addr().String()).
				Msg("serving the socket systemd handed over; ignoring -l and -p")
		} else {
			log.Info().Str("address", ln.Addr().String()).Msg("serving the socket systemd handed over")
		}
		// The engine logs Network and Address; make them say what is served.
		opts.cfg.Listener = ln
		opts.cfg.Network, opts.cfg.Address = ln.Addr().Network(), ln.Addr().String()
	}
	return exitOK
}

// inheritedListener returns the listening socket systemd passed by socket
// activation, or nil when there is none. It reads the environment as
// sd_listen_fds(1) does and unsets LISTEN_PID, LISTEN_FDS and
// LISTEN_FDNAMES whatever it finds, so no child inherits them; the
// descriptors are made close-on-exec. Like beanstalkd, it serves the first
// descriptor only, warning when there are more (they stay open, unserved),
// and refuses one that is not a TCP or unix listening stream socket.
func inheritedListener(log zerolog.Logger) (net.Listener, error) {
	pidText, hasPID := os.LookupEnv("LISTEN_PID")
	fdsText, hasFDs := os.LookupEnv("LISTEN_FDS")
	for _, name := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		_ = os.Unsetenv(name)
	}
	if !hasPID {
		return nil, nil
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("invalid LISTEN_PID %q", pidText)
	}
	if pid != os.Getpid() || !hasFDs {
		// Meant for another process (a parent that exec'd us left them).
		return nil, nil
	}
	n, err := strconv.Atoi(fdsText)
	if err != nil || n <= 0 || n > math.MaxInt32-listenFDsStart {
		return nil, fmt.Errorf("invalid LISTEN_FDS %q", fdsText)
	}
	for fd := listenFDsStart; fd < listenFDsStart+n; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			return nil, fmt.Errorf("LISTEN_FDS=%d: descriptor %d: %w", n, fd, err)
		}
	}
	// The others stay open, as with beanstalkd: closing them would gain
	// nothing (systemd keeps its own copies), and a LISTEN_FDS that says
	// more than systemd passed would name descriptors the Go runtime opened
	// before main (it keeps cgroup files open), which must not be closed.
	if n > 1 {
		log.Warn().Int("sockets", n).Msg("inherited more than one listen socket; ignoring all but the first")
	}
	if err := checkListening(listenFDsStart); err != nil {
		return nil, err
	}
	f := os.NewFile(listenFDsStart, "systemd socket")
	defer f.Close() // FileListener holds a duplicate
	return net.FileListener(f)
}

// checkListening reports an error unless fd is a listening stream socket
// of the inet, inet6 or unix family (sd_is_socket_inet, then
// sd_is_socket_unix, as beanstalkd asks).
func checkListening(fd int) error {
	errNotListening := fmt.Errorf("descriptor %d is not a TCP or unix listening socket", fd)
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if errors.Is(err, unix.ENOTSOCK) {
		return errNotListening
	}
	if err != nil {
		return fmt.Errorf("descriptor %d: %w", fd, err)
	}
	accepting, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	if err != nil {
		return fmt.Errorf("descriptor %d: %w", fd, err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fmt.Errorf("descriptor %d: %w", fd, err)
	}
	switch sa.(type) {
	case *unix.SockaddrInet4, *unix.SockaddrInet6, *unix.SockaddrUnix:
		if typ == unix.SOCK_STREAM && accepting == 1 {
			return nil
		}
	}
	return errNotListening
}

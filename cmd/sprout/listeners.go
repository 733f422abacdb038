package main

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/sproutmq/sprout/engine"
)

// Exit codes of -u, as beanstalkd's su() uses them.
const (
	exitUserLookup = 32 // the user database could not be read
	exitNoSuchUser = 33 // -u names no user
	exitSetID      = 34 // setgroups, setgid or setuid failed
)

// listenFDsStart is the first descriptor systemd passes (SD_LISTEN_FDS_START).
const listenFDsStart = 3

// prepareListener returns the socket to serve, in beanstalkd's order: a
// socket handed over by systemd if there is one; else, with -u, the socket
// of -l and -p, opened here because the engine would open it only after
// the privileges are gone (a port below 1024 needs them). Then -u drops
// the privileges, before the caller opens the write-ahead log: like
// beanstalkd, the log directory belongs to the user -u names, not to root.
//
// With -u the TLS port (--tls-listen) is opened here too, into
// cfg.engine.TLS. Without -u and without systemd it returns nil: the
// engine opens the sockets itself. It returns the exit code on failure, exitOK otherwise.
func prepareListener(cfg config, log zerolog.Logger) (net.Listener, int) {
	ln, err := inheritedListener(log)
	if err != nil {
		log.Error().Err(err).Msg("cannot use the socket systemd handed over")
		return nil, exitSocket
	}
	if ln != nil {
		// beanstalkd warns for each -l and -p it then ignores; Sprout
		// keeps only the address they made, so it warns when that is
		// not the default (an explicit -p 11300 goes unremarked).
		if cfg.engine.Network != "tcp" || cfg.engine.Address != net.JoinHostPort("", defaultPort) {
			log.Warn().Str("ignored", cfg.engine.Address).Str("address", ln.Addr().String()).
				Msg("serving the socket systemd handed over; ignoring -l and -p")
		} else {
			log.Info().Str("address", ln.Addr().String()).Msg("serving the socket systemd handed over")
		}
	}
	if cfg.user == "" {
		return ln, exitOK
	}
	if ln == nil && cfg.engine.Network != engine.NetworkNone {
		if ln, err = engine.Listen(cfg.engine.Network, cfg.engine.Address); err != nil {
			log.Error().Err(err).Str("address", cfg.engine.Address).Msg("cannot listen")
			return nil, exitSocket
		}
	}
	// The TLS port too, for the same reason; it is the engine's to close.
	if t := cfg.engine.TLS; t != nil && t.Listener == nil {
		if t.Listener, err = engine.Listen("tcp", t.Address); err != nil {
			log.Error().Err(err).Str("address", t.Address).Msg("cannot listen for TLS")
			if ln != nil {
				_ = ln.Close()
			}
			return nil, exitSocket
		}
	}
	return ln, dropPrivileges(cfg.user, log)
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

// dropPrivileges becomes name, as beanstalkd's su() does: its primary group
// (setgid), then its uid (setuid). beanstalkd leaves the supplementary
// groups as they were, so a root started server keeps root's; Sprout sets
// them to name's own first, as initgroups(3) would. Go applies each call
// to every thread of the process. It returns an exit code: beanstalkd's
// 32, 33 or 34 on failure, exitOK once done.
func dropPrivileges(name string, log zerolog.Logger) int {
	u, err := user.Lookup(name)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		log.Error().Str("user", name).Msg("-u: no such user")
		return exitNoSuchUser
	}
	if err != nil {
		log.Error().Err(err).Str("user", name).Msg("-u: cannot look up the user")
		return exitUserLookup
	}
	uid, errUID := strconv.Atoi(u.Uid)
	gid, errGID := strconv.Atoi(u.Gid)
	groupIDs, errGroups := u.GroupIds()
	if err := errors.Join(errUID, errGID, errGroups); err != nil {
		log.Error().Err(err).Str("user", name).Msg("-u: cannot look up the user's ids and groups")
		return exitUserLookup
	}
	groups := make([]int, 0, len(groupIDs))
	for _, g := range groupIDs {
		n, err := strconv.Atoi(g)
		if err != nil {
			log.Error().Err(err).Str("user", name).Msg("-u: cannot look up the user's groups")
			return exitUserLookup
		}
		groups = append(groups, n)
	}

	// Without privileges setgroups fails even for the groups already
	// held; a process already running as the user has nothing to drop,
	// so `-u` with one's own name works as it does with beanstalkd.
	if os.Geteuid() == 0 || os.Geteuid() != uid {
		if err := syscall.Setgroups(groups); err != nil {
			log.Error().Err(err).Str("user", name).Ints("groups", groups).Msg("-u: setgroups")
			return exitSetID
		}
	}
	if err := syscall.Setgid(gid); err != nil {
		log.Error().Err(err).Str("user", name).Int("gid", gid).Msg("-u: setgid")
		return exitSetID
	}
	if err := syscall.Setuid(uid); err != nil {
		log.Error().Err(err).Str("user", name).Int("uid", uid).Msg("-u: setuid")
		return exitSetID
	}
	log.Info().Str("user", name).Int("uid", uid).Int("gid", gid).Ints("groups", groups).Msg("switched user")
	return exitOK
}

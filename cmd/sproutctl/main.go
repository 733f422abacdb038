package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/beanstalkd/go-beanstalk"
	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/internal/buildinfo"
)

// The exit statuses, as doc.go and the usage text describe them.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitUnreachable = 4
)

// defaultServer is where sproutctl looks without -s or SPROUT_SERVER.
const defaultServer = "127.0.0.1:11300"

// version is set at link time (make build: -X main.version=...).
var version string

// buildVersion is what --version prints, as cmd/sprout finds its own.
func buildVersion() string { return buildinfo.Version(version) }

// errNotFound marks what exits with exitNotFound: a job, tube or job state
// that is not there, or nothing to act on. errors.Is finds it in a
// notFoundError and in an apiError of status 404.
var errNotFound = errors.New("not found")

// notFoundError is errNotFound with a message of its own.
type notFoundError string

func (e notFoundError) Error() string        { return string(e) }
func (e notFoundError) Is(target error) bool { return target == errNotFound }

// usageError marks a command line that cannot be run as written.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// nothingf returns an error that exits with exitNotFound.
func nothingf(format string, args ...any) error {
	return notFoundError(fmt.Sprintf(format, args...))
}

// exitCode maps an error to the exit status a script sees.
func exitCode(err error) int {
	var usage usageError
	var badName beanstalk.NameError
	var opErr *net.OpError
	var urlErr *url.Error
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &usage), errors.As(err, &badName):
		return exitUsage
	case errors.Is(err, context.Canceled):
		return exitFailure // interrupted: a lost connection is not the reason
	case errors.As(err, &opErr), errors.As(err, &urlErr), errors.Is(err, os.ErrDeadlineExceeded),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// Dialing, reading and writing sockets (deadlines included), and
		// the HTTP client's failures; not net.Error, which every
		// syscall.Errno is, a missing file's too.
		return exitUnreachable
	case errors.Is(err, errNotFound), errors.Is(err, beanstalk.ErrNotFound):
		return exitNotFound
	default:
		return exitFailure
	}
}

// options are the settings every command shares, and its I/O. It is filled
// by flag parsing, then read by one command: not shared between goroutines.
type options struct {
	server    string
	api       string
	token     string
	tokenFile string
	timeout   time.Duration

	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// progress says whether to draw progress bars: stderr is a terminal.
	progress bool
	// ctx ends with SIGINT or SIGTERM, so that long work (move, clear, top)
	// stops between jobs instead of in the middle of one.
	ctx context.Context
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns its exit status. Everything
// outside the process comes in as an argument, so tests run it in-process.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	o := &options{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr, ctx: ctx}
	if f, ok := stderr.(*os.File); ok {
		o.progress = isatty.IsTerminal(f.Fd())
	}
	root := newRoot(o)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	// An error before a command's own code started is cobra's: a flag or
	// argument it could not take, an unknown command.
	started := false
	var mark func(cmds []*cobra.Command)
	mark = func(cmds []*cobra.Command) {
		for _, c := range cmds {
			if runE := c.RunE; runE != nil {
				c.RunE = func(c *cobra.Command, args []string) error {
					started = true
					return runE(c, args)
				}
			}
			mark(c.Commands()) // tubes move
		}
	}
	mark(root.Commands())
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	if !started {
		err = usageError{err}
	}
	fmt.Fprintf(stderr, "sproutctl: %v\n", err)
	if exitCode(err) == exitUsage {
		fmt.Fprintln(stderr, "Run 'sproutctl --help' for usage.")
	}
	return exitCode(err)
}

const rootHelp = `sproutctl speaks the beanstalk protocol to Sprout or C beanstalkd, and
Sprout's admin API where the protocol cannot do the work (listing jobs, a
fast clear) when given --api and a token.

A TUBE is a name as beanstalkd takes it: 1 to 200 bytes of the letters,
digits and -+/;.$_(), not starting with -. Any other name is refused as a
usage error, before a server is asked.

Exit statuses:
  0  done
  1  failed: an error from the server, a refused job, a partial move
  2  usage: unknown command or flag, a bad argument
  3  not found or nothing to do: no such job or tube, no job to peek, kick,
     clear or move
  4  the server or the admin API could not be reached, or the connection was
     lost or timed out

Environment: SPROUT_SERVER (-s), SPROUT_API (--api), SPROUT_ADMIN_TOKEN (the
token, when neither --token nor --token-file is given).`

func newRoot(o *options) *cobra.Command {
	root := &cobra.Command{
		Use:           "sproutctl",
		Short:         "The operator's command line for Sprout and beanstalkd",
		Long:          rootHelp,
		Version:       buildVersion(),
		SilenceErrors: true,
		SilenceUsage:  true,
		// Without a command, the usage and a status scripts see as an error.
		RunE: func(c *cobra.Command, args []string) error {
			c.SetOut(o.stderr)
			_ = c.Usage()
			return usagef("no command given")
		},
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	// A bound of 0 is none a connection can keep: every read would time out
	// at once, and look like a server that cannot be reached.
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if o.timeout <= 0 {
			return usagef("--timeout must be a positive duration, not %v", o.timeout)
		}
		return nil
	}
	f := root.PersistentFlags()
	f.StringVarP(&o.server, "server", "s", envOr(o.getenv, "SPROUT_SERVER", defaultServer), "the server, HOST:PORT (env SPROUT_SERVER)")
	f.StringVar(&o.api, "api", o.getenv("SPROUT_API"), "Sprout's admin API, http://HOST:PORT of its --http port (env SPROUT_API)")
	// The token's default is not shown: help output must not print a secret.
	f.StringVar(&o.token, "token", "", "the admin API's bearer token (env SPROUT_ADMIN_TOKEN; prefer --token-file)")
	f.StringVar(&o.tokenFile, "token-file", "", "read the admin API's bearer token from FILE")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "bound on connecting and on each reply")
	root.AddCommand(
		newStatsCmd(o), newTubesCmd(o), newTopCmd(o),
		newPeekCmd(o), newPutCmd(o), newReserveCmd(o), newDeleteCmd(o), newKickCmd(o), newPauseCmd(o),
		newClearCmd(o), newJobsCmd(o), newMoveCmd(o), newMembersCmd(o), newGroupsCmd(o),
	)
	return root
}

// checkTube refuses a tube name the protocol does not accept, as a bad
// argument, before anything is sent: servers answer it in different ways
// (BAD_FORMAT, the admin API's 400), and go-beanstalk's own check is not
// beanstalkd's (it takes \ and a leading -). Every command that names a
// tube calls it first.
func checkTube(name string) error {
	if !codec.ValidTubeName([]byte(name)) {
		return usagef("invalid tube name %q (%d bytes): 1 to %d of the letters, digits and -+/;.$_() (not starting with -)", name, len(name), codec.MaxTubeName)
	}
	return nil
}

func envOr(getenv func(string) string, key, fallback string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return fallback
}

// dial connects to a server of the beanstalk protocol. go-beanstalk has no
// timeouts of its own; deadlineConn gives each read and write one.
func (o *options) dial(addr string) (*beanstalk.Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, o.timeout)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	return beanstalk.NewConn(deadlineConn{nc, o.timeout}), nil
}

// withServer runs f on a connection to the server (-s), closed after.
func (o *options) withServer(f func(c *beanstalk.Conn) error) error {
	c, err := o.dial(o.server)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c)
}

// deadlineConn bounds every read and write by timeout, so that a server
// that stops answering ends the command instead of hanging it. sproutctl
// never waits on the server on purpose: its reserves have timeout 0.
type deadlineConn struct {
	net.Conn
	timeout time.Duration
}

func (c deadlineConn) Read(p []byte) (int, error) {
	if err := c.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c deadlineConn) Write(p []byte) (int, error) {
	if err := c.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// adminAPI returns the admin API's client, or a usage error naming what
// the command needs it for when --api was not given.
func (o *options) adminAPI(what string) (*apiClient, error) {
	if o.api == "" {
		return nil, usagef("%s needs Sprout's admin API, which the beanstalk protocol cannot do: give --api http://HOST:PORT (or SPROUT_API) and a token", what)
	}
	token := o.token
	if token == "" && o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("reading the token: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		token = o.getenv("SPROUT_ADMIN_TOKEN")
	}
	return newAPIClient(o.api, token, o.timeout), nil
}

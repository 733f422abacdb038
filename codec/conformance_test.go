//go:build conformance

// The conformance test replays every parser table input against a real
// beanstalkd and checks that the server's replies fall into the classes the
// parser predicts (BAD_FORMAT, UNKNOWN_COMMAND, EXPECTED_CRLF, JOB_TOO_BIG,
// silence, close, or some other reply). Start the server with the tests'
// job size limit first:
//
//	beanstalkd -l 127.0.0.1 -p 11411 -z 10 &
//	BEANSTALKD_ADDR=127.0.0.1:11411 go test -tags conformance -run Conformance ./codec/
//
// reserve and reserve-with-timeout are left out: they can block, and
// reserve-with-timeout changed between 1.12 and 1.13.
package codec_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/codec"
)

const (
	classOther  = "other"
	classClosed = "<closed>"
)

func TestConformance(t *testing.T) {
	addr := os.Getenv("BEANSTALKD_ADDR")
	if addr == "" {
		t.Skip("BEANSTALKD_ADDR not set")
	}
	inputs := []string{}
	for _, tc := range allParseCases() {
		inputs = append(inputs, tc.in)
	}
	inputs = append(inputs, pipelines...)

	for i, in := range inputs {
		want := predictReplies(t, in)
		if want == nil {
			continue
		}
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			got := serverReplies(t, addr, in)
			if !slices.Equal(got, want) {
				t.Errorf("input %q\nserver: %q\ncodec:  %q", in, got, want)
			}
		})
	}
}

// predictReplies returns the reply classes the parser implies for in, or nil
// if in holds a command this test cannot replay.
func predictReplies(t *testing.T, in string) []string {
	cmds, _ := feed(t, codec.NewParser(testMaxJobSize), []byte(in))
	classes := []string{}
	for _, c := range cmds {
		switch {
		case c.Op == codec.OpReserve && c.Status == codec.OK, c.Op == codec.OpReserveWithTimeout:
			return nil
		case c.Status == codec.BadFormat, c.Status == codec.CountedBadFormat:
			classes = append(classes, "BAD_FORMAT")
		case c.Status == codec.UnknownCommand:
			classes = append(classes, "UNKNOWN_COMMAND")
		case c.Status == codec.ExpectedCRLF:
			classes = append(classes, "EXPECTED_CRLF")
		case c.Op == codec.OpPut:
			// The reply, if any, comes with the body.
		case c.Op == codec.OpPutTooBig:
			classes = append(classes, "JOB_TOO_BIG")
		case c.Op == codec.OpQuit:
			return append(classes, classClosed)
		default:
			classes = append(classes, classOther)
		}
	}
	return classes
}

// serverReplies sends in on a fresh connection and classifies every reply
// that arrives before the server falls silent.
func serverReplies(t *testing.T, addr, in string) []string {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, in); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	classes := []string{}
	for {
		conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		line, err := r.ReadString('\n')
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout() && line == "":
			return classes
		case err == io.EOF && line == "":
			return append(classes, classClosed)
		case err != nil:
			t.Fatalf("reading reply: %v (partial %q)", err, line)
		}
		fields := strings.Fields(line)
		switch fields[0] {
		case "BAD_FORMAT", "UNKNOWN_COMMAND", "EXPECTED_CRLF", "JOB_TOO_BIG":
			classes = append(classes, fields[0])
			continue
		case "RESERVED", "FOUND", "OK":
			n, _ := strconv.Atoi(fields[len(fields)-1])
			if _, err := io.CopyN(io.Discard, r, int64(n)+2); err != nil {
				t.Fatalf("reading %q body: %v", line, err)
			}
		}
		classes = append(classes, classOther)
	}
}

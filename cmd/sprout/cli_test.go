package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestCommandLineErrors runs the real binary on bad command lines and
// environments, some once answered with a misleading message, the whole
// usage or a warning: each is refused in one line on stderr, naming the
// flag or variable and its value, and exit status 5.
func TestCommandLineErrors(t *testing.T) {
	bin := testproc.SproutBinary(t)
	cases := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{name: "a long flag after -l", args: []string{"-l", "--port=5"},
			want: "sprout: flag requires an argument: -l (the next argument, --port=5, is a flag)"},
		{name: "--listen alone", args: []string{"--listen"},
			want: "sprout: flag requires an argument: --listen"},
		{name: "empty SPROUT_PORT", env: []string{"SPROUT_PORT="},
			want: `sprout: invalid SPROUT_PORT: "" (empty: unset it for the default)`},
		{name: "SPROUT_MAX_OUTPUT with a suffix", env: []string{"SPROUT_MAX_OUTPUT=1M"},
			want: `sprout: invalid SPROUT_MAX_OUTPUT: "1M" (want a number of bytes; 0 means the default)`},
		{name: "a bad size names its flag", args: []string{"-s", "10k"},
			want: `sprout: invalid -s: "10k" (want a number of bytes from 1 to 2147483647)`},
		{name: "TLS without its certificate", args: []string{"--tls-listen", "127.0.0.1:0"},
			want: "sprout: --tls-listen needs --tls-cert and --tls-key: the certificate and key it serves"},
		{name: "a certificate without a TLS port", args: []string{"--tls-cert", "c.pem", "--tls-key", "k.pem"},
			want: "sprout: --tls-cert, --tls-key, --tls-client-ca and --tls-handshake-timeout need --tls-listen: they are for the TLS client port"},
		{name: "no port at all", args: []string{"-l", "none"},
			want: "sprout: -l none needs --tls-listen: without a plaintext port, clients are served over TLS only"},
		{name: "a side port certificate without its key", args: []string{"--http", "127.0.0.1:0", "--http-tls-cert", "c.pem"},
			want: "sprout: --http-tls-cert and --http-tls-key go together: the side port's certificate and its key"},
		{name: "an unreadable certificate names its flags", args: []string{"--tls-listen", "127.0.0.1:0",
			"--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem"},
			want: "sprout: --tls-cert and --tls-key: open /nonexistent/cert.pem: no such file or directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = append(os.Environ(), tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(replyTimeout):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("still running after %v: %s", replyTimeout, stderr.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != exitUsage {
				t.Errorf("exit status %d; want %d", code, exitUsage)
			}
			if got := stderr.String(); got != tc.want+"\n" {
				t.Errorf("stderr:\n%s\nwant the one line:\n%s", got, tc.want)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout: %q", stdout.String())
			}
		})
	}
}

// TestHarnessVariablesAreQuiet: a server started with the project's test
// and benchmark variables in its environment, as every test's server is,
// says nothing about them; a mistyped server variable is still warned
// about.
func TestHarnessVariablesAreQuiet(t *testing.T) {
	env := make([]string, 0, len(notServerVariables)+1)
	for _, name := range notServerVariables {
		env = append(env, name+"=1")
	}
	p := testproc.StartConfig(t, testproc.Config{
		Binary: testproc.SproutBinary(t),
		Env:    append(env, "SPROUT_MAX_OUPTUT=1048576"),
	})
	if !p.Stop(replyTimeout) {
		t.Fatalf("did not stop: %s", p.Output())
	}
	out := p.Output()
	for _, name := range notServerVariables {
		if strings.Contains(out, name) {
			t.Errorf("the server mentions %s:\n%s", name, out)
		}
	}
	if !strings.Contains(out, "sprout: ignoring unknown environment variable SPROUT_MAX_OUPTUT\n") {
		t.Errorf("no warning about SPROUT_MAX_OUPTUT:\n%s", out)
	}
}

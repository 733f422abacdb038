package load

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TLS scenarios (Scenario.TLS) send their traffic over TLS: to Sprout's own
// TLS port (ServerSpec.NativeTLS), and to beanstalkd through stunnel, the
// answer beanstalkd's upstream gives for TLS. Each run makes a throwaway CA
// and a certificate for 127.0.0.1; stunnel runs beside beanstalkd for the
// run, and its CPU time and memory are counted as the server's.

// ErrNoStunnel is why a TLS scenario is skipped for a server without TLS
// of its own where stunnel cannot be found.
var ErrNoStunnel = errors.New("stunnel not found (Debian: apt-get install stunnel4)")

// FindStunnel returns the stunnel executable on PATH: Debian's stunnel4,
// else stunnel.
func FindStunnel() (string, error) {
	for _, name := range []string{"stunnel4", "stunnel"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoStunnel
}

// serverTLS is a run's TLS material.
type serverTLS struct {
	files  testproc.CertFiles
	client *tls.Config
}

// newServerTLS makes a CA and a certificate for 127.0.0.1 in dir.
func newServerTLS(dir string) (*serverTLS, error) {
	ca, err := testproc.NewCA("sproutbench CA")
	if err != nil {
		return nil, err
	}
	files, err := ca.WriteFiles(dir, "server", time.Time{}, "127.0.0.1")
	if err != nil {
		return nil, err
	}
	return &serverTLS{files: files, client: &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}}, nil
}

// freeAddr is a free loopback address.
func freeAddr() (string, error) {
	port, err := testproc.FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// nativeTLSArgs are the flags that have Sprout serve TLS on addr.
func (t *serverTLS) nativeTLSArgs(addr string) []string {
	return []string{"--tls-listen", addr, "--tls-cert", t.files.Cert, "--tls-key", t.files.Key}
}

// stunnelStart bounds how long stunnel may take to accept.
const stunnelStart = 5 * time.Second

// startStunnel runs stunnel in front of the plaintext server at backend,
// with the run's certificate, and returns it once it accepts on its own
// address. Nagle is off on both sides, as the servers have it.
func (t *serverTLS) startStunnel(dir, backend string) (*testproc.Process, string, error) {
	bin, err := FindStunnel()
	if err != nil {
		return nil, "", err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	conf := filepath.Join(dir, "stunnel.conf")
	body := fmt.Sprintf("foreground = yes\npid =\ndebug = 3\n"+
		"socket = l:TCP_NODELAY=1\nsocket = r:TCP_NODELAY=1\n\n"+
		"[beanstalkd]\naccept = %s\nconnect = %s\ncert = %s\nkey = %s\n",
		addr, backend, t.files.Cert, t.files.Key)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return nil, "", err
	}
	p, err := testproc.Launch(testproc.Config{Binary: bin, Args: []string{conf}, NoListen: true, OutputLimit: 1 << 20})
	if err != nil {
		return nil, "", err
	}
	for deadline := time.Now().Add(stunnelStart); ; time.Sleep(10 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return p, addr, nil
		}
		if p.Exited() || time.Now().After(deadline) {
			p.Kill()
			return nil, "", fmt.Errorf("load: stunnel did not accept on %s: %v: %s", addr, err, outputTail(p))
		}
	}
}

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/internal/certs"
)

// listenNone is -l's value for no plaintext client port: TLS clients only
// (--tls-listen).
const listenNone = "none"

// certPoll is how often the certificate files are looked at for a change
// (certs.Set.Watch); SIGHUP reads them at once.
const certPoll = 2 * time.Second

// checkTLS refuses TLS flags that cannot work together, in one line naming
// the flag at fault.
func checkTLS(o options) error {
	switch {
	case o.tlsListen == "" && (o.tlsCert != "" || o.tlsKey != "" || o.tlsClientCA != "" || o.tlsHandshakeTimeout.set):
		return errors.New("--tls-cert, --tls-key, --tls-client-ca and --tls-handshake-timeout need --tls-listen: they are for the TLS client port")
	case o.tlsListen != "" && (o.tlsCert == "" || o.tlsKey == ""):
		return errors.New("--tls-listen needs --tls-cert and --tls-key: the certificate and key it serves")
	case o.host == listenNone && o.tlsListen == "":
		return errors.New("-l none needs --tls-listen: without a plaintext port, clients are served over TLS only")
	case o.host == listenNone && o.node != "":
		return errors.New("-l none is not supported in cluster mode: members proxy clients to the leader's plaintext client port")
	case (o.httpTLSCert == "") != (o.httpTLSKey == ""):
		return errors.New("--http-tls-cert and --http-tls-key go together: the side port's certificate and its key")
	case o.httpTLSCert != "" && o.httpAddr == "":
		return errors.New("--http-tls-cert needs --http: it is the side port's certificate")
	}
	return nil
}

// served are the TLS configurations made from the certificate files, all
// read through one certs.Set.
type served struct {
	set    *certs.Set
	client *tls.Config // the TLS client port's; nil without --tls-listen
	http   *tls.Config // the side port's; nil without --http-tls-cert
	// cluster gives the members' certificate and CA at each handshake;
	// nil without --cluster-tls-cert.
	cluster *memberCerts
}

// memberCerts is replication.TLSSource over the set's files.
type memberCerts struct {
	*certs.KeyPair
	cas *certs.CAs
}

func (m memberCerts) Pool() *x509.CertPool { return m.cas.Pool() }

// loadCerts reads every certificate and CA file the flags name. An error
// names the flags of the file that cannot be used; nothing is served then.
func loadCerts(c config, log zerolog.Logger) (*served, error) {
	s := &served{set: certs.NewSet(log)}
	if c.tls.cert != "" {
		pair, err := s.set.KeyPair("--tls-cert and --tls-key", c.tls.cert, c.tls.key)
		if err != nil {
			return nil, err
		}
		var cas *certs.CAs
		if c.tls.clientCA != "" {
			if cas, err = s.set.CAs("--tls-client-ca", c.tls.clientCA); err != nil {
				return nil, err
			}
		}
		s.client = certs.ServerConfig(pair, cas)
	}
	if c.tls.httpCert != "" {
		pair, err := s.set.KeyPair("--http-tls-cert and --http-tls-key", c.tls.httpCert, c.tls.httpKey)
		if err != nil {
			return nil, err
		}
		s.http = certs.ServerConfig(pair, nil)
	}
	if n := c.cluster; n != nil && n.TLSCert != "" {
		pair, err := s.set.KeyPair("--cluster-tls-cert and --cluster-tls-key", n.TLSCert, n.TLSKey)
		if err != nil {
			return nil, err
		}
		cas, err := s.set.CAs("--cluster-tls-ca", n.TLSCA)
		if err != nil {
			return nil, err
		}
		s.cluster = &memberCerts{KeyPair: pair, cas: cas}
	}
	return s, nil
}

// hasFiles reports whether a file was read: then SIGHUP and changes read them
// again.
func (s *served) hasFiles() bool { return len(s.set.Stats().Entries) > 0 }

// watch polls the files for changes until ctx is done.
func (s *served) watch(ctx context.Context) {
	if s.hasFiles() {
		s.set.Watch(ctx, certPoll)
	}
}

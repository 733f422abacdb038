package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Set is the certificates and CA bundles one server reads from files. Safe
// for concurrent use.
type Set struct {
	log zerolog.Logger // immutable

	mu      sync.Mutex // serialises loads; guards entries and their files' identities
	entries []*entry

	reloads, failures atomic.Uint64
}

// NewSet returns an empty set that logs to log.
func NewSet(log zerolog.Logger) *Set { return &Set{log: log} }

// entry is one KeyPair or CAs: what it reads, and what it last read.
type entry struct {
	name  string   // immutable: the flags that named its files
	files []string // immutable
	// load reads the files and, if they are good, puts their contents in
	// service; it returns their expiry.
	load func() (notAfter time.Time, err error)

	notAfter atomic.Int64 // Unix seconds of the certificate in service
	stale    atomic.Bool  // the files changed and did not load

	// loaded is the files' identity when they were last read, and seen
	// what a poll found last; guarded by Set.mu.
	loaded, seen identity
}

// KeyPair is a certificate chain and its key, read from two files.
type KeyPair struct {
	entry
	cert atomic.Pointer[tls.Certificate]
}

// CAs is a bundle of CA certificates, read from a file.
type CAs struct {
	entry
	pool atomic.Pointer[x509.CertPool]
}

// KeyPair reads a certificate chain and its key from certFile and keyFile
// (PEM) and adds them to the set; name (the flags that gave them) heads
// its errors.
func (s *Set) KeyPair(name, certFile, keyFile string) (*KeyPair, error) {
	k := &KeyPair{entry: entry{name: name, files: []string{certFile, keyFile}}}
	k.load = func() (time.Time, error) {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return time.Time{}, err
		}
		k.cert.Store(&c)
		return c.Leaf.NotAfter, nil
	}
	return k, s.add(&k.entry)
}

// CAs reads a bundle of CA certificates from file (PEM) and adds it to the
// set; name heads its errors.
func (s *Set) CAs(name, file string) (*CAs, error) {
	c := &CAs{entry: entry{name: name, files: []string{file}}}
	c.load = func() (time.Time, error) {
		pool, notAfter, err := readCAs(file)
		if err != nil {
			return time.Time{}, err
		}
		c.pool.Store(pool)
		return notAfter, nil
	}
	return c, s.add(&c.entry)
}

// readCAs parses every certificate in file; the bundle expires with its
// first to expire.
func readCAs(file string) (*x509.CertPool, time.Time, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, time.Time{}, err
	}
	pool := x509.NewCertPool()
	var notAfter time.Time
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("%s: %w", file, err)
		}
		pool.AddCert(cert)
		if notAfter.IsZero() || cert.NotAfter.Before(notAfter) {
			notAfter = cert.NotAfter
		}
	}
	if notAfter.IsZero() {
		return nil, time.Time{}, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, notAfter, nil
}

// add loads e for the first time; its error names e.
func (s *Set) add(e *entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.loaded = identify(e.files)
	e.seen = e.loaded
	notAfter, err := e.load()
	if err != nil {
		return fmt.Errorf("%s: %w", e.name, err)
	}
	e.notAfter.Store(notAfter.Unix())
	s.entries = append(s.entries, e)
	return nil
}

// Certificate is the certificate in service.
func (k *KeyPair) Certificate() *tls.Certificate { return k.cert.Load() }

// GetCertificate is tls.Config's, for a server.
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.cert.Load(), nil
}

// GetClientCertificate is tls.Config's, for a client.
func (k *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return k.cert.Load(), nil
}

// Pool is the bundle in service.
func (c *CAs) Pool() *x509.CertPool { return c.pool.Load() }

// Reload reads every entry's files again, now (SIGHUP).
func (s *Set) Reload() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		id := identify(e.files)
		s.reloadLocked(e, id)
	}
}

// Watch polls the files every interval until ctx is done, and reloads an
// entry whose files changed once they have stayed the same for a poll.
func (s *Set) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.poll()
		}
	}
}

// poll is one look at the files.
func (s *Set) poll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		id := identify(e.files)
		switch {
		case id == e.loaded:
			e.seen = id // back as it was: nothing to read
		case id != e.seen:
			e.seen = id // changed: read it once it settles
		default:
			s.reloadLocked(e, id)
		}
	}
}

// reloadLocked reads e's files, which have identity id. On failure the
// previous contents stay in service; either way id is taken as read, so
// that a bad file is reported once, not at every poll. s.mu must be held.
func (s *Set) reloadLocked(e *entry, id identity) {
	e.loaded, e.seen = id, id
	notAfter, err := e.load()
	if err != nil {
		s.failures.Add(1)
		e.stale.Store(true)
		s.log.Error().Err(err).Str("certificate", e.name).
			Time("serving_until", time.Unix(e.notAfter.Load(), 0)).
			Msg("cannot reload a certificate; the previous one stays in service")
		return
	}
	s.reloads.Add(1)
	e.stale.Store(false)
	e.notAfter.Store(notAfter.Unix())
	s.log.Info().Str("certificate", e.name).Time("not_after", notAfter).Msg("certificate reloaded")
}

// Stats are a set's figures.
type Stats struct {
	// Reloads and Failures count the reads after the first that worked
	// and that failed, one per entry read.
	Reloads, Failures uint64
	Entries           []EntryStats
}

// EntryStats are one entry's.
type EntryStats struct {
	Name string
	// NotAfter is when the certificate in service expires (a bundle's
	// first to expire).
	NotAfter time.Time
	// Stale: its files changed and could not be read; the previous
	// contents are still in service.
	Stale bool
}

// Stats reads the set's figures.
func (s *Set) Stats() Stats {
	s.mu.Lock()
	entries := s.entries
	s.mu.Unlock()
	st := Stats{Reloads: s.reloads.Load(), Failures: s.failures.Load()}
	for _, e := range entries {
		st.Entries = append(st.Entries, EntryStats{Name: e.name,
			NotAfter: time.Unix(e.notAfter.Load(), 0), Stale: e.stale.Load()})
	}
	return st
}

// identity is what a poll compares: each file's, through symlinks.
type identity [2]fileID

type fileID struct {
	dev, ino uint64
	size     int64
	mtime    int64
	missing  bool
}

func identify(files []string) identity {
	var id identity
	for i, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			id[i].missing = true
			continue
		}
		id[i].size, id[i].mtime = fi.Size(), fi.ModTime().UnixNano()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			id[i].dev, id[i].ino = uint64(st.Dev), st.Ino
		}
	}
	return id
}

// ServerConfig is a server's TLS configuration serving cert, TLS 1.2 at
// least and Go's defaults otherwise; with clientCAs, clients must present
// a certificate from one of them (mutual TLS). Both are read at each
// handshake.
func ServerConfig(cert *KeyPair, clientCAs *CAs) *tls.Config {
	if clientCAs == nil {
		return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cert.GetCertificate}
	}
	m := &mutual{cert: cert, cas: clientCAs}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: m.config}
}

// mutual makes a mutual TLS server's configuration for the client CAs in
// service, once per bundle read.
type mutual struct {
	cert *KeyPair
	cas  *CAs
	last atomic.Pointer[mutualConfig]
}

type mutualConfig struct {
	pool   *x509.CertPool
	config *tls.Config
}

func (m *mutual) config(*tls.ClientHelloInfo) (*tls.Config, error) {
	pool := m.cas.Pool()
	if c := m.last.Load(); c != nil && c.pool == pool {
		return c.config, nil
	}
	c := &mutualConfig{pool: pool, config: &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: m.cert.GetCertificate,
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      pool,
	}}
	m.last.Store(c)
	return c.config, nil
}

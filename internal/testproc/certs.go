package testproc

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a throwaway certificate authority, for the tests and benchmarks
// of TLS: its certificates are ECDSA P-256, valid from an hour ago.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA's certificate, as a client's or a server's trust file.
	PEM []byte
}

var certSerial atomic.Int64

// NewCA makes a CA named name, valid for a day.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(certSerial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// NewTestCA is NewCA for a test: a failure fails it.
func NewTestCA(t testing.TB, name string) *CA {
	t.Helper()
	ca, err := NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// Pool is a pool holding the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue makes a certificate named cn for hosts (IP addresses or DNS
// names), good for servers and clients, valid until notAfter (a zero time
// is a day from now; a past one makes an expired certificate), and
// returns it and its key in PEM.
func (ca *CA) Issue(cn string, notAfter time.Time, hosts ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(certSerial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// TLSCert is Issue's certificate ready for a tls.Config; a failure fails t.
func (ca *CA) TLSCert(t testing.TB, cn string, notAfter time.Time, hosts ...string) tls.Certificate {
	t.Helper()
	c, k, err := ca.Issue(cn, notAfter, hosts...)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// CertFiles are the files WriteFiles wrote.
type CertFiles struct {
	Cert, Key, CA string
}

// WriteFiles issues a certificate as Issue does and writes it, its key and
// the CA's certificate into dir as NAME.pem, NAME-key.pem and ca.pem.
func (ca *CA) WriteFiles(dir, name string, notAfter time.Time, hosts ...string) (CertFiles, error) {
	c, k, err := ca.Issue(name, notAfter, hosts...)
	if err != nil {
		return CertFiles{}, err
	}
	f := CertFiles{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"),
		CA: filepath.Join(dir, "ca.pem")}
	for path, b := range map[string][]byte{f.Cert: c, f.Key: k, f.CA: ca.PEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return CertFiles{}, fmt.Errorf("testproc: %w", err)
		}
	}
	return f, nil
}

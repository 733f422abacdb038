package container

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/beanstalkd/go-beanstalk"
	corev1 "k8s.io/api/core/v1"

	"github.com/sproutmq/sprout/internal/testproc"
)

// clusterSecret writes what cert-manager would put in the cluster's TLS
// Secret into a new directory: a CA (ca.crt) and one certificate for
// dnsName, for server and client authentication (tls.crt, tls.key). The
// files are readable by the image's user, as the pod's fsGroup makes a
// Secret's.
func clusterSecret(t *testing.T, dnsName string) string {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return key
	}
	caKey, key := newKey(), newKey()
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sprout members' CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{dnsName},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "secret")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{
		"ca.crt":                {Type: "CERTIFICATE", Bytes: caDER},
		corev1.TLSCertKey:       {Type: "CERTIFICATE", Bytes: leafDER},
		corev1.TLSPrivateKeyKey: {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestClusterTLS plays the cluster with components/cluster-tls, its Secret
// holding one certificate for the headless Service's wildcard name, as
// deploy/README.md says to issue it: the members must elect a leader and
// replicate over mutual TLS (each logs it started with TLS, none warns of
// plaintext), and a job put
// through one member must be read through another.
func TestClusterTLS(t *testing.T) {
	needPodman(t)
	sts := clusterStatefulSet(t, "../k8s/components/cluster-tls")
	secrets := make(map[string]string)
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Secret.SecretName] = clusterSecret(t, "*."+sts.Spec.ServiceName)
		}
	}
	if len(secrets) != 1 {
		t.Fatalf("the cluster with components/cluster-tls mounts %d Secrets; want 1", len(secrets))
	}
	members := playStatefulSet(t, sts, int(*sts.Spec.Replicas), secrets)
	lead := waitLeader(t, members, 60*time.Second)

	in, out := members[(lead+1)%len(members)], members[(lead+2)%len(members)]
	producer, err := beanstalk.Dial("tcp", in.queue)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	id, err := producer.Put([]byte("over tls"), 0, 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := beanstalk.Dial("tcp", out.queue)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if body, err := reader.Peek(id); err != nil || string(body) != "over tls" {
		t.Errorf("peek %d through %s = %q, %v", id, out.member, body, err)
	}
	for _, m := range members {
		logs := containerLogs(m.container, -1)
		if strings.Contains(logs, "plaintext") || !strings.Contains(logs, `"tls":true`) {
			t.Errorf("%s does not talk to the others over TLS; its log:\n%s", m.member, logs)
		}
		testproc.WaitFor(t, 10*time.Second, m.member+" connected to every member", func() bool {
			st, err := clusterStatus(m.ops)
			if err != nil {
				return false
			}
			for _, peer := range st.Members {
				if !peer.Connected {
					return false
				}
			}
			return len(st.Members) == len(members)
		})
	}
}

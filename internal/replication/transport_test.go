package replication

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sproutmq/sprout/internal/testproc"
)

// startLone starts m1 of a three-member cluster whose other members are
// not running, for tests that speak to it by hand.
func startLone(t *testing.T, tweak func(*NodeConfig)) (*Node, *testproc.SyncBuffer) {
	var peers []Member
	var ln net.Listener
	var unused []net.Listener
	for i := 1; i <= 3; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		name := "m" + string(rune('0'+i))
		peers = append(peers, Member{Name: name, Addr: l.Addr().String(), ID: MemberID(name)})
		if i == 1 {
			ln = l
		} else {
			unused = append(unused, l)
		}
	}
	// Nobody listens at m2's and m3's addresses, so dials to them fail at
	// once; closed only now, or m3 could be given the port m2's just freed.
	for _, l := range unused {
		l.Close()
	}
	out := &testproc.SyncBuffer{}
	var ids []uint64
	for _, p := range peers {
		ids = append(ids, p.ID)
	}
	cfg := NodeConfig{Node: "m1", Listen: peers[0].Addr, Peers: peers, ClientAddr: "127.0.0.1:11300",
		Tick: testTick, Logger: zerolog.New(out), listener: ln, Log: NewMemoryLog(ids, 0)}
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := StartNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Close()
		if t.Failed() {
			t.Logf("m1's log:\n%s", out)
		}
	})
	return n, out
}

// helloAs is a hello from member name of n's cluster, to n.
func helloAs(n *Node, name string) hello {
	return hello{Version: helloVersion, Kind: streamMessages, Cluster: n.cfg.ClusterID,
		FromID: MemberID(name), From: name, To: n.self.Name, Client: "127.0.0.1:1"}
}

// exchange writes h on conn and reads the answer.
func exchange(t *testing.T, conn net.Conn, h hello) (*hello, error) {
	t.Helper()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(appendHello(nil, &h)); err != nil {
		return nil, err
	}
	return readHello(conn)
}

// closedByPeer reports whether the peer closes conn (without sending
// anything more) within a few seconds.
func closedByPeer(conn net.Conn) bool {
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	_, err := conn.Read(b[:])
	return err != nil && !os.IsTimeout(err)
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestHelloRefused: a peer naming another cluster, a name that is not a
// member, another receiver, a wrong id, another hello version or no
// protocol in common is answered with the reason and closed; garbage, a
// message not from the sender, a frame past the limit and a frame of the
// other protocol end the connection too; each is counted, and the same
// peer's refusals are logged once per interval.
func TestHelloRefused(t *testing.T) {
	n, out := startLone(t, nil)
	refused := func() uint64 { return n.Stats().Transport.Refused }

	for _, tc := range []struct {
		name   string
		change func(h *hello)
		want   string
	}{
		{"another cluster", func(h *hello) { h.Cluster++ }, "this member is in cluster"},
		{"not a member", func(h *hello) { h.From, h.FromID = "mallory", MemberID("mallory") }, `"mallory" is not a member`},
		{"not a member again", func(h *hello) { h.From, h.FromID = "mallory", MemberID("mallory") }, `"mallory" is not a member`},
		{"another receiver", func(h *hello) { h.To = "m3" }, "this member is m1, not m3"},
		{"another id", func(h *hello) { h.FromID = 7 }, "member m2 has Raft id"},
		{"another protocol", func(h *hello) { h.Version = 9 }, "protocol version 9"},
		{"another stream", func(h *hello) { h.Kind = 7 }, "unknown stream kind 7"},
		{"no protocol in common", func(h *hello) { h.Max, h.Incarnation = 1, 5 }, "protocols up to 1; this member speaks 2 to 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := refused()
			h := helloAs(n, "m2")
			tc.change(&h)
			conn := dial(t, n.Addr())
			answer, err := exchange(t, conn, h)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(answer.Refusal, tc.want) || answer.From != "m1" {
				t.Errorf("answer %+v, want a refusal with %q", answer, tc.want)
			}
			if !closedByPeer(conn) {
				t.Error("the connection stays open")
			}
			testproc.WaitFor(t, 5*time.Second, "the refusal counted", func() bool { return refused() == before+1 })
		})
	}
	if got := strings.Count(out.String(), `"peer":"mallory"`); got != 1 {
		t.Errorf("mallory's two refusals logged %d times:\n%s", got, out)
	}

	t.Run("garbage", func(t *testing.T) {
		before := refused()
		conn := dial(t, n.Addr())
		if _, err := conn.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if !closedByPeer(conn) {
			t.Error("the connection stays open")
		}
		testproc.WaitFor(t, 5*time.Second, "the refusal counted", func() bool { return refused() == before+1 })
	})
	frames := map[string]func() []byte{
		"a message from another member": func() []byte {
			b, _ := appendFrame(nil, &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(MemberID("m3")),
				To: new(n.self.ID), Term: new(uint64(1))})
			return b
		},
		"a frame past the limit": func() []byte { return binary.BigEndian.AppendUint32(nil, maxFrame+1) },
		"a snapshot among messages": func() []byte {
			b, _ := appendFrame(nil, &pb.Message{Type: pb.MsgSnap.Enum(), From: new(MemberID("m2")),
				To: new(n.self.ID), Snapshot: &pb.Snapshot{}})
			return b
		},
	}
	heartbeat := envelope{m: &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(MemberID("m2")),
		To: new(n.self.ID), Term: new(uint64(1))}}
	v3 := map[string]func() []byte{
		"a protocol-2 frame in protocol 3": func() []byte {
			b, _ := appendFrame(nil, heartbeat.m)
			return b
		},
	}
	for name, frame := range v3 {
		frames[name] = frame
	}
	for name, frame := range frames {
		t.Run(name, func(t *testing.T) {
			before := refused()
			conn := dial(t, n.Addr())
			h := helloAs(n, "m2")
			if v3[name] != nil {
				h.Max, h.Incarnation = maxProtocol, 9
			}
			answer, err := exchange(t, conn, h)
			if err != nil || answer.Refusal != "" || answer.Max != maxProtocol {
				t.Fatalf("a member's hello: %+v, %v", answer, err)
			}
			if _, err := conn.Write(frame()); err != nil {
				t.Fatal(err)
			}
			if !closedByPeer(conn) {
				t.Error("the connection stays open")
			}
			testproc.WaitFor(t, 5*time.Second, "the refusal counted", func() bool { return refused() == before+1 })
		})
	}
	if st := n.Status(); st.Term > 1 || st.Leader != "" {
		t.Errorf("refused peers changed the member: %+v", st)
	}
}

// testCA is a certificate authority made for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	pem  []byte
}

var serial atomic.Int64

func newTestCA(t *testing.T, name string) *testCA {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue makes a member's certificate for ips, for both ends of TLS.
func (ca *testCA) issue(t *testing.T, ips ...net.IP) (certPEM, keyPEM []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: "member"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func (ca *testCA) tlsCert(t *testing.T, ips ...net.IP) tls.Certificate {
	c, k := ca.issue(t, ips...)
	cert, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestMutualTLS: three members with one certificate from a test CA (for
// 127.0.0.1) elect, replicate and acknowledge over TLS 1.3. A peer with a
// certificate from another CA, with none, speaking plaintext, or with a
// certificate from the CA that is not for the member it claims to be,
// is refused and counted.
func TestMutualTLS(t *testing.T) {
	ca := newTestCA(t, "sprout members")
	dir := t.TempDir()
	certPEM, keyPEM := ca.issue(t, net.ParseIP("127.0.0.1"))
	files := map[string][]byte{"member.pem": certPEM, "member-key.pem": keyPEM, "ca.pem": ca.pem}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := newNetCluster(t, 3, 100, func(cfg *NodeConfig) {
		cfg.TLSCert, cfg.TLSKey, cfg.TLSCA = filepath.Join(dir, "member.pem"), filepath.Join(dir, "member-key.pem"),
			filepath.Join(dir, "ca.pem")
	})
	l := c.awaitServing(10 * time.Second)
	cl := newNetClient(l, "work")
	_, pos := cl.put("over TLS")
	awaitAck(t, l.Journal(), pos, 5*time.Second)
	c.converged(l, 5*time.Second)
	if !strings.Contains(c.output.String(), `"tls":true`) || strings.Contains(c.output.String(), "plaintext") {
		t.Error("the members do not say they use TLS")
	}

	target := c.nodes["m1"]
	tlsRefused := func() uint64 { return target.Stats().Transport.TLSRefused }
	localhost := net.ParseIP("127.0.0.1")
	for _, tc := range []struct {
		name string
		cfg  *tls.Config // nil: plaintext
		// refusal is the hello's answer, for a peer TLS lets through.
		refusal string
	}{
		{"another CA", &tls.Config{InsecureSkipVerify: true,
			Certificates: []tls.Certificate{newTestCA(t, "other").tlsCert(t, localhost)}}, ""},
		{"no certificate", &tls.Config{InsecureSkipVerify: true}, ""},
		{"plaintext", nil, ""},
		{"not the member's certificate", &tls.Config{RootCAs: ca.pool, ServerName: "127.0.0.1",
			Certificates: []tls.Certificate{ca.tlsCert(t, net.ParseIP("127.0.0.9"))}}, "certificate is not for member address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tlsRefused()
			conn := dial(t, target.Addr())
			if tc.cfg != nil {
				tc.cfg.MinVersion = tls.VersionTLS13
				conn = tls.Client(conn, tc.cfg)
			}
			answer, err := exchange(t, conn, helloAs(target, "m2"))
			switch {
			case tc.refusal != "" && (err != nil || !strings.Contains(answer.Refusal, tc.refusal)):
				t.Errorf("answer %+v, %v; want a refusal with %q", answer, err, tc.refusal)
			case tc.refusal == "" && err == nil:
				t.Errorf("answered %+v", answer)
			}
			testproc.WaitFor(t, 5*time.Second, "the refusal counted", func() bool { return tlsRefused() == before+1 })
		})
	}
	if got := target.Stats().Transport.Refused; got != 0 {
		t.Errorf("%d refusals counted as hello refusals", got)
	}
}

// TestPlaintextWarning: members that talk in plaintext off loopback say
// so once at start; on loopback they do not.
func TestPlaintextWarning(t *testing.T) {
	_, out := startLone(t, nil)
	if strings.Contains(out.String(), "plaintext") {
		t.Errorf("a warning on loopback:\n%s", out)
	}
	// The listener stays the test's; the address is what the warning reads.
	_, out = startLone(t, func(cfg *NodeConfig) { cfg.Listen = "0.0.0.0:7000" })
	if got := strings.Count(out.String(), "members talk in plaintext"); got != 1 {
		t.Errorf("%d warnings listening on every interface:\n%s", got, out)
	}
}

// TestTransportNeverBlocks: a peer that takes the hello and then reads
// nothing fills the connection, then the queue: sends still return at
// once, the rest is dropped and counted, the peer is reported
// unreachable, and closing the transport does not wait for the stuck
// write.
func TestTransportNeverBlocks(t *testing.T) {
	self := Member{Name: "m1", ID: MemberID("m1")}
	const cluster = 7
	hole := listenHole(t, cluster, self, minProtocol)

	var unreachable atomic.Int64
	tr, err := newTransport(transportConfig{
		self: self, members: []Member{self, hole}, cluster: cluster, listen: "127.0.0.1:0",
		queue: 16, log: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	tr.attach(group0, groupEnd{
		deliver:         func(*pb.Message) bool { return true },
		deliverSnapshot: func(*pb.Message) error { return nil },
		unreachable:     func(uint64) { unreachable.Add(1) },
		snapshotSent:    func(uint64, bool) {},
	})
	tr.start()
	testproc.WaitFor(t, 5*time.Second, "connected to the hole", tr.peers[hole.ID].up.Load)

	entry := &pb.Entry{Index: new(uint64(2)), Term: new(uint64(1)), Data: make([]byte, 64<<10)}
	var slowest time.Duration
	send := func(n int) {
		for range n {
			start := time.Now()
			tr.send(group0, []*pb.Message{{Type: pb.MsgApp.Enum(), To: new(hole.ID), From: new(self.ID), Entries: []*pb.Entry{entry}}})
			slowest = max(slowest, time.Since(start))
		}
	}
	send(2000)
	if st := tr.stats(); st.MessagesDropped == 0 || unreachable.Load() == 0 {
		t.Errorf("stats %+v, reported unreachable %d times", st, unreachable.Load())
	}
	// Fill the connection: while the writer empties the queue it is not
	// stuck yet; once the queue stays full, its write is.
	p := tr.peers[hole.ID]
	for round := 0; ; round++ {
		send(2 * cap(p.queue))
		waiting := time.Now().Add(300 * time.Millisecond)
		for len(p.queue) > 0 && time.Now().Before(waiting) {
			time.Sleep(time.Millisecond)
		}
		if len(p.queue) > 0 {
			break
		}
		if round == 1000 {
			t.Fatalf("the peer's connection never filled: %+v", tr.stats())
		}
	}
	if slowest > 100*time.Millisecond {
		t.Errorf("a send took %v", slowest)
	}
	st := tr.stats()
	start := time.Now()
	tr.close()
	if took := time.Since(start); took > writeTimeout/2 {
		t.Errorf("close took %v with a write stuck", took)
	}
	t.Logf("sends of 64 KiB, the slowest %v: %d written (%d MiB) before the connection filled, %d dropped; closed in %v",
		slowest, st.MessagesSent, st.MessagesSent>>4, st.MessagesDropped, time.Since(start))
}

// TestLoadTLSErrors: a TLS file that cannot be used stops the start in
// one line naming its flag.
func TestLoadTLSErrors(t *testing.T) {
	ca := newTestCA(t, "sprout members")
	dir := t.TempDir()
	certPEM, keyPEM := ca.issue(t, net.ParseIP("127.0.0.1"))
	write := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cert, key, caFile := write("cert.pem", certPEM), write("key.pem", keyPEM), write("ca.pem", ca.pem)
	junk := write("junk.pem", []byte("not PEM"))
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name          string
		cert, key, ca string
		want          string
	}{
		{"missing cert", missing, key, caFile, "--cluster-tls-cert and --cluster-tls-key"},
		{"key of junk", cert, junk, caFile, "--cluster-tls-cert and --cluster-tls-key"},
		{"missing CA", cert, key, missing, "--cluster-tls-ca"},
		{"CA of junk", cert, key, junk, "--cluster-tls-ca: " + junk + " holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadTLS(tc.cert, tc.key, tc.ca)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got %v, want one line with %q", err, tc.want)
			}
		})
	}
	if _, err := loadTLS(cert, key, caFile); err != nil {
		t.Error(err)
	}
}

// swappable is a TLSSource whose certificate and CA a test replaces.
type swappable struct {
	mu   sync.Mutex
	cert tls.Certificate
	pool *x509.CertPool
}

func (s *swappable) Certificate() *tls.Certificate {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cert
	return &c
}

func (s *swappable) Pool() *x509.CertPool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pool
}

// A TLSSource is read at each handshake, on both ends: once it gives a
// new certificate and CA, new connections use them.
func TestMemberTLSSource(t *testing.T) {
	ca1, ca2 := newTestCA(t, "one"), newTestCA(t, "two")
	ip := net.ParseIP("127.0.0.1")
	src := &swappable{cert: ca1.tlsCert(t, ip), pool: ca1.pool}
	m := newMemberTLS(src)
	handshake := func() (*x509.Certificate, error) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		errc := make(chan error, 1)
		go func() { errc <- tls.Server(a, m.server).Handshake() }()
		c := tls.Client(b, m.clientFor("127.0.0.1:7000"))
		if err := c.Handshake(); err != nil {
			return nil, err
		}
		if err := <-errc; err != nil {
			return nil, err
		}
		return c.ConnectionState().PeerCertificates[0], nil
	}
	first, err := handshake()
	if err != nil || first.Issuer.CommonName != "one" {
		t.Fatalf("first handshake: %v, %v", first, err)
	}
	src.mu.Lock()
	src.cert, src.pool = ca2.tlsCert(t, ip), ca2.pool
	src.mu.Unlock()
	second, err := handshake()
	if err != nil || second.Issuer.CommonName != "two" {
		t.Fatalf("after the swap: %v, %v", second, err)
	}
}

// chunkReader is a SnapshotReader of n chunks of size bytes.
type chunkReader struct {
	n, size int
}

func (r *chunkReader) Next() ([]byte, error) {
	if r.n == 0 {
		return nil, io.EOF
	}
	r.n--
	return make([]byte, r.size), nil
}

func (r *chunkReader) Close() {}

// recordingEnd is a group's end that records what reaches it.
type recordingEnd struct {
	msgs      chan *pb.Message
	snapshots chan *pb.Message // stepped whole
	spooled   atomic.Int64     // snapshot bytes received
	sent      chan bool        // the fates of the snapshots sent
}

func newRecordingEnd() *recordingEnd {
	return &recordingEnd{msgs: make(chan *pb.Message, 64), snapshots: make(chan *pb.Message, 4), sent: make(chan bool, 4)}
}

func (r *recordingEnd) end(chunks int) groupEnd {
	return groupEnd{
		deliver:         func(m *pb.Message) bool { r.msgs <- m; return true },
		deliverSnapshot: func(m *pb.Message) error { r.snapshots <- m; return nil },
		openSnapshot: func(*pb.Message) (SnapshotReader, error) {
			return &chunkReader{n: chunks, size: snapshotChunk}, nil
		},
		receiveSnapshot: func(context.Context, *pb.Message) (SnapshotSink, error) {
			return &memSink{
				write:  func(b []byte) error { r.spooled.Add(int64(len(b))); return nil },
				finish: func() error { return nil },
				abort:  func() {},
			}, nil
		},
		unreachable:  func(uint64) {},
		snapshotSent: func(_ uint64, ok bool) { r.sent <- ok },
	}
}

// TestTransportGroups: one connection per pair of members carries every
// group attached, each message to its own group's end; a message of a
// group the receiver does not hold is dropped and counted, and the
// connection carries on. Snapshots of two groups go to one peer at
// once, sharing the member's budget: together they take as long as
// their bytes at its rate; another of a group already sending fails at
// once.
func TestTransportGroups(t *testing.T) {
	const cluster, rate, chunks = 7, 16e6, 4
	var lns []net.Listener
	var members []Member
	for _, name := range []string{"m1", "m2"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		members = append(members, Member{Name: name, Addr: ln.Addr().String(), ID: MemberID(name)})
	}
	ends := map[string]map[groupID]*recordingEnd{}
	trs := map[string]*transport{}
	for i, m := range members {
		tr, err := newTransport(transportConfig{self: m, members: members, cluster: cluster, listener: lns[i],
			queue: 64, log: zerolog.Nop(), snapshotRate: rate})
		if err != nil {
			t.Fatal(err)
		}
		ends[m.Name] = map[groupID]*recordingEnd{}
		for _, g := range []groupID{0, 1} {
			ends[m.Name][g] = newRecordingEnd()
			tr.attach(g, ends[m.Name][g].end(chunks))
		}
		trs[m.Name] = tr
		tr.start()
		t.Cleanup(tr.close)
	}
	a, b := trs["m1"], trs["m2"]
	from, to := members[0].ID, members[1].ID
	msg := func(typ pb.MessageType, index uint64) *pb.Message {
		return &pb.Message{Type: typ.Enum(), From: new(from), To: new(to), Term: new(uint64(2)), Index: new(index)}
	}
	receive := func(g groupID, want *pb.Message) {
		t.Helper()
		select {
		case got := <-ends["m2"][g].msgs:
			if !proto.Equal(got, want) {
				t.Fatalf("group %d received %v, want %v", g, got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("group %d received nothing", g)
		}
	}
	a.send(1, []*pb.Message{msg(pb.MsgApp, 10)})
	a.send(0, []*pb.Message{msg(pb.MsgVote, 20)})
	receive(1, msg(pb.MsgApp, 10))
	receive(0, msg(pb.MsgVote, 20))

	a.attach(2, newRecordingEnd().end(chunks))
	a.send(2, []*pb.Message{msg(pb.MsgApp, 30)})
	a.send(0, []*pb.Message{msg(pb.MsgApp, 31)})
	receive(0, msg(pb.MsgApp, 31))
	if st := b.stats(); st.MessagesUnrouted != 1 || st.Refused != 0 {
		t.Errorf("the receiver's stats after a message of group 2: %+v", st)
	}
	// b has sent nothing, so its own connection to a may still be dialling.
	for deadline := time.Now().Add(5 * time.Second); b.peer(from).protocol.Load() != maxProtocol && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if b.peer(from).protocol.Load() != maxProtocol || a.peer(to).protocol.Load() != maxProtocol {
		t.Errorf("protocols %d and %d", b.peer(from).protocol.Load(), a.peer(to).protocol.Load())
	}

	snap := func(index uint64) *pb.Message {
		return &pb.Message{Type: pb.MsgSnap.Enum(), From: new(from), To: new(to), Term: new(uint64(2)),
			Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(index), Term: new(uint64(2))}}}
	}
	start := time.Now()
	a.send(0, []*pb.Message{snap(100)})
	a.send(1, []*pb.Message{snap(200)})
	a.send(0, []*pb.Message{snap(101)}) // group 0's first is still going
	if ok := <-ends["m1"][0].sent; ok {
		t.Fatal("a second snapshot of group 0 was taken while the first was sent")
	}
	for _, g := range []groupID{0, 1} {
		select {
		case ok := <-ends["m1"][g].sent:
			if !ok {
				t.Fatalf("group %d's snapshot failed", g)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("group %d's snapshot never ended", g)
		}
		if got := <-ends["m2"][g].snapshots; got.GetSnapshot().GetMetadata().GetIndex() != 100*uint64(g+1) {
			t.Errorf("group %d stepped snapshot %d", g, got.GetSnapshot().GetMetadata().GetIndex())
		}
		if n := ends["m2"][g].spooled.Load(); n != chunks*snapshotChunk {
			t.Errorf("group %d spooled %d bytes, want %d", g, n, chunks*snapshotChunk)
		}
	}
	// The budget is shared: together they take their bytes' time at its rate.
	least := time.Duration(float64(2*chunks*snapshotChunk) / rate * float64(time.Second))
	if took := time.Since(start); took < least {
		t.Errorf("two snapshots of %d bytes each took %v; the member's budget allows no less than %v", chunks*snapshotChunk, took, least)
	}
}

// TestTransportCountsWrites: MessageWrites counts the batches written,
// not the messages: each message sent once the one before it arrived
// goes in a write of its own, and messages queued at once share one.
func TestTransportCountsWrites(t *testing.T) {
	trs := startItemsTransports(t, []string{"m1", "m2"}, nil)
	from, to := MemberID("m1"), MemberID("m2")
	var ends []*recordingEnd
	for _, tr := range trs {
		end := newRecordingEnd()
		tr.attach(1, end.end(1))
		ends = append(ends, end)
	}
	a := trs[0]
	send := func(index uint64) {
		t.Helper()
		a.send(1, []*pb.Message{{Type: pb.MsgApp.Enum(), From: new(from), To: new(to),
			Term: new(uint64(2)), Index: new(index)}})
		select {
		case got := <-ends[1].msgs:
			if got.GetIndex() != index {
				t.Fatalf("received the message of index %d, want %d", got.GetIndex(), index)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the message of index %d never came", index)
		}
	}
	send(1) // the connection is up once it came
	// The writer counts a message sent once its flush returned, after it
	// came.
	testproc.WaitFor(t, 5*time.Second, "the first message counted sent", func() bool {
		return a.stats().MessagesSent == 1
	})
	before := a.stats()
	for i := range uint64(3) {
		send(2 + i)
	}
	testproc.WaitFor(t, 5*time.Second, "three more messages counted sent", func() bool {
		return a.stats().MessagesSent-before.MessagesSent == 3
	})
	if writes := a.stats().MessageWrites - before.MessageWrites; writes != 3 {
		t.Errorf("three messages, each sent once the last came, counted in %d writes, want 3", writes)
	}

	// Fifty queued at once: the writer, woken by the first, finds the
	// others queued by the time it writes (a write takes microseconds,
	// queueing one a fraction of that), and writes them together.
	before = a.stats()
	var batch []*pb.Message
	for i := range uint64(50) {
		batch = append(batch, &pb.Message{Type: pb.MsgApp.Enum(), From: new(from), To: new(to),
			Term: new(uint64(2)), Index: new(10 + i)})
	}
	a.send(1, batch)
	for range batch {
		select {
		case <-ends[1].msgs:
		case <-time.After(5 * time.Second):
			t.Fatal("a message of the fifty never came")
		}
	}
	testproc.WaitFor(t, 5*time.Second, "the fifty counted sent", func() bool {
		return a.stats().MessagesSent-before.MessagesSent == 50
	})
	if writes := a.stats().MessageWrites - before.MessageWrites; writes == 0 || writes >= 50 {
		t.Errorf("fifty messages queued at once counted in %d writes, want from 1 to 49", writes)
	}
}

// TestTransportStrangers: a joining member takes a hello from a member it
// has no address for at the address the hello gives (a wildcard host:
// the connection's), only once the hello passes every check, and not
// under a name or id another peer has; the book then keeps such a peer
// only where it names it alike, and no stranger is taken after it, nor
// a hint (--cluster-peers) that the book does not name.
func TestTransportStrangers(t *testing.T) {
	self := Member{Name: "m4", ID: 44, Addr: "127.0.0.1:7004"}
	const cluster = 7
	tr, err := newTransport(transportConfig{self: self, members: []Member{self}, cluster: cluster,
		listen: "127.0.0.1:0", queue: 16, log: zerolog.Nop(), joining: true,
		hints: map[string]string{"m2": "127.0.0.1:7002", "m7": "127.0.0.1:7007"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.close)
	from := func(name string, id uint64, addr string) *hello {
		return &hello{Version: helloVersion, Kind: streamMessages, Cluster: cluster, FromID: id,
			From: name, To: "m4", Max: maxProtocol, Incarnation: 1, Addr: addr}
	}
	check := func(h *hello) (*peer, string) {
		p, refusal, _ := tr.check(h, nil, "10.1.2.3:5555")
		return p, refusal
	}
	bad := from("m1", 11, "0.0.0.0:7001")
	bad.Kind = 99
	if _, refusal := check(bad); refusal == "" || tr.peer(11) != nil {
		t.Fatalf("a stranger's hello of an unknown kind: refusal %q, peer %v", refusal, tr.peer(11))
	}
	p, refusal := check(from("m1", 11, "0.0.0.0:7001"))
	if refusal != "" || p == nil || p.Addr != "10.1.2.3:7001" {
		t.Fatalf("m1's hello: refusal %q, peer %+v", refusal, p)
	}
	if _, refusal := check(from("m9", 11, "127.0.0.1:7009")); refusal == "" {
		t.Error("a stranger with m1's id was taken")
	}
	if p, refusal := check(from("m2", 22, "")); refusal != "" || p.Addr != "127.0.0.1:7002" {
		t.Errorf("m2, a hint: refusal %q, peer %+v", refusal, p)
	}
	if _, refusal := check(from("m3", 33, "127.0.0.1:7003")); refusal != "" {
		t.Fatalf("m3's hello: %q", refusal)
	}
	// The book names m1 at another address, m3 as its hello did, m5 not
	// heard from.
	book := []Member{self, {Name: "m1", ID: 11, Addr: "m1.example:7001"}, {Name: "m2", ID: 22, Addr: "127.0.0.1:7002"},
		{Name: "m3", ID: 33, Addr: "127.0.0.1:7003"}}
	tr.booked(book)
	if tr.peer(11) != nil || tr.peer(33) == nil || tr.peer(22) == nil {
		t.Errorf("after the book: m1 %v (want none: the book has it elsewhere), m3 %v, m2 %v", tr.peer(11), tr.peer(33), tr.peer(22))
	}
	for _, m := range book {
		tr.addPeer(m)
	}
	if p := tr.peer(11); p == nil || p.Addr != "m1.example:7001" {
		t.Errorf("m1 after the book: %+v", p)
	}
	if _, refusal := check(from("m6", 66, "127.0.0.1:7006")); refusal != `"m6" is not a member` {
		t.Errorf("a stranger after the book: refusal %q", refusal)
	}
	if _, refusal := check(from("m7", 77, "")); refusal != `"m7" is not a member` || tr.peer(77) != nil {
		t.Errorf("a hint the book does not name, after the book: refusal %q, peer %v", refusal, tr.peer(77))
	}
}

package engine_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
)

// recordingConn keeps every byte the server sent, so that its TLS records
// can be looked at; while holding, it keeps what the client writes, for
// send to write at once.
type recordingConn struct {
	net.Conn
	mu      sync.Mutex
	got     []byte
	holding bool   // client goroutine only
	held    []byte // client goroutine only
}

func (r *recordingConn) Write(p []byte) (int, error) {
	if r.holding {
		r.held = append(r.held, p...)
		return len(p), nil
	}
	return r.Conn.Write(p)
}

// send writes what was held in one write, so that the server reads it
// in one read. tls.Conn's CloseWrite leaves a write deadline of now.
func (r *recordingConn) send() error {
	r.holding = false
	_ = r.Conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := r.Conn.Write(r.held)
	return err
}

func (r *recordingConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.mu.Lock()
	r.got = append(r.got, p[:n]...)
	r.mu.Unlock()
	return n, err
}

// lastRecordType is the content type of the last whole TLS record the
// server sent, 0 if none.
func (r *recordingConn) lastRecordType() byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.got
	var last byte
	for len(b) >= 5 {
		n := 5 + (int(b[3])<<8 | int(b[4]))
		if len(b) < n {
			break
		}
		last = b[0]
		b = b[n:]
	}
	return last
}

// dialRecorded is a TLS 1.2 client of srv's TLS port, so that its alert
// records show, over a recordingConn; closed at the test's end, and
// given 10 s.
func dialRecorded(t *testing.T, srv *engine.Server, ca *testproc.CA) (*recordingConn, *tls.Conn) {
	t.Helper()
	raw, err := net.DialTimeout("tcp", srv.TLSAddr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingConn{Conn: raw}
	c := tls.Client(rec, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS12})
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return rec, c
}

// tlsAlertRecord is an alert's content type on the wire, close_notify's
// among them. Over TLS 1.2 it shows; TLS 1.3 hides it in application
// data (23).
const tlsAlertRecord = 21

// TestTLSCloseNotifyAfterLastReply: docs/tls.md promises that a TLS
// client that sends close_notify, or quit, gets every reply to what it
// sent before, then Sprout's close_notify, whichever part of the engine
// ends the session: the event loop's read of the client's input (OnTraffic),
// the flusher of replies held for the log (-b) once the log has them,
// or the answer to a reserve that waited. A bare TCP close after the last
// reply, which the last two used to make, cannot be told from a stream
// cut short. The client (TLS 1.2, so that the alert record shows) reads to
// the end of the stream, and the server's last record must be an alert.
func TestTLSCloseNotifyAfterLastReply(t *testing.T) {
	for _, tc := range []struct {
		name        string
		script      string
		closeNotify bool // the client sends close_notify after script
		logged      bool // the replies are held for the log until the session's input has ended
		want        string
	}{
		{name: "close_notify, closed from OnTraffic", script: "put 0 0 60 1\r\nx\r\n", closeNotify: true,
			want: "INSERTED 1\r\n"},
		{name: "quit, closed from OnTraffic", script: "reserve-with-timeout 0\r\nquit\r\n",
			want: "TIMED_OUT\r\n"},
		{name: "close_notify, closed by the held replies' flusher", script: "put 0 0 60 1\r\nx\r\n",
			closeNotify: true, logged: true, want: "INSERTED 1\r\n"},
		{name: "quit, closed by the held replies' flusher", script: "put 0 0 60 1\r\nx\r\nquit\r\n",
			logged: true, want: "INSERTED 1\r\n"},
		{name: "quit, closed by a waiting reserve's answer", script: "reserve-with-timeout 1\r\nquit\r\n",
			want: "TIMED_OUT\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gate *gatedLog
			var st *store.Store
			if tc.logged {
				gate, st = gatedStore(t)
				gate.shut()
			} else {
				st = store.New(store.Options{})
			}
			ca := testproc.NewTestCA(t, "sprout test CA")
			srv, _, _ := startServerOn(t, engine.Config{TLS: &engine.TLSConfig{Address: "127.0.0.1:0",
				Config: &tls.Config{Certificates: []tls.Certificate{ca.TLSCert(t, "server", time.Time{}, "127.0.0.1")}}}}, st)

			rec, c := dialRecorded(t, srv, ca)
			if err := c.Handshake(); err != nil {
				t.Fatal(err)
			}
			// The script and close_notify go in one write: the session
			// reads its input's end with the commands.
			rec.holding = true
			if _, err := c.Write([]byte(tc.script)); err != nil {
				t.Fatal(err)
			}
			if tc.closeNotify {
				if err := c.CloseWrite(); err != nil {
					t.Fatal(err)
				}
			}
			if err := rec.send(); err != nil {
				t.Fatal(err)
			}
			if gate != nil {
				// The session's input has ended (close_notify or quit)
				// with its reply held: only the flusher can close it.
				waitFor(t, "the reply to be held for the log", func() bool { return srv.HeldSessions() == 1 })
				gate.open()
			}
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatalf("read: %v (got %q)", err, got)
			}
			if last := rec.lastRecordType(); string(got) != tc.want || last != tlsAlertRecord {
				t.Fatalf("got %q, the last record of type %d; want %q, then close_notify (type %d)",
					got, last, tc.want, tlsAlertRecord)
			}
		})
	}
}

// TestTLSCloseNotifyAtStop: a server that stops ends each TLS session
// with close_notify, an idle one or one whose reserve waits, so that its
// client reads the end of its stream, not a stream cut short.
func TestTLSCloseNotifyAtStop(t *testing.T) {
	ca := testproc.NewTestCA(t, "sprout test CA")
	srv, network, addr := startServerOn(t, engine.Config{TLS: &engine.TLSConfig{Address: "127.0.0.1:0",
		Config: &tls.Config{Certificates: []tls.Certificate{ca.TLSCert(t, "server", time.Time{}, "127.0.0.1")}}}},
		store.New(store.Options{}))
	type client struct {
		rec *recordingConn
		c   *tls.Conn
	}
	var clients []client
	for _, script := range []string{"use t\r\n", "reserve-with-timeout 60\r\n"} {
		rec, c := dialRecorded(t, srv, ca)
		if _, err := c.Write([]byte(script)); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, client{rec, c})
	}
	if _, err := io.ReadFull(clients[0].c, make([]byte, len("USING t\r\n"))); err != nil {
		t.Fatal(err)
	}
	plain := dialRaw(t, network, addr)
	waitFor(t, "the reserve to wait", func() bool {
		plain.send("stats\r\n")
		got, _ := plain.reply(5 * time.Second)
		return strings.Contains(got, "\ncurrent-waiting: 1\n")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for i, cl := range clients {
		got, err := io.ReadAll(cl.c)
		if last := cl.rec.lastRecordType(); err != nil || last != tlsAlertRecord {
			t.Errorf("client %d after the stop: read %q (err %v), the last record of type %d; want close_notify (type %d)",
				i, got, err, last, tlsAlertRecord)
		}
	}
}

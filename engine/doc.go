// Package engine serves the beanstalkd protocol on a gnet reactor: it owns
// connections, feeds their bytes to a codec.Parser, executes each command
// on the store and writes the replies.
//
// # Accepting
//
// Sprout owns the listening socket and its accept loop (acceptor); the
// event loops are a gnet client engine that each accepted connection is
// enrolled into. gnet's own acceptor would stop the whole engine on EMFILE.
// The accept loop refuses connections past MaxConnections (closed at once,
// counted, logged once per interval) and, out of descriptors, keeps a spare
// one to accept and close the waiting connection, so the open ones are
// served on and accepting resumes when descriptors are freed.
//
// A cluster member routes connections (Config.Route): each accepted one is
// shown to the Route first, which may take it elsewhere (to a proxy to the
// leader), and Serve takes back one it gave away. Such a server also keeps
// each loop's sessions in a set, so that CloseClients can end them all
// when the member stops leading; without a Route nothing is kept, and the
// accept loop pays one nil check per connection. The store is the same
// for the server's life: a member that installs a snapshot, or rebuilds
// after losing a leadership, empties and fills it in place
// (store.Store.Reset), once its sessions are closed.
//
// An idle connection's memory is mostly gnet's: its conn and the two
// addresses it keeps from Go's accepted net.Conn (gnet enrolls only a
// *net.TCPConn or *net.UnixConn, so the accept goes through net.Listener).
// The accept loop points those addresses' IPs at shared copies before the
// hand-over, so the socket addresses they were decoded from are not kept,
// and gnet keeps nothing per connection that it does not use (patch 0006
// in third_party/gnet). Sprout's own share is the session, which embeds the store's client and
// the parser; what only some connections need (replies held for the log,
// a put in progress, reservations, a blocked reserve's waiter) is made
// when first needed.
//
// # The path of a byte
//
// gnet calls OnTraffic on the connection's event loop. serve peeks at
// everything buffered, lets the parser consume whole command lines (a
// partial line stays in gnet's buffer) and put bodies, dispatches each
// command and appends its reply to the loop's batch (replies): small
// replies are copied into one buffer, a large job body is referenced where
// the job keeps it, and the batch goes out in one write or writev. gnet
// copies only what the socket does not take at once into its outbound
// buffer, which the output cap bounds.
//
// # Put bodies
//
// A body that arrives whole with its header is handed to the store where
// it lies in gnet's buffer, and the store copies it once (into the job's
// own allocation when small). gnet reads at most readBufferCap (16 KiB)
// per event; a body that goes on past what gnet has read is allocated once,
// gets gnet's part copied, and its rest read from the socket straight into
// it (readBody), as beanstalkd reads a body: the loop owns the descriptor,
// and the read takes at most what the body lacks, so the next command
// stays for gnet. The body is made whole at once when it lacks at most
// four times what has arrived (a 64 KiB body after a first read that came
// with its header), so a client that stops half way holds at most five
// times what it sent; a larger one is made for the bytes the socket says
// have arrived (FIONREAD), at the cost of that one more system call. The
// body's memory is not zeroed first (codec.Parser.BodySpace): all of it is
// written before anything reads it.
// A 64 KiB body is now copied out of the kernel once and 16 KiB of it once
// more; it used to be zeroed, then copied whole twice (out of the kernel,
// then out of gnet's buffer).
//
// Without a log, the memory of large bodies (above 32 KiB) is recycled
// (bodies.go): the store hands back the body of each job it forgets, and
// the next put of that size reuses it once no event loop can still be
// writing it to a client (a grace period over the loops' callbacks; see
// bodies.go). Why, as measured: with 5 producers writing put line and
// 64 KiB body in one write and 5 consumers, Sprout did 0.72× beanstalkd's
// jobs/s at 1.6× its CPU per job, although both made the same system calls
// (7 to 9 per job, strace). The difference was the kernel's copies into
// and out of the bodies, twice as slow in Sprout: each body was a fresh
// allocation, memory last touched a collection ago, while beanstalkd's
// malloc hands back the body it just freed, still in the cache. Every Go
// body allocation cost 12 µs; with a ring of 16 reused buffers the
// server matched beanstalkd's CPU per job, with 1,024 (64 MiB) it did not.
// With the pool, the quietest run gave 1.07× beanstalkd's jobs/s at 0.98×
// its CPU per job (sproutbench -only body-64k-c5, 5 repetitions), busier
// ones 0.90–0.98× at 0.93–1.08×: the CPU per job is now beanstalkd's, the
// goal of 1.1× the jobs/s not shown on this shared machine. With a log,
// bodies are read after their jobs are gone (the log's writer, a
// cluster's replication), so nothing is recycled.
//
// # TLS
//
// With Config.TLS the server also listens for TLS clients (tls.go). Each
// accepted connection is handshaken in Go (crypto/tls) on a goroutine of
// its own, bounded by the handshake timeout (10 s by default, so a
// slowloris of handshakes costs goroutines, not event loops); meanwhile it
// counts against MaxConnections, and handshakes together against half the
// buffer budget (handshakeReserve each), past which new TLS connections are
// closed at once. The handshake reads the socket one record at a time, so
// nothing the client sends after it is taken from the socket. Then the
// socket is enrolled in an event loop like any other, and its session's
// gnet.Conn is a tlsConn: on each OnTraffic the whole records gnet holds
// are handed to the same tls.Conn, whose net.Conn is now a pair of buffers
// the loop fills and empties (tlsIO), decrypted into the session's own
// plaintext buffer, and parsed and dispatched by the same session code as
// plaintext; replies are encrypted by that tls.Conn as they are written
// and handed to gnet at once. A partial record stays in gnet's buffer, so
// the input cap and the buffer budget count ciphertext and plaintext
// alike. close_notify ends the input as a half-close does (every reply
// is sent, then the server's close_notify). Large bodies are not read
// from the socket straight into the job over TLS (the socket holds
// ciphertext): each record is decrypted once, then copied into the body.
//
// The other design, kTLS (the handshake in Go, then the traffic keys
// given to the kernel with setsockopt(SOL_TLS) so that gnet reads and
// writes plaintext), was measured as far as it could be and not taken:
//   - This machine's kernel has no kTLS (CONFIG_TLS is not set;
//     setsockopt(TCP_ULP, "tls") fails with ENOENT), so it could not be
//     measured here; a container cannot load the module where its host
//     has not, so TLS in Go would be needed beside it anyway.
//   - It is not safe with gnet as it is: the kernel passes a record that
//     is not application data (close_notify, a TLS 1.3 KeyUpdate) to a
//     plain read(2) as EIO, which gnet treats as a broken connection, so
//     a client's half-close over TLS would lose its replies; a KeyUpdate
//     would need the kernel's rekeying (Linux 6.13+) driven from user
//     space. crypto/tls's KeyLogWriter gives the TLS 1.3 traffic secrets
//     but not TLS 1.2's server random, which the keys derive from (it
//     would have to be parsed out of the handshake's bytes), and the
//     sequence numbers would have to be inferred from what crypto/tls
//     sent and received (its session tickets included).
//
// TLS in Go on the event loops costs the encryption and no more system
// calls than plaintext. Measured against beanstalkd behind stunnel and
// against Sprout's own plaintext in the same runs (sproutbench -only
// '^(tls-.*|roundtrip-c1|prodcons-c10|prodcons-c100)$', 5 repetitions, on
// a busy 2-core machine; an earlier run's figures in parentheses): round
// trips on 1 connection 2.62× (1.77×) beanstalkd+stunnel; producer/
// consumer at 10 connections 2.66× (2.83×) and 0.68× (0.69×) Sprout's
// plaintext; at 100, 7.44× (3.27×) and 0.85× (0.54×: the load generator,
// on the same cores, pays for TLS too); the server's CPU per job 0.07–0.25×
// that of beanstalkd and stunnel together, 1.3× Sprout's plaintext for
// producer/consumer. Details in benchmarks/README.md, "TLS".
//
// # The queue, and answers that come later
//
// Every command that touches the queue runs on the session's Queue
// (queue.go): on a single node the connection's own store.Client
// (localQueue, the same calls as before at the same cost), on a cluster
// member whatever Config.Queues makes (its router). A Queue method either
// answers now, filling in the loop's scratch Answer, or says the answer is
// pending. Either way the reply is encoded from the Answer by one function
// (session.answer), so a reply is the same bytes whenever it comes.
//
// A pending answer marks the session awaiting (the command in flight) and
// stops parsing, so pipelined commands wait, in order, as behind a
// blocking reserve in beanstalkd: one command is in flight per session,
// unless its Queue pipelines the command (Pipeliner: a cluster member's
// session whose commands go to another member). Then the session goes
// on with the commands that follow while each is one the Queue
// pipelines, up to MaxPipelined in flight with MaxPipelinedBytes of put
// bodies; a command answered at once behind them (a put's body refused)
// has its reply kept until theirs are sent (pipeline.go), and any other
// command is put back, unparsed, until every answer has come. A Queue's
// answers reach the loop through its remote, in the order the Queue
// delivered them, several to one Execute.
// A reserve with nothing to take is the single node's pending answer: the
// store later calls the session's Notifier from whichever goroutine freed
// a job (another loop's put, the timer goroutine's delay expiry, TTR or
// timeout); another Queue calls the session's Answers. Neither touches the
// connection directly: the reply goes to the owning loop with
// EventLoop().Execute, which writes it, ends the wait and serves the input
// that queued up meanwhile. A session closed while awaiting is never
// answered: its Queue is closed (a reserved job goes back), and an answer
// that comes after is dropped on the loop. Draining and stopping do not
// wait for pending answers, only for reserved jobs and held replies.
//
// # A client's half-close
//
// A client that pipelines commands and then shuts down its writing side
// (nc -N, a batch script) is served as beanstalkd serves it: every command
// received before the end of file runs and every reply is delivered, then
// the connection closes. gnet itself would close at the end of file and
// drop what the socket did not take at once; the handler is a
// gnet.HalfCloseHandler (patch 0003 of third_party/gnet), so gnet stops
// reading and leaves the connection to the session (halfClose). The
// session serves what is buffered under the output cap and the buffer
// budget, as any other, so a client that never reads is still cut off. A
// reserve that waits, or would wait, ends in TIMED_OUT at once, as in
// beanstalkd: nothing the client sends can follow it; the commands after
// it run. What is left when no whole command remains (a line or a body cut
// short) is dropped. The session closes the connection once no reply is
// held for the log and gnet holds no unread one (finished; gnet reports no
// "sent", so OnTick polls, as for the budget).
//
// # Durability
//
// With a write-ahead log, the store leaves the client's PendingAck ahead of
// its AckSource's Acked position after a command that changed durable
// state or showed a job whose put may not be acknowledged yet (the store
// decides which; see its doc). The engine only compares the two, as the
// session's Queue reports them (Queue.AckNeeded): the reply, and every
// later reply on that connection, is held in order until the AckSource
// catches up and calls the loop's flusher for that source, which sends the
// held replies of every connection on that loop waiting for it in one
// task, so a client never hears INSERTED or DELETED for a change a crash
// could undo, and the event loop never waits for the disk. Commands keep
// being parsed meanwhile, so many pipelined commits share one fsync. Each
// held reply names its source, so that a member's local groups, each with
// its own journal, can be several; a loop has one flusher per source its
// sessions waited for, and a session waits in the one of its oldest held
// reply.
//
// # Limits
//
// gnet never caps outbound data, and reads a socket until told to pause
// (Conn.PauseReading, Sprout's gnet patch 0004), so the engine bounds
// both: a session whose outbound buffer passes MaxOutputBuffered stops
// being served (it is re-checked from OnTick until its client has read
// half of it); a session that cannot consume its input until an answer
// comes or its client reads (a waiting reserve, a full pipeline, that
// output cap) stops reading its socket at pauseReadingAt bytes unread, or
// one read (readBufferCap) below a smaller MaxInputBuffered, holding the
// client back as beanstalkd does, until it can; and a connection whose
// unparsed input passes MaxInputBuffered while it is read is closed. gnet
// hands each read to OnTraffic, which ends by deciding the pause
// (regulateInput), so a session held back is paused while one more read
// still fits under the cap (with a cap of one read or less, at its first
// byte unread), and once paused is not closed for its input. Other
// connections are unaffected. A paused session still learns of its
// client's end (gnet patch 0005, handler.OnPausedEnd): a reserve that
// waits then ends in TIMED_OUT and later ones do not wait, as after a
// half-close, so a client gone while paused is not left waiting for, and
// handed, a job.
//
// Over all connections, MaxBufferMemory bounds the bytes held for them:
// unread replies, unparsed input, partial put bodies and replies held for
// the log. Each session accounts for what it holds after every serve; a
// session with unread replies is polled from OnTick, since gnet reports no
// "drained". When the total passes the budget, the enforcer goroutine
// closes the sessions holding the most until it fits; their reserved jobs
// go back to ready as on any close. A referenced job body is the job's
// memory, not the connection's, and is not counted there.
//
// # Operations
//
// Stats, Limits, Ready and Draining may be read from any goroutine, and
// Config.Metrics is told how long each command took, on the loop that ran
// it. Ping runs a no-op task on every event loop and waits for all of
// them, so a loop stuck in a command shows in a health check; the loops
// are found once at start by enrolling one probe connection on each
// (gnet hands out a loop only through a connection).
//
// # Shutdown
//
// BeginShutdown closes the listener, makes put answer DRAINING and has the
// store hand no job out, so workers finish the jobs they hold; WaitIdle
// tells when none is reserved. Stop then sends the replies still held for
// the log and closes the connections (see Stop for the steps). Ping and
// Draining serve the health and readiness probes of internal/ops.
//
// # Files
//
//   - config.go: Config, its defaults and Resolve.
//   - server.go: the Server, New and Run.
//   - listener.go: the listening socket, the accept loop and Serve.
//   - clients.go: CloseClients, for cluster mode.
//   - eventloops.go: finding the event loops, and Ping, which checks that
//     each answers.
//   - loopstate.go: what one event loop's sessions share.
//   - handler.go: gnet's callbacks.
//   - session.go: one connection: parsing, serving, reading large bodies,
//     the half-close and closing.
//   - socket_linux.go, socket_bsd.go: the ioctl that asks a socket how
//     much has arrived, for bodies too large to be made whole at once.
//   - bodies.go: the pool that recycles large bodies, and its grace
//     period.
//   - tls.go: the TLS listener's handshakes, and the tls.Conn a TLS
//     session reads and writes through on its event loop.
//   - queue.go: the Queue interface, its Answer, and the single node's
//     Queue on the session's store client.
//   - dispatch.go: each command, executed on the session's Queue, and its
//     reply encoded from the Answer.
//   - replies.go: replies batched per loop and written in one writev.
//   - held.go: replies held until their AckSource acknowledges them, and
//     the per-loop, per-source flusher that sends them.
//   - budget.go: the buffer budget over all connections and its enforcer.
//   - stats.go: stats, stats-tube, stats-job and Limits.
//   - shutdown.go: draining, graceful shutdown and Stop.
package engine

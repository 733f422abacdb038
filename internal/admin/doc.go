// Package admin is Sprout's admin API: JSON over the HTTP side port
// (--http), under /api/v1, for operators, sproutctl and the web console.
// It also keeps the in-memory history the console charts, and the rules
// of access (Auth) the console's own handlers share.
//
// # Endpoints
//
//	GET    /api/v1/stats                  the stats figures: {"current-jobs-urgent": 0, ...}
//	GET    /api/v1/tubes                  {"tubes": [{"name": "default", "current-jobs-urgent": 0, ...}]}
//	GET    /api/v1/tubes/{name}           one tube's stats-tube figures
//	GET    /api/v1/tubes/{name}/jobs      ?state=ready|delayed|reserved|buried&limit=N&cursor=C&bodies=false
//	                                      {"jobs": [{"id": 1, "tube": ..., "state": ..., ..., "body": ..., "body-encoding": "text"}], "next": C or null}
//	POST   /api/v1/tubes/{name}/jobs      {"body": ..., "body-encoding": "text"|"base64", "pri": N, "delay": S, "ttr": S} → 201 {"id": N}
//	POST   /api/v1/tubes/{name}/kick      {"bound": N} → {"kicked": K}
//	POST   /api/v1/tubes/{name}/pause     {"delay": S} → {"paused": S}
//	POST   /api/v1/tubes/{name}/clear     {"state": "ready"|"delayed"|"buried"|"all"} → {"deleted": N}
//	GET    /api/v1/jobs/{id}              one job's stats-job figures, and its body
//	DELETE /api/v1/jobs/{id}              → {"deleted": 1}
//	POST   /api/v1/jobs/{id}/kick         → {"kicked": 1}
//	POST   /api/v1/tubes/{name}/move      {"group": N}: move the tube live (Fleet, several shard groups)
//	POST   /api/v1/placements/{prefix}    {"group": N}: place tubes by prefix; DELETE undoes it (Fleet)
//	POST   /api/v1/groups/grow            {"to": N}: grow the shard groups (Fleet)
//	POST   /api/v1/groups/{id}/moves      {"from", "to"}: move a group's replica (Fleet)
//	GET    /api/v1/history                the server's series, for charts (?since=UNIX)
//	GET    /api/v1/tubes/{name}/history   a tube's series ({name} "<other>": the tubes past the cap)
//	GET    /api/v1/session                whether the request is authenticated, and what it may do
//	POST   /api/v1/session                log in: {"token": ...} or the form field token
//	DELETE /api/v1/session                log out
//	GET    /api/v1/openapi.json           this list as an OpenAPI 3.1 document (open to every request)
//
// Each GET endpoint answers HEAD too, as net/http's convention has it:
// the same status and headers, without the body.
//
// openapi.json describes every endpoint, parameter, body and answer
// (OpenAPI, embedded and served); the tests check that it lists exactly
// the endpoints mounted (endpoints) and validate every answer they get
// against its schemas with kin-openapi, and docs/admin-api.md renders it.
//
// Figures carry the protocol's keys, in its order, typed: numbers as JSON
// numbers (rusage in seconds with a fraction), strings as strings,
// draining as a boolean (codec's Each walks them for both encodings). A
// job's body is text when it is valid UTF-8, else base64. Names are
// checked as the protocol checks them; a name with '/' is sent as %2F, and
// "." and ".." as %2E. Numbers are whole and within uint32, as the
// protocol's; a body may be up to -z bytes. Errors are {"error": "..."}:
// 400 bad input, 401 no or wrong credential, 403 not allowed, 404 no such
// job, tube or endpoint, 405, 409 a job in the wrong state (a delete of a
// reserved job, a kick of a job neither buried nor delayed), 413 a job's
// body over -z or a request's over its limit (a login's, JSON or form,
// 4 KiB), 429 too many failed attempts, 503 draining (a put) or not
// acknowledged in time, 507 the log's disk is full (a put or a kick: the
// change was refused and nothing was stored; deletes are never refused; a
// tube kick the disk stops after some jobs answers 200 with their count).
//
// # Listing
//
// A listing is store.Client.ListJobs: ready jobs by (priority, id),
// delayed and reserved ones by deadline, buried ones oldest burial first,
// at most store.MaxListPage a page (limit, default 100). The cursor is
// opaque (base64 of state:key:id) and stable while jobs come and go: a job
// that stays put is listed once over the pages. One of another state is
// 400. The tube's lock is held only to copy pointers or a batch of keys.
//
// # Changes and acknowledgement
//
// Each request is a client of the store of its own (store.NewClient,
// closed at its end), like a connection: a change takes the path of the
// protocol command that does it, so it is logged (and replicated in a
// cluster) and counted in stats-tube by the store. The engine's cmd-*
// figures count it too (Engine.CountCommand) as the protocol would: a put
// is a put, a tube kick one kick, a pause one pause-tube, a delete one
// delete, whatever its outcome (a put whose body is over -z too, as
// JOB_TOO_BIG is, but not one whose fields are refused 400, as BAD_FORMAT
// is not, nor a request too long to read); a clear of N jobs is N
// deletes, counted batch by batch; a kick-job, like the protocol's, is
// not counted. Reads are not counted.
//
// The store raises the client's PendingAck for every change and for every
// job shown (listed, peeked, its stats read), and the answer waits until
// the store's AckSource has reached it: at once in memory, once durable
// with -b, once a majority has it in a cluster. So an answer never shows a
// job a crash could take back, and a 201 for a put means the job is kept.
// The wait ends with the request, or after Config.AckTimeout with 503 (the
// change was made and may still become durable).
//
// # Bulk changes
//
// A clear (store.Client.ClearTube) and a tube kick (KickTube) move jobs in
// batches, holding the tube's lock for one batch at a time and sleeping
// between them twice as long as the batch took, so the event loops'
// commands on the tube wait for one batch at most and a bulk change takes
// a third of a core at most. A clear of a million jobs takes about 2 s in
// memory; benchmarks/cmd/adminbench measures what it does to the
// protocol's latency (its p99 stays within 2× of idle in memory).
//
// # Access
//
// With an admin token (--admin-token), every request under /api needs it,
// as "Authorization: Bearer TOKEN", or the cookie of a session opened with
// it (POST /api/v1/session; the cookie is HttpOnly, SameSite=Strict,
// Path=/, for DefaultSessionTTL). A change made with the cookie must also
// carry the session's CSRF token (X-CSRF-Token, or the form field
// csrf-token), which the login answers and GET /api/v1/session repeats;
// without it the answer is 403, the session being valid. A bearer token
// needs none: no other site can make a browser send that header. A
// missing or wrong credential is 401. Tokens are compared as SHA-256
// hashes in constant time. Failed attempts (a wrong token, an unknown
// session) are limited per remote address and over all of them (see
// failBurst); past the limit every credential from that address is
// answered 429 unexamined, and failures are logged at warn at most every
// 10 s, with a count, never with the credential. Sessions live in memory
// and end with the process.
//
// Without a token the API is read-only: figures and job metadata are
// shown, job bodies are not, and every change (and a login) is 403. The
// session endpoints answer with or without credentials. /metrics,
// /healthz and /readyz (internal/ops) are open either way.
//
// # Cluster mode
//
// In a cluster (Config.Cluster) every member serves the API, and every
// answer about jobs comes from the leader: reservations live on the
// leader only (internal/replication/doc.go, Time), so a follower's own
// store would show a reserved job as ready, and its changes would never
// be replicated. A request under /api/v1 (but the session endpoints) is
//
//   - served here when this member is the serving leader, on the node's
//     store (Config.Store). Its acknowledgement is the
//     member's journal's (replication.Journal, the store's AckSource): a
//     majority has the change. If this member stops serving while a
//     request waits (the leadership lost: the member then starts again
//     from its log), the wait ends at once with 503 saying the change may
//     or may not be kept by the new leader; never with a success. The
//     member then rebuilds its store in place (replication, "Losing
//     leadership"), its side port serving on.
//   - forwarded to the leader's --http (a reverse proxy,
//     net/http/httputil) when another member leads: members learn each
//     other's --http address from their hellos, and reach it over TLS
//     with Config.ForwardDialTLS (side ports served with --http-tls-cert).
//     The credentials are
//     checked here first, with this member's rules (Auth: 401, 403, CSRF
//     and the rate limit as on a single node), and the request then goes
//     to the leader with the admin token as a bearer token instead of the
//     cookie, so that a console session opened on any member keeps
//     working whichever member leads. The token must therefore be the
//     same on every member (with none on any, every member is read-only).
//     A forwarded request carries ForwardedHeader and is never forwarded
//     again: a member that gets one while it does not serve waits as
//     below, so two members with stale views cannot bounce a request. A
//     forwarded request the leader has not answered when this member
//     sees another leader, or none, is given up with 503 (a paused or
//     cut-off leader would hold it otherwise), as is one the leader does
//     not answer at all: either may have been done, as with any server
//     that goes away. A leader that refuses the connection (just lost)
//     is 503 too, saying nothing was sent. Each 503 carries Retry-After.
//   - held while no leader is known (an election), or its --http address
//     is not (its hello not read yet, or it serves no --http), for up to
//     Config.LeaderWait, then answered 503 naming what is missing.
//
// # Several shard groups
//
// With groups (Config.Groups: a cluster formed with --cluster-groups G >
// 1) each tube lives whole in one group, and "the leader" above is the
// leader of the group a request concerns (docs/design/shards.md S6):
//
//   - A tube's endpoints (/tubes/{name}, and its jobs, kick, pause and
//     clear) go to the leader of the group that owns the tube, a job's
//     (/jobs/{id}, its kick) to the leader of the group its id's prefix
//     names, and are served there on that group's store, or forwarded,
//     exactly as above, with ForwardedGroupHeader naming the group. A
//     member whose route names another group than the one a request was
//     forwarded for (a job whose tube moved to a group the forwarder
//     holds no replica of, and could not look in) forwards it once more,
//     to that group's leader; never a third time. A put thus lands in the tube's own group, where
//     the protocol's clients find it, and takes an id of that group's.
//     An id no group issues goes to group 0, which answers 404. While a
//     move between groups has frozen a tube (docs/design/shards.md 3.3),
//     its changes (a put, kick, pause or clear, a delete or kick of one
//     of its jobs) answer 503 with Retry-After and change nothing
//     (Groups.Unfrozen): the move would not carry them.
//   - GET /stats and GET /tubes are the fleet's: the member asks each
//     group's leader for its part (itself for those it serves, over
//     --http with GroupHeader for the others) and answers once every
//     part has come, as the protocol's stats and list-tubes do: the
//     queue's figures summed (router.SumStats, the default tube once),
//     current-waiting this member's sessions in a reserve, and the
//     engine's own figures (connections, commands, process) this
//     member's; the tubes listed group by group, each tube from the group
//     that owns it (every group's store holds a default tube; the owner's
//     is the one the protocol shows). A group whose leader gives no part
//     within LeaderWait fails the whole answer with 503, as a partial sum
//     would be a wrong one.
//   - The history, the session endpoints and the OpenAPI document stay as
//     above: the history samples group 0's store on group 0's leader.
//
// A request that carries GroupHeader was sent by another member for one
// group's part; it is answered only by that group's serving leader
// (else 503, never forwarded again).
//
// The session endpoints are always this member's: sessions live in the
// memory of the member that opened them, like its console's pages, which
// every member serves itself (internal/console). The history (below) is
// sampled only while this member serves: a follower keeps none, and a
// new leader's history starts empty at its election, as it does on a
// restart.
//
// # History
//
// History samples, on its own goroutine, every HistoryConfig.Interval (5
// s) and keeps the last Window (an hour): per tube and for the server,
// the jobs by state (ready, reserved, delayed, buried) and puts and
// deletes a second (from total-jobs and cmd-delete). Tubes are read with
// store.EachTube, which holds one tube's lock at a time. Past MaxTubes
// tubes with series of their own, new tubes are summed under "<other>"; a
// tube that goes away keeps its points until they leave the window. The
// JSON is made for a chart:
//
//	{"interval": 5, "timestamps": [unix seconds...],
//	 "series": {"ready": [...], "reserved": [...], "delayed": [...], "buried": [...],
//	            "puts": [per second...], "deletes": [...]}}
//
// with null where a series has no value (the tube did not exist then; the
// first sample's rates).
package admin

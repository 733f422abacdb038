package admin

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// DefaultAckTimeout bounds how long a request waits for what it changed or
// showed to be acknowledged (see doc.go) before it is answered 503.
const DefaultAckTimeout = 30 * time.Second

// Engine is what the API needs of the engine; *engine.Server has it.
type Engine interface {
	// Stats is the stats command's figures.
	Stats() codec.ServerStats
	// Draining reports whether puts are refused.
	Draining() bool
	// CountCommand counts n protocol commands in stats.
	CountCommand(c codec.Counter, n uint64)
}

// Config is what New needs.
type Config struct {
	// Store is the store the API serves, for the API's life (a cluster
	// member's is emptied and filled in place when a snapshot is
	// installed).
	Store  *store.Store
	Engine Engine
	// MaxJobSize is the server's -z: a longer body is refused with 413.
	MaxJobSize int
	// Token is the admin token; "" makes the API read-only.
	Token string
	// SessionTTL is how long a console session lasts; 0 means
	// DefaultSessionTTL.
	SessionTTL time.Duration
	// AckTimeout bounds the wait for acknowledgement; 0 means
	// DefaultAckTimeout.
	AckTimeout time.Duration
	// History configures the charts' history.
	History HistoryConfig
	// Cluster, if set, is this server's cluster member: the API is served
	// here while it leads, and forwarded to the leader otherwise (doc.go,
	// Cluster mode). LeaderWait bounds how long a request waits for a
	// leader; 0 means DefaultLeaderWait.
	Cluster    Cluster
	LeaderWait time.Duration
	// Groups, if set with more than one, are the cluster's shard groups:
	// each request goes to the leader of the group it concerns, and the
	// fleet's figures are gathered from every group (doc.go, Several
	// shard groups).
	Groups Groups
	// Fleet, if set, changes where the cluster's work lives: a cluster of
	// several shard groups.
	Fleet *Fleet
	// ForwardDialTLS, if set, reaches the leader's --http over TLS: it
	// dials addr and makes the TLS connection, checked against addr's
	// host; the members' side ports serve TLS (--http-tls-cert).
	ForwardDialTLS func(ctx context.Context, network, addr string) (net.Conn, error)
	Logger         zerolog.Logger
	// Now is the wall clock of sessions, rate limits and history; nil
	// means time.Now.
	Now func() time.Time
}

// API is the admin API's handler, for paths under /api/. Close stops its
// history sampler.
type API struct {
	st         *store.Store  // immutable
	engine     Engine        // immutable
	maxJobSize int           // immutable
	ackTimeout time.Duration // immutable
	auth       *Auth         // immutable
	history    *History      // immutable
	mux        *http.ServeMux
	cluster    *clusterRoute // immutable; nil on a single node
	fleet      *Fleet        // immutable; nil but with several shard groups
}

// Fleet changes where a cluster's work lives (cmd/sprout's member, with
// several shard groups): each handler answers as the member's /cluster
// endpoint it is named for (docs/cluster.md), reading the path's name,
// prefix or id (http.Request.PathValue) and its JSON body, and finding
// the member that carries the change out itself, so the API serves these
// on any member.
type Fleet struct {
	MoveTube, PlacePrefix, UnplacePrefix, GrowGroups, MoveReplica http.HandlerFunc
}

// New makes the API and starts sampling its history.
func New(cfg Config) *API {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = DefaultAckTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &API{
		st:         cfg.Store,
		engine:     cfg.Engine,
		maxJobSize: cfg.MaxJobSize,
		ackTimeout: cfg.AckTimeout,
		auth:       newAuth(cfg.Token, cfg.SessionTTL, cfg.Now, cfg.Logger),
		history:    newHistory(cfg.History, cfg.Store, cfg.Engine, cfg.Now),
		mux:        http.NewServeMux(),
		fleet:      cfg.Fleet,
	}
	if cfg.Cluster != nil {
		a.cluster = newClusterRoute(cfg, a)
		a.history.active = a.cluster.serving
	}
	a.routes()
	a.history.start()
	return a
}

// Auth is the API's rules of access, for the console to share.
func (a *API) Auth() *Auth { return a.auth }

// History is the API's history of figures.
func (a *API) History() *History { return a.history }

// Close stops the history sampler.
func (a *API) Close() { a.history.stop() }

// ServeHTTP answers a request under /api/: here, or, in a cluster, where
// the leader is (doc.go, Cluster mode). The session endpoints and the
// OpenAPI document are always this member's.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.cluster == nil || r.URL.Path == sessionPath || r.URL.Path == openAPIPath || a.fleetPath(r) {
		a.mux.ServeHTTP(w, r)
		return
	}
	a.cluster.ServeHTTP(w, r)
}

// store is the store a request is served from: with groups, that of the
// group it concerns (clusterRoute.serveHere), else Config.Store.
func (a *API) store(ctx context.Context) *store.Store {
	if sv, ok := ctx.Value(servedKey{}).(served); ok {
		return sv.st
	}
	return a.st
}

// servedKey is the context key of what a request is served from.
type servedKey struct{}

// served is the group a request is served for, on this member: its store,
// and whether only its part of a fleet endpoint is asked (GroupHeader).
type served struct {
	st    *store.Store
	group uint16
	part  bool
}

// handler answers one endpoint's request with the access Auth gave it; it
// returns an *Error instead of answering when it fails.
type handler func(w http.ResponseWriter, r *http.Request, acc Access) error

// methods are one endpoint's handlers by method, mounted. An endpoint
// that answers GET answers HEAD with the same handler, as net/http's
// own routing does: the server sends its headers and drops its body.
type methods struct {
	a        *API
	handlers map[string]handler
	open     bool
}

func (m methods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := m.handlers[r.Method]
	if h == nil && r.Method == http.MethodHead {
		h = m.handlers[http.MethodGet]
	}
	if h == nil {
		allow := make([]string, 0, len(m.handlers)+1)
		for method := range m.handlers {
			allow = append(allow, method)
			if method == http.MethodGet {
				allow = append(allow, http.MethodHead)
			}
		}
		slices.Sort(allow)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		WriteError(w, errorf(http.StatusMethodNotAllowed, "%s is not allowed here; use %s", r.Method, strings.Join(allow, " or ")))
		return
	}
	var acc Access
	if !m.open {
		var err *Error
		if acc, err = m.a.auth.Check(r); err != nil {
			WriteError(w, err)
			return
		}
	}
	if err := h(w, r, acc); err != nil {
		WriteError(w, err)
	}
}

// endpoint is one path of the API and its handlers by method. open ones
// are answered without Auth.Check: the session endpoints, which apply the
// rules themselves, and the OpenAPI document.
type endpoint struct {
	path     string
	open     bool
	handlers map[string]handler
}

// endpoints are the API's paths (see doc.go), each of them described in
// openapi.json. It reads nothing of a but its handlers' method values, so
// a nil *API lists them too (the tests compare them with the document).
func (a *API) endpoints() []endpoint {
	const v1 = "/api/v1"
	return []endpoint{
		{sessionPath, true, map[string]handler{
			http.MethodGet: a.getSession, http.MethodPost: a.login, http.MethodDelete: a.logout}},
		{openAPIPath, true, map[string]handler{http.MethodGet: a.getOpenAPI}},
		{v1 + "/stats", false, map[string]handler{http.MethodGet: a.getStats}},
		{v1 + "/history", false, map[string]handler{http.MethodGet: a.getServerHistory}},
		{v1 + "/tubes", false, map[string]handler{http.MethodGet: a.getTubes}},
		{v1 + "/tubes/{name}", false, map[string]handler{http.MethodGet: a.getTube}},
		{v1 + "/tubes/{name}/history", false, map[string]handler{http.MethodGet: a.getTubeHistory}},
		{v1 + "/tubes/{name}/jobs", false, map[string]handler{
			http.MethodGet: a.listJobs, http.MethodPost: a.putJob}},
		{v1 + "/tubes/{name}/kick", false, map[string]handler{http.MethodPost: a.kickTube}},
		{v1 + "/tubes/{name}/pause", false, map[string]handler{http.MethodPost: a.pauseTube}},
		{v1 + "/tubes/{name}/clear", false, map[string]handler{http.MethodPost: a.clearTube}},
		{v1 + "/jobs/{id}", false, map[string]handler{
			http.MethodGet: a.getJob, http.MethodDelete: a.deleteJob}},
		{v1 + "/jobs/{id}/kick", false, map[string]handler{http.MethodPost: a.kickJob}},
		{v1 + "/tubes/{name}/move", false, map[string]handler{http.MethodPost: a.fleetChange(moveTube)}},
		{v1 + "/placements/{prefix}", false, map[string]handler{
			http.MethodPost: a.fleetChange(placePrefix), http.MethodDelete: a.fleetChange(unplacePrefix)}},
		{v1 + "/groups/grow", false, map[string]handler{http.MethodPost: a.fleetChange(growGroups)}},
		{v1 + "/groups/{id}/moves", false, map[string]handler{http.MethodPost: a.fleetChange(moveReplica)}},
	}
}

// The fleet's changes (Fleet), by the handler each is.
func moveTube(f *Fleet) http.HandlerFunc      { return f.MoveTube }
func placePrefix(f *Fleet) http.HandlerFunc   { return f.PlacePrefix }
func unplacePrefix(f *Fleet) http.HandlerFunc { return f.UnplacePrefix }
func growGroups(f *Fleet) http.HandlerFunc    { return f.GrowGroups }
func moveReplica(f *Fleet) http.HandlerFunc   { return f.MoveReplica }

// fleetChange is the handler of one of the fleet's changes: Fleet's, or
// 404 where there is none (a single server, one group).
func (a *API) fleetChange(of func(*Fleet) http.HandlerFunc) handler {
	return func(w http.ResponseWriter, r *http.Request, _ Access) error {
		if a.fleet == nil || of(a.fleet) == nil {
			return errorf(http.StatusNotFound, "%s: only a cluster of several shard groups (--cluster-groups) has it", r.URL.Path)
		}
		of(a.fleet)(w, r)
		return nil
	}
}

// fleetPath reports whether r is for one of the fleet's changes, which
// the member that takes it carries to where it is made (Fleet), not the
// API's routing to a group's leader.
func (a *API) fleetPath(r *http.Request) bool {
	_, pattern := a.mux.Handler(r)
	return strings.HasPrefix(pattern, "/api/v1/placements/") || strings.HasPrefix(pattern, "/api/v1/groups/") ||
		pattern == "/api/v1/tubes/{name}/move"
}

// routes mounts the endpoints, and a JSON 404 for any other path under
// /api/.
func (a *API) routes() {
	for _, e := range a.endpoints() {
		a.mux.Handle(e.path, methods{a: a, handlers: e.handlers, open: e.open})
	}
	a.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, errorf(http.StatusNotFound, "no such endpoint: %s", r.URL.Path))
	})
}

// client is a store client of its own for one request; the caller closes
// it. Like a connection, it uses and watches "default" until told
// otherwise, which stats-tube shows while the request runs.
func (a *API) client(r *http.Request) *store.Client {
	return a.store(r.Context()).NewClient(nobody{})
}

// nobody is the Notifier of the API's clients, which never block in a
// reserve.
type nobody struct{}

func (nobody) JobReserved(*store.Job)        {}
func (nobody) WaitEnded(store.ReserveResult) {}
func (nobody) String() string                { return "an admin API request's client" }

// acknowledged waits until what c changed or was shown may be acknowledged
// (store.AckSource): at once in memory; with a log, once it is durable (or
// committed, in a cluster). It gives up when ctx ends or after the ack
// timeout, with 503: the change was made, and may still become durable.
// In a cluster, a leadership lost meanwhile ends it with 503 too.
func (a *API) acknowledged(ctx context.Context, c *store.Client) error {
	acks := a.store(ctx).Acks()
	pos := c.PendingAck()
	if acks == nil || pos == 0 || acks.Acked() >= pos {
		return nil
	}
	done := make(chan struct{})
	acks.OnAcked(pos, func() { close(done) })
	timer := time.NewTimer(a.ackTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C:
		return errorf(http.StatusServiceUnavailable,
			"not acknowledged within %v: the change was made, but the log has not yet made it durable", a.ackTimeout)
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), errLeadershipLost) {
			return errorf(http.StatusServiceUnavailable,
				"this member lost the leadership before its change was committed: the new leader may or may not have it; look before trying again")
		}
		return errorf(http.StatusServiceUnavailable, "the request ended before the log made its change durable: %v", ctx.Err())
	}
}

// tubeName is the {name} of r's path, checked as the protocol checks a
// tube's name.
func tubeName(r *http.Request) ([]byte, error) {
	name := r.PathValue("name")
	if !codec.ValidTubeName([]byte(name)) {
		return nil, errorf(http.StatusBadRequest,
			"invalid tube name %q: 1 to %d of the letters, digits and -+/;.$_() (not starting with -)",
			name, codec.MaxTubeName)
	}
	return []byte(name), nil
}

// errNoTube is the 404 of a tube that does not exist.
func errNoTube(name []byte) error {
	return errorf(http.StatusNotFound, "no such tube: %q", name)
}

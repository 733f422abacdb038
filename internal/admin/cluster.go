package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/store"
)

const (
	// sessionPath is the session endpoints' path, which every member
	// serves itself.
	sessionPath = "/api/v1/session"
	// ForwardedHeader marks a request a member forwarded to the leader,
	// with the forwarding member's name: it is never forwarded again.
	ForwardedHeader = "X-Sprout-Forwarded-By"
	// ForwardedGroupHeader, with groups, names the group whose leader a
	// request was forwarded to. A member whose route names another (a
	// job whose tube moved to a group the forwarder holds no replica of
	// and could not look in) forwards it once more, to that group's
	// leader, adding it: "1,3" is never forwarded again.
	ForwardedGroupHeader = "X-Sprout-Forwarded-Group"
	// DefaultLeaderWait bounds how long a request waits for a leader when
	// Config.LeaderWait is 0: about an election.
	DefaultLeaderWait = 2 * time.Second
)

var (
	// errLeadershipLost is the cause a request's context is cancelled
	// with when its member stops serving while it runs.
	errLeadershipLost = errors.New("admin: this member lost the leadership")
	// errLeaderChanged is the cause a forwarded request is cancelled with
	// when the member it went to is no longer the leader, as this member
	// sees it: a paused or cut-off leader would otherwise hold it.
	errLeaderChanged = errors.New("admin: the leader changed")
)

// Cluster is what the API needs of a cluster member;
// cmd/sprout adapts *replication.Node to it.
type Cluster interface {
	// Name is this member's name.
	Name() string
	// Leader is the leader as this member knows it, and a channel
	// closed when that changes.
	Leader() (Leader, <-chan struct{})
}

// Leader is where a request is served.
type Leader struct {
	// Serving: this member leads and serves; the request is served here.
	Serving bool
	// Name is the leader's name, "" while none is known.
	Name string
	// HTTP is the leader's --http address when another member leads and
	// has told it; "" otherwise.
	HTTP string
}

// clusterRoute serves a cluster member's API requests: here while it
// serves, forwarded to the leader otherwise (doc.go, Cluster mode).
type clusterRoute struct {
	api     *API           // immutable
	cluster Cluster        // immutable
	wait    time.Duration  // immutable: LeaderWait
	token   string         // immutable: the admin token, sent to the leader
	scheme  string         // immutable: how the leader's --http is reached, http or https
	log     zerolog.Logger // immutable
	proxy   *httputil.ReverseProxy
	// groups are the cluster's shard groups, nil with one (Config.Groups).
	groups Groups // immutable
	// parts fetches the fleet endpoints' parts from other members.
	parts *http.Client // immutable
}

// forwardTo is the leader's --http address in a forwarded request's
// context, for the proxy's Rewrite: a forwarding.
type forwardTo struct{}

// forwarding is where a request is forwarded: group's leader.
type forwarding struct {
	leader Leader
	group  uint16
}

func newClusterRoute(cfg Config, a *API) *clusterRoute {
	c := &clusterRoute{api: a, cluster: cfg.Cluster, wait: cfg.LeaderWait, token: cfg.Token, scheme: "http", log: cfg.Logger}
	if cfg.Groups != nil && cfg.Groups.Count() > 1 {
		c.groups = cfg.Groups
	}
	if c.wait <= 0 {
		c.wait = DefaultLeaderWait
	}
	c.proxy = &httputil.ReverseProxy{
		Rewrite:      c.rewrite,
		ErrorHandler: c.proxyError,
	}
	if cfg.ForwardDialTLS != nil {
		c.scheme = "https"
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Direct: through a proxy the transport would make the TLS
		// itself, without ForwardDialTLS's check.
		t.Proxy = nil
		t.DialTLSContext = cfg.ForwardDialTLS
		c.proxy.Transport = t
	}
	c.parts = &http.Client{Transport: c.proxy.Transport, Timeout: partTimeout}
	return c
}

// serving reports whether this member serves now: the history samples
// only then.
func (c *clusterRoute) serving() bool {
	l, _ := c.cluster.Leader()
	return l.Serving
}

// ServeHTTP serves r here, forwards it, or waits for a leader to do
// either, up to c.wait. With groups, the leader is that of the group r
// concerns, and the fleet's endpoints gather every group's part (fleet).
func (c *clusterRoute) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g, fleet, part, err := c.route(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	forwarded := r.Header.Get(ForwardedHeader) != "" && !c.forwardAgain(r, g)
	if fleet && !part {
		c.fleet(w, r)
		return
	}
	l, st, changed, err := c.awaitLeader(r.Context(), g, forwarded)
	switch {
	case err != nil:
		if r.Context().Err() == nil {
			WriteError(w, err)
		}
	case l.Serving:
		c.serveHere(w, r, served{st: st, group: g, part: part}, changed)
	default:
		c.forward(w, r, g, l, changed)
	}
}

// forwardAgain reports whether r, forwarded here, goes on to group g's
// leader: it was forwarded once, to another group's (ForwardedGroupHeader).
func (c *clusterRoute) forwardAgain(r *http.Request, g uint16) bool {
	to := r.Header.Get(ForwardedGroupHeader)
	return c.groups != nil && to != "" && !strings.Contains(to, ",") && to != strconv.Itoa(int(g))
}

// awaitLeader waits, up to c.wait, until group g is served here (with
// its store) or, unless forwarded, its leader's --http is known; the
// error says why neither came, or that ctx ended.
func (c *clusterRoute) awaitLeader(ctx context.Context, g uint16, forwarded bool) (Leader, *store.Store, <-chan struct{}, error) {
	timer := time.NewTimer(c.wait)
	defer timer.Stop()
	for {
		l, st, changed := c.leader(g)
		if l.Serving && st != nil || l.HTTP != "" && !forwarded {
			return l, st, changed, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return l, nil, nil, ctx.Err()
		case <-timer.C:
			return l, nil, nil, c.unavailable(l, forwarded)
		}
	}
}

// leader is group g's leader as this member knows it, the group's store
// while this member serves it, and a channel closed when that changes.
func (c *clusterRoute) leader(g uint16) (Leader, *store.Store, <-chan struct{}) {
	if c.groups == nil {
		l, changed := c.cluster.Leader()
		return l, c.api.st, changed
	}
	return c.groups.Leader(g)
}

// unavailable says why no member could take a request within c.wait.
func (c *clusterRoute) unavailable(l Leader, forwarded bool) *Error {
	var err *Error
	switch {
	case forwarded:
		err = errorf(http.StatusServiceUnavailable,
			"%s was forwarded this request as the leader, and does not serve (an election, or a stale view): try again", c.cluster.Name())
	case l.Name == "":
		err = errorf(http.StatusServiceUnavailable, "no leader is known to %s (an election): try again", c.cluster.Name())
	case l.Name == c.cluster.Name():
		err = errorf(http.StatusServiceUnavailable, "%s leads but does not serve yet: try again", l.Name)
	default:
		err = errorf(http.StatusServiceUnavailable,
			"the leader, %s, has not told %s its --http address: every member must serve --http for the admin API", l.Name, c.cluster.Name())
	}
	err.RetryAfter = time.Second
	return err
}

// serveHere serves r on this member, which leads the group sv names: if
// it stops serving before the answer, the request's context ends with
// errLeadershipLost, which an acknowledgement's wait answers 503.
func (c *clusterRoute) serveHere(w http.ResponseWriter, r *http.Request, sv served, changed <-chan struct{}) {
	ctx, cancel := context.WithCancelCause(context.WithValue(r.Context(), servedKey{}, sv))
	defer cancel(nil)
	go c.watchLeader(ctx, cancel, sv.group, changed, errLeadershipLost, func(l Leader) bool { return l.Serving })
	c.api.mux.ServeHTTP(w, r.WithContext(ctx))
}

// watchLeader cancels ctx with cause once group g's leader, as told at
// each change, no longer satisfies holds; it returns when ctx ends.
func (c *clusterRoute) watchLeader(ctx context.Context, cancel context.CancelCauseFunc, g uint16,
	changed <-chan struct{}, cause error, holds func(Leader) bool) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		var l Leader
		if l, _, changed = c.leader(g); !holds(l) {
			cancel(cause)
			return
		}
	}
}

// forward checks r's credentials by this member's rules, then sends it
// to group g's leader with the admin token in their place. If another
// member becomes the leader, or none is known, before the leader
// answers, the request is given up (503).
func (c *clusterRoute) forward(w http.ResponseWriter, r *http.Request, g uint16, l Leader, changed <-chan struct{}) {
	if _, err := c.api.auth.Check(r); err != nil {
		WriteError(w, err)
		return
	}
	ctx, cancel := context.WithCancelCause(context.WithValue(r.Context(), forwardTo{}, forwarding{l, g}))
	defer cancel(nil)
	go c.watchLeader(ctx, cancel, g, changed, errLeaderChanged, func(now Leader) bool {
		return !now.Serving && now.Name == l.Name && now.HTTP == l.HTTP
	})
	c.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// rewrite is the proxy's: the request goes to the leader with the admin
// token as its only credential, marked forwarded.
func (c *clusterRoute) rewrite(pr *httputil.ProxyRequest) {
	to := pr.In.Context().Value(forwardTo{}).(forwarding)
	l := to.leader
	pr.SetURL(&url.URL{Scheme: c.scheme, Host: l.HTTP})
	pr.Out.Host = l.HTTP
	h := pr.Out.Header
	ForwardCredentials(h, c.token)
	h.Set(ForwardedHeader, c.cluster.Name())
	if c.groups != nil {
		g := strconv.Itoa(int(to.group))
		if before := pr.In.Header.Get(ForwardedGroupHeader); before != "" {
			g = before + "," + g
		}
		h.Set(ForwardedGroupHeader, g)
	}
	if pr.In.PostForm != nil {
		// The CSRF check read a form's body: send what it read.
		body := pr.In.PostForm.Encode()
		pr.Out.Body = io.NopCloser(strings.NewReader(body))
		pr.Out.ContentLength = int64(len(body))
		h.Set("Content-Length", strconv.Itoa(len(body)))
	}
}

// ForwardCredentials sets what a request forwarded to another member,
// its credentials checked here, proves: the admin token (if one is set)
// and nothing else, since a console's session and its CSRF token are
// this member's.
func ForwardCredentials(h http.Header, token string) {
	h.Del("Cookie")
	h.Del("Authorization")
	h.Del(CSRFHeader)
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
}

// proxyError answers a request the leader did not: 503, naming it. The
// leader may have made the change (it went away, or lost the leadership,
// after the request was sent), as with any server that goes away.
func (c *clusterRoute) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	to, _ := r.Context().Value(forwardTo{}).(forwarding)
	l := to.leader
	if errors.Is(context.Cause(r.Context()), errLeaderChanged) {
		e := errorf(http.StatusServiceUnavailable,
			"the leader, %s, changed before it answered: a change may or may not have been made: look before trying again", l.Name)
		e.RetryAfter = time.Second
		WriteError(w, e)
		return
	}
	if errors.Is(err, context.Canceled) {
		return // the client went away
	}
	c.log.Debug().Err(err).Str("leader", l.Name).Str("http", l.HTTP).Str("path", r.URL.Path).
		Msg("admin: the leader did not answer a forwarded request")
	var e *Error
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
		e = errorf(http.StatusServiceUnavailable, "the leader, %s (%s), cannot be reached: %v; nothing was sent: try again",
			l.Name, l.HTTP, errText(err))
	} else {
		e = errorf(http.StatusServiceUnavailable,
			"the leader, %s (%s), did not answer: %v; a change may or may not have been made: look before trying again",
			l.Name, l.HTTP, errText(err))
	}
	e.RetryAfter = time.Second
	WriteError(w, e)
}

// errText is err's message without the proxy's repetition of the URL.
func errText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Sprint(ue.Err)
	}
	return err.Error()
}

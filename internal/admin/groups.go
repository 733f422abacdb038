package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sproutmq/sprout/internal/router"
	"github.com/sproutmq/sprout/store"
)

// GroupHeader marks a request another member sent for one group's part of
// a fleet endpoint (GET /stats, GET /tubes): its value is the group.
const GroupHeader = "X-Sprout-Group"

// partTimeout bounds the wait for another member's part of a fleet
// endpoint: a paused leader would hold the answer otherwise.
const partTimeout = 5 * time.Second

// Groups is what the API needs of a cluster of several shard groups;
// cmd/sprout's member adapts its groups and router to it.
type Groups interface {
	// Count is how many groups the cluster has.
	Count() int
	// OfTube is the group that owns the named tube.
	OfTube(name string) uint16
	// OfJob is the group whose ids carry id's prefix; false for an id no
	// group issues.
	OfJob(id uint64) (uint16, bool)
	// Leader is group g's leader as this member knows it, with the
	// group's store while this member serves it, and a channel closed
	// when that may have changed.
	Leader(g uint16) (Leader, *store.Store, <-chan struct{})
	// Waiting is how many of this member's sessions wait in a reserve:
	// stats' current-waiting, as the protocol's stats shows it here.
	Waiting() int64
	// Unfrozen runs change, a change of the named tube in group g's
	// store, unless a move of the tube to another group has frozen it
	// there: then it reports false and does not run it. A move exports
	// the tube only once every change that passed the check has run.
	Unfrozen(g uint16, tube []byte, change func()) bool
}

// unfrozen runs change, a change of the named tube in the group r is
// served for, unless a move of the tube between groups has frozen it
// there (Groups.Unfrozen): then nothing is changed and the answer is 503,
// to be tried again once the move is over, where the tube is then.
func (a *API) unfrozen(r *http.Request, tube []byte, change func()) error {
	sv, ok := r.Context().Value(servedKey{}).(served)
	if !ok || a.cluster == nil || a.cluster.groups == nil {
		change()
		return nil
	}
	if a.cluster.groups.Unfrozen(sv.group, tube, change) {
		return nil
	}
	e := errorf(http.StatusServiceUnavailable, "tube %q is moving to another group: nothing was changed; try again", tube)
	e.RetryAfter = time.Second
	return e
}

// route is the group r concerns: a tube's, a job's, or group 0 for
// anything else; fleet for the endpoints that gather every group's part,
// part when r asks for one group's (GroupHeader).
func (c *clusterRoute) route(r *http.Request) (g uint16, fleet, part bool, err error) {
	if c.groups == nil {
		return 0, false, false, nil
	}
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/api/v1/")
	if !ok {
		return 0, false, false, nil
	}
	seg := strings.Split(rest, "/")
	switch {
	case (rest == "stats" || rest == "tubes") && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		h := r.Header.Get(GroupHeader)
		if h == "" {
			return 0, true, false, nil
		}
		n, perr := strconv.ParseUint(h, 10, 16)
		if perr != nil || int(n) >= c.groups.Count() {
			return 0, true, true, errorf(http.StatusBadRequest, "%s must name one of the %d groups, not %q", GroupHeader, c.groups.Count(), h)
		}
		return uint16(n), true, true, nil
	case seg[0] == "tubes" && len(seg) > 1 && !(len(seg) == 3 && seg[2] == "history"):
		// A tube's history is the sampler's, on group 0's leader.
		if name, uerr := url.PathUnescape(seg[1]); uerr == nil {
			return c.groups.OfTube(name), false, false, nil
		}
	case seg[0] == "jobs" && len(seg) > 1:
		if id, perr := strconv.ParseUint(seg[1], 10, 64); perr == nil {
			if g, ok := c.groups.OfJob(id); ok {
				return g, false, false, nil
			}
		}
	}
	return 0, false, false, nil // group 0 answers what names no group: 400, 404
}

// fleet answers GET /stats or GET /tubes from every group's part, once
// all have come; a group that gives none fails the answer.
func (c *clusterRoute) fleet(w http.ResponseWriter, r *http.Request) {
	if _, err := c.api.auth.Check(r); err != nil {
		WriteError(w, err)
		return
	}
	n := c.groups.Count()
	parts := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() { parts[g], errs[g] = c.part(r, uint16(g)) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			WriteError(w, err)
			return
		}
	}
	var b []byte
	var err error
	if strings.HasSuffix(r.URL.Path, "/stats") {
		b, err = c.sumStats(parts)
	} else {
		b, err = joinTubes(parts)
	}
	if err != nil {
		WriteError(w, errorf(http.StatusBadGateway, "a member's part was not understood: %v", err))
		return
	}
	writeJSON(w, http.StatusOK, b)
}

// part is group g's part of r's fleet endpoint: from its store when this
// member serves it, else from its leader's --http, waiting up to c.wait
// for a leader to be known.
func (c *clusterRoute) part(r *http.Request, g uint16) ([]byte, error) {
	l, st, _, err := c.awaitLeader(r.Context(), g, false)
	switch {
	case err != nil:
		if e := (*Error)(nil); errors.As(err, &e) {
			e.Message += fmt.Sprintf(" (group %d)", g)
		}
		return nil, err
	case l.Serving:
		return c.api.partOf(r.URL.Path, served{st: st, group: g, part: true}), nil
	}
	return c.fetchPart(r.Context(), g, l, r.URL.Path)
}

// fetchPart asks l, group g's leader, for the group's part of path.
func (c *clusterRoute) fetchPart(ctx context.Context, g uint16, l Leader, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.scheme+"://"+l.HTTP+path, nil)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set(ForwardedHeader, c.cluster.Name())
	req.Header.Set(GroupHeader, strconv.Itoa(int(g)))
	resp, err := c.parts.Do(req)
	if err != nil {
		e := errorf(http.StatusServiceUnavailable, "group %d's leader, %s (%s), did not answer: %v", g, l.Name, l.HTTP, errText(err))
		e.RetryAfter = time.Second
		return nil, e
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPart))
	if err != nil {
		return nil, errorf(http.StatusServiceUnavailable, "group %d's leader, %s: %v", g, l.Name, err)
	}
	if resp.StatusCode != http.StatusOK {
		// The leader's own error says "admin: " as this member's do: said
		// once, before what this member adds.
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = resp.Status
		}
		relayed := errorf(resp.StatusCode, "group %d's leader, %s: %s", g, l.Name, strings.TrimPrefix(e.Error, "admin: "))
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			relayed.RetryAfter = time.Duration(s) * time.Second // kept, as the leader said it
		}
		return nil, relayed
	}
	return b, nil
}

// maxPart bounds a part read from another member: a tube list of a
// million tubes.
const maxPart = 1 << 30

// partOf is group sv.group's part of the fleet endpoint at path, from
// its store: its queue figures (stats), or its own tubes (tubes).
func (a *API) partOf(path string, sv served) []byte {
	if strings.HasSuffix(path, "/stats") {
		s := sv.st.Stats()
		b, _ := json.Marshal(statsPart{
			Urgent: s.Urgent, Ready: s.Ready, Reserved: s.Reserved, Delayed: s.Delayed, Buried: s.Buried,
			TotalJobs: s.TotalJobs, JobTimeouts: s.JobTimeouts, Tubes: s.Tubes,
		})
		return append(b, '\n')
	}
	// Every group's store holds a default tube: the owner's is the one
	// the protocol shows.
	return tubesJSON(sv.st, func(name string) bool { return a.cluster.groups.OfTube(name) == sv.group })
}

// statsPart is one group's part of GET /stats: its queue's figures, by
// the protocol's keys.
type statsPart struct {
	Urgent      int64 `json:"current-jobs-urgent"`
	Ready       int64 `json:"current-jobs-ready"`
	Reserved    int64 `json:"current-jobs-reserved"`
	Delayed     int64 `json:"current-jobs-delayed"`
	Buried      int64 `json:"current-jobs-buried"`
	TotalJobs   int64 `json:"total-jobs"`
	JobTimeouts int64 `json:"job-timeouts"`
	Tubes       int   `json:"current-tubes"`
}

// sumStats is GET /stats of the fleet: this member's own figures, with
// the queue's summed over the groups' parts, as the protocol's stats.
func (c *clusterRoute) sumStats(parts [][]byte) ([]byte, error) {
	sums := make([]store.Stats, len(parts))
	for i, p := range parts {
		var sp statsPart
		if err := json.Unmarshal(p, &sp); err != nil {
			return nil, err
		}
		sums[i] = store.Stats{Urgent: sp.Urgent, Ready: sp.Ready, Reserved: sp.Reserved, Delayed: sp.Delayed,
			Buried: sp.Buried, TotalJobs: sp.TotalJobs, JobTimeouts: sp.JobTimeouts, Tubes: sp.Tubes}
	}
	sum := router.SumStats(sums...)
	st := c.api.engine.Stats()
	st.CurrentJobsUrgent, st.CurrentJobsReady = uint64(sum.Urgent), uint64(sum.Ready)
	st.CurrentJobsReserved, st.CurrentJobsDelayed = uint64(sum.Reserved), uint64(sum.Delayed)
	st.CurrentJobsBuried, st.TotalJobs, st.JobTimeouts = uint64(sum.Buried), uint64(sum.TotalJobs), uint64(sum.JobTimeouts)
	st.CurrentTubes, st.CurrentWaiting = uint64(sum.Tubes), uint64(c.groups.Waiting())
	return append(appendServerStats(nil, &st), '\n'), nil
}

// joinTubes is GET /tubes of the fleet: the groups' tubes, group by group,
// each with its group (parts[g] is group g's).
func joinTubes(parts [][]byte) ([]byte, error) {
	b := []byte(`{"tubes":[`)
	first := true
	for g, p := range parts {
		var part struct {
			Tubes []json.RawMessage `json:"tubes"`
		}
		if err := json.Unmarshal(p, &part); err != nil {
			return nil, err
		}
		for _, t := range part.Tubes {
			if len(t) < 2 || t[0] != '{' || t[1] == '}' {
				return nil, fmt.Errorf("a tube that is not an object with fields: %.40q", t)
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, `{"group":`...)
			b = strconv.AppendInt(b, int64(g), 10)
			b = append(b, ',')
			b = append(b, t[1:]...)
		}
	}
	return append(b, "]}\n"...), nil
}

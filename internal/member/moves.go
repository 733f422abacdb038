package member

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/replication"
)

// Moving a group's replica (docs/design/shards.md 1.4): the member that
// receives it is added to the group as a learner, a snapshot of the group
// fills it, the leader promotes it once it has caught up, then the member
// that gives it is removed (a leader removed hands its leadership over
// first). Each step is one of the group's own membership changes, so a
// move cut short leaves the group with its replicas or one more, and the
// same move asked again goes on from where it stands.
const (
	// moveTimeout bounds a move, most of it the receiver's catching up.
	moveTimeout = time.Minute
	// movePoll is how often a move looks whether the receiver is a voter.
	movePoll = 50 * time.Millisecond
)

// errNoReplica: a move asked of a member that holds no replica of the
// group, after it was forwarded once.
var errNoReplica = errors.New("member: this member holds no replica of the group")

// GroupReplicas is a group's replicas by member name: a move's answer.
type GroupReplicas struct {
	Group    int      `json:"group"`
	Replicas []string `json:"replicas"`
	Learners []string `json:"learners,omitempty"`
}

// moveReplica moves group g's replica from member from to member to, on
// this member's replica of g, and returns the group's replicas after. A
// receiver that does not catch up within moveTimeout is removed again,
// and the group keeps its replicas.
func (m *Member) moveReplica(ctx context.Context, g uint16, from, to string) (GroupReplicas, error) {
	n := m.shards.node(g)
	if n == nil {
		return GroupReplicas{}, fmt.Errorf("%w: group %d", errNoReplica, g)
	}
	if from == to {
		return GroupReplicas{}, fmt.Errorf("%w: from and to are both %s", replication.ErrBadMember, from)
	}
	holds := func(name string) (voter, learner bool) {
		voters, learners, _ := n.Replicas()
		return slices.Contains(voters, m.idOf(name)), slices.Contains(learners, m.idOf(name))
	}
	if v, l := holds(from); !v && !l {
		return m.replicasOf(g, n), fmt.Errorf("%w: %s holds no replica of group %d", replication.ErrUnknownMember, from, g)
	}
	if v, l := holds(to); !v && !l {
		if _, err := n.AddReplica(ctx, to); err != nil {
			return m.replicasOf(g, n), err
		}
		m.log.Info().Int("group", int(g)).Str("from", from).Str("to", to).Msg("moving a group's replica: the receiver added as a learner")
	}
	for {
		if v, _ := holds(to); v {
			break
		}
		select {
		case <-ctx.Done():
			// Not caught up: take the learner out again, so the group can
			// change again (one learner at a time), with what is left.
			undo, cancel := context.WithTimeout(context.Background(), replication.ChangeTimeout)
			_, err := n.RemoveReplica(undo, to)
			cancel()
			return m.replicasOf(g, n), fmt.Errorf("%w: %s did not catch up with group %d in time (%v); removed again: %v",
				replication.ErrChangeTimeout, to, g, ctx.Err(), err)
		case <-n.Done():
			return GroupReplicas{}, fmt.Errorf("%w: this member's replica of group %d stopped", replication.ErrNoLeader, g)
		case <-time.After(movePoll):
		}
	}
	if _, err := n.RemoveReplica(ctx, from); err != nil && !errors.Is(n.Err(), replication.ErrRemoved) {
		return m.replicasOf(g, n), err
	}
	m.log.Info().Int("group", int(g)).Str("from", from).Str("to", to).Msg("moved a group's replica")
	return m.replicasOf(g, n), nil
}

// idOf is the Raft id of the member named name, 0 if none is.
func (m *Member) idOf(name string) uint64 {
	for _, mb := range m.node.Book().Members {
		if mb.Name == name {
			return mb.ID
		}
	}
	return 0
}

// replicasOf is group g's replicas as n, its replica here, has them.
func (m *Member) replicasOf(g uint16, n *replication.Node) GroupReplicas {
	names := make(map[uint64]string)
	for _, mb := range m.node.Book().Members {
		names[mb.ID] = mb.Name
	}
	voters, learners, _ := n.Replicas()
	out := GroupReplicas{Group: int(g), Replicas: []string{}}
	for _, id := range voters {
		out.Replicas = append(out.Replicas, names[id])
	}
	for _, id := range learners {
		out.Learners = append(out.Learners, names[id])
	}
	return out
}

// forwardedMove marks a move forwarded by another member, which is not
// forwarded again.
const forwardedMove = "X-Sprout-Forwarded-Move"

// registerGroups adds the groups' endpoint to mux, in a cluster of
// several groups, guarded as the membership endpoint is:
//
//	POST /cluster/groups/{id}/moves  {"from","to"}: move a replica (200)
//
// A member that holds no replica of the group forwards the request to
// the group's leader. Errors are the membership endpoint's
// (writeChangeError).
func (m *Member) registerGroups(mux *http.ServeMux, guard func(http.Handler) http.Handler) {
	mux.Handle("POST /cluster/groups/{id}/moves", guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g, err := strconv.ParseUint(r.PathValue("id"), 10, 16)
		if err != nil || int(g) >= m.shards.groups() || g == 0 {
			admin.WriteError(w, &admin.Error{Status: http.StatusNotFound,
				Message: fmt.Sprintf("no group %q: groups 1 to %d move their replicas", r.PathValue("id"), m.shards.groups()-1)})
			return
		}
		if m.shards.node(uint16(g)) == nil {
			m.forwardMove(w, r, uint16(g))
			return
		}
		var req struct {
			From string `json:"from"`
			To   string `json:"to"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxMemberRequest))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: "want {\"from\": MEMBER, \"to\": MEMBER}: " + err.Error()})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), moveTimeout)
		defer cancel()
		out, err := m.moveReplica(ctx, uint16(g), req.From, req.To)
		if err != nil {
			writeChangeError(w, err)
			return
		}
		m.log.Info().Int("group", int(g)).Str("from", req.From).Str("to", req.To).Str("remote", r.RemoteAddr).Msg("group replica moved")
		admin.WriteValue(w, http.StatusOK, out)
	})))
}

// forwardMove sends a move of group g to the member that leads it, as its
// reports say, waiting for one up to an election timeout (a member just
// started has none yet): this member holds no replica of it.
func (m *Member) forwardMove(w http.ResponseWriter, r *http.Request, g uint16) {
	l, _, _ := adminGroups{m}.Leader(g)
	for wait := time.Now().Add(m.node.ElectionTimeout()); l.HTTP == "" && time.Now().Before(wait); {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(reportedLeaderPoll):
		}
		l, _, _ = adminGroups{m}.Leader(g)
	}
	if r.Header.Get(forwardedMove) != "" || l.HTTP == "" {
		admin.WriteError(w, &admin.Error{Status: http.StatusServiceUnavailable,
			Message: fmt.Sprintf("%v %d, and its leader's --http is not known here", errNoReplica, g)})
		return
	}
	scheme := "http"
	var tlsConf *tls.Config
	if m.cfg.HTTP.TLS != nil {
		scheme, tlsConf = "https", forwardTLS(m.cfg.Cluster.TLSSource)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: scheme, Host: l.HTTP})
			pr.Out.Host = l.HTTP
			pr.Out.Header.Set(forwardedMove, m.node.Name())
		},
		Transport: &http.Transport{TLSClientConfig: tlsConf},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			admin.WriteError(w, &admin.Error{Status: http.StatusServiceUnavailable,
				Message: fmt.Sprintf("forwarding the move to %s, group %d's leader: %v", l.Name, g, err)})
		},
	}
	proxy.ServeHTTP(w, r)
}

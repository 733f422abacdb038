package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/console"
	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/internal/replication"
)

// maxMemberRequest bounds a membership change's request body.
const maxMemberRequest = 4 << 10

// router is the side port's one router, every path it serves in one
// place:
//
//	GET  /metrics, /healthz, /readyz     ops (open)
//	GET  /debug/pprof/...                ops, with --pprof (open)
//	GET  /cluster                        ops, in cluster mode (open)
//	     /cluster/members[/{name}]       membership changes, in cluster mode (guarded as the admin API)
//	POST /cluster/groups/{id}/moves      a group's replica moved, with several groups (moves.go; guarded so too)
//	POST /cluster/tubes/{name}/move      a tube moved to another group, with several groups (tubemoves.go; guarded so too)
//	     /api/...                        the admin API (its own rules of access)
//	     /                               the web console, for every other path
//
// It makes the admin API (m.api), which Shutdown closes.
func (m *Member) router() (http.Handler, error) {
	mux := http.NewServeMux()
	oc := ops.Config{
		Pprof: m.cfg.HTTP.Pprof, TubeSeries: m.cfg.HTTP.MetricsTubes,
		Engine: m.engine, Store: m.store, Metrics: m.metrics, Certs: m.cfg.Certs, Logger: m.log,
	}
	ac := admin.Config{
		// The engine's -z, its default applied: the protocol's bound.
		Store: m.store, Engine: m.engine, MaxJobSize: m.engine.Stats().MaxJobSize,
		Token: m.cfg.HTTP.AdminToken, Logger: m.log,
	}
	if m.node != nil {
		oc.Cluster, oc.Proxy, oc.Router = m.node, m.proxy, m.sessions
		oc.Log = m.logFigures
		if m.cfg.HTTP.TLS != nil {
			ac.ForwardDialTLS = forwardDialTLS(m.cfg.Cluster.TLSSource)
		}
		// Served while this member leads, forwarded to the leader's
		// --http otherwise (internal/admin/doc.go, Cluster mode).
		ac.Cluster, ac.LeaderWait = adminCluster{m.node}, m.node.ElectionTimeout()
		if m.shards.groups() > 1 {
			ac.Groups = adminGroups{m}
			oc.Cluster = fleetCluster{m.node, m}
			oc.Groups = ledGroups{m}
			// The /cluster endpoints' changes, under /api/v1 too.
			ac.Fleet = &admin.Fleet{MoveTube: m.serveTubeMove, PlacePrefix: m.servePlace, UnplacePrefix: m.servePlace,
				GrowGroups: m.serveGrow, MoveReplica: m.serveReplicaMove}
		}
	}
	if err := ops.Register(mux, oc); err != nil {
		return nil, err
	}
	m.api = admin.New(ac)
	mux.Handle("/api/", m.api)
	if m.node != nil {
		var groups *groupedMembers
		if m.shards.groups() > 1 {
			m.registerGroups(mux, m.api.Auth().Middleware)
			m.registerTubeMoves(mux, m.api.Auth().Middleware)
			m.registerPlacements(mux, m.api.Auth().Middleware)
			m.registerGrowth(mux, m.api.Auth().Middleware)
			// A member added starts with the formation's G, and learns of
			// groups grown since from group 0's log (growth.go).
			groups = &groupedMembers{groups: m.shards.formation.Groups, replicas: m.shards.formation.Replicas,
				holding: m.holding, knownWait: replicasKnownWait, drain: m.drain, cordon: m.cordon}
		}
		registerMembers(mux, m.node, m.api.Auth().Middleware, m.log, groups, m.removalForwarded)
	}
	con, err := console.New(console.Config{Auth: m.api.Auth(), Cluster: m.node != nil, Logger: m.log})
	if err != nil {
		return nil, err
	}
	mux.Handle("/", con)
	return mux, nil
}

// memberChanger is what the membership endpoint asks of the member;
// *replication.Node has it.
type memberChanger interface {
	Status() replication.Status
	AddMember(ctx context.Context, name, addr string) (replication.Member, error)
	RemoveMember(ctx context.Context, name string) (replication.Member, error)
	JoinString(id uint64) string
}

// replicasKnownWait bounds how long a member's removal waits for every
// group's replicas to be known here (a group's new leader reports them
// within a second or two of an election).
const replicasKnownWait = 10 * time.Second

// groupedMembers is what the membership endpoint of a cluster of several
// groups tells and checks: the G and R a new member starts with, and the
// groups a member holds a replica of, which it must hand over before its
// removal.
type groupedMembers struct {
	groups, replicas int
	// holding is Member.holding: the groups a member holds a replica
	// of, and one whose replicas are not known, if any (known false).
	holding func(name string) (held []uint16, unknown uint16, known bool)
	// knownWait bounds how long a removal waits for every group's
	// replicas to be known here (replicasKnownWait).
	knownWait time.Duration
	// drain marks a member draining and answers: its replicas move away,
	// then it is removed.
	drain func(w http.ResponseWriter, r *http.Request, name string, held []uint16)
	// cordon marks a member cordoned (on) or no longer, and answers.
	cordon func(w http.ResponseWriter, r *http.Request, name string, on bool)
}

// registerMembers adds the membership endpoint to mux
// (internal/replication/doc.go, "Membership changes"), guarded by guard
// as the admin API's changes are (a bearer --admin-token; without one,
// changes get 403):
//
//	GET    /cluster/members        the members, with their roles
//	POST   /cluster/members        {"name","address"}: add a learner (201)
//	DELETE /cluster/members/{name} remove a member (200)
//	POST   /cluster/members/{name}/cordon  the member leads no group (200)
//	DELETE /cluster/members/{name}/cordon  it may lead again (200)
//
// A change is answered once this member has applied it; a removal asked
// of a member that does not lead group 0 is forwarded to its leader
// (forwarded, when its side port is known) and answered as there: the
// leader's view of which voters are up decides it, where a proposal
// of this member's it refused would only time out here. Its errors are
// JSON {"error": ...}: 400 bad input, 404 unknown member, 409 a change in
// progress, a name or address in use, or a voter's removal that would
// leave the voters up short of a majority of those left (etcd's strict
// reconfiguration check: replication.Node.RemoveMember), 503 no leader or
// not applied in time. With several groups (grouped not nil) an addition's answer
// carries the cluster's groups and replicas, which the new member must
// start with, and a member that holds a replica of a group but 0 is
// marked draining (202, naming the groups): its replicas move away, then
// it is removed (moves.go, planReplicas). Only a cluster of several
// groups balances its leaders, so only there may a member be cordoned
// (409 otherwise): the balancers hand over the groups it leads and give it
// none, and it keeps its replicas and its clients (for maintenance: a
// cordoned member stopped, even by kill -9, pauses no group).
func registerMembers(mux *http.ServeMux, node memberChanger, guard func(http.Handler) http.Handler, log zerolog.Logger, grouped *groupedMembers,
	forwarded func(w http.ResponseWriter, r *http.Request) bool) {
	mux.Handle("GET /cluster/members", guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		admin.WriteValue(w, http.StatusOK, map[string]any{"members": node.Status().Members})
	})))
	mux.Handle("POST /cluster/members", guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Name    string `json:"name"`
			Address string `json:"address"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxMemberRequest))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: "want {\"name\": NAME, \"address\": HOST:PORT}: " + err.Error()})
			return
		}
		m, err := node.AddMember(r.Context(), req.Name, req.Address)
		if err != nil {
			writeChangeError(w, err)
			return
		}
		log.Info().Str("member", m.Name).Str("address", m.Addr).Str("remote", r.RemoteAddr).Msg("member added as a learner")
		out := map[string]any{
			"name": m.Name, "address": m.Addr, "id": replication.FormatID(m.ID), "role": "learner", "join": node.JoinString(m.ID),
		}
		if grouped != nil {
			out["groups"], out["replicas"] = grouped.groups, grouped.replicas
		}
		admin.WriteValue(w, http.StatusCreated, out)
	})))
	mux.Handle("DELETE /cluster/members/{name}", guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if forwarded != nil && forwarded(w, r) {
			return
		}
		if grouped != nil {
			held, unknown, known := grouped.knownHolding(r.Context(), name)
			if !known {
				// Removed at once, it could leave such a group a voter
				// short, its replica not handed over first.
				admin.WriteError(w, &admin.Error{Status: http.StatusServiceUnavailable, RetryAfter: time.Second,
					Message: fmt.Sprintf("the replicas of group %d are not known here yet (no report of its leader's): try again", unknown)})
				return
			}
			if len(held) > 0 {
				grouped.drain(w, r, name, held)
				return
			}
		}
		m, err := node.RemoveMember(r.Context(), name)
		if err != nil {
			writeChangeError(w, err)
			return
		}
		log.Info().Str("member", m.Name).Str("remote", r.RemoteAddr).Msg("member removed")
		admin.WriteValue(w, http.StatusOK, map[string]any{"name": m.Name, "address": m.Addr, "id": replication.FormatID(m.ID), "removed": true})
	})))
	cordon := func(w http.ResponseWriter, r *http.Request) {
		if grouped == nil {
			admin.WriteError(w, &admin.Error{Status: http.StatusConflict,
				Message: "a cluster of one group does not balance its leader: a member is cordoned only in a cluster of several groups (--cluster-groups)"})
			return
		}
		grouped.cordon(w, r, r.PathValue("name"), r.Method == http.MethodPost)
	}
	mux.Handle("POST /cluster/members/{name}/cordon", guard(http.HandlerFunc(cordon)))
	mux.Handle("DELETE /cluster/members/{name}/cordon", guard(http.HandlerFunc(cordon)))
}

// knownHolding is holding once every group's replicas are known here,
// or as it is after knownWait, or when ctx ends.
func (g *groupedMembers) knownHolding(ctx context.Context, name string) (held []uint16, unknown uint16, known bool) {
	until := time.Now().Add(g.knownWait)
	for {
		held, unknown, known = g.holding(name)
		if known || !time.Now().Before(until) || ctx.Err() != nil {
			return held, unknown, known
		}
		select {
		case <-ctx.Done():
		case <-time.After(reportedLeaderPoll):
		}
	}
}

// writeChangeError answers a membership change that failed.
func writeChangeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, replication.ErrBadMember):
		status = http.StatusBadRequest
	case errors.Is(err, replication.ErrUnknownMember):
		status = http.StatusNotFound
	case errors.Is(err, replication.ErrChangeInProgress), errors.Is(err, replication.ErrMemberExists),
		errors.Is(err, replication.ErrQuorumAtRisk):
		status = http.StatusConflict
	case errors.Is(err, replication.ErrNoLeader), errors.Is(err, replication.ErrChangeTimeout), errors.Is(err, replication.ErrNotServing),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, errNoReplica):
		status = http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled):
		return // the client went away
	}
	admin.WriteError(w, &admin.Error{Status: status, Message: err.Error()})
}

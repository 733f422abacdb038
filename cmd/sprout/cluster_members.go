package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/replication"
)

// maxMemberRequest bounds a membership change's request body.
const maxMemberRequest = 4 << 10

// memberChanger is what the membership endpoint asks of the member;
// *replication.Node has it.
type memberChanger interface {
	Status() replication.Status
	AddMember(ctx context.Context, name, addr string) (replication.Member, error)
	RemoveMember(ctx context.Context, name string) (replication.Member, error)
	JoinString(id uint64) string
}

// membersHandler serves the membership endpoint on --http
// (internal/replication/doc.go, "Membership changes"), guarded by guard
// as the admin API's changes are (a bearer --admin-token; without one,
// changes get 403); any other path goes to next (404 when nil):
//
//	GET    /cluster/members        the members, with their roles
//	POST   /cluster/members        {"name","address"}: add a learner (201)
//	DELETE /cluster/members/{name} remove a member (200)
//
// A change is answered once this member has applied it; its errors are
// JSON {"error": ...}: 400 bad input, 404 unknown member, 409 a change in
// progress or a name or address in use, 503 no leader or not applied in
// time.
func membersHandler(node memberChanger, guard func(http.Handler) http.Handler, next http.Handler, log zerolog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /cluster/members", func(w http.ResponseWriter, r *http.Request) {
		admin.WriteValue(w, http.StatusOK, map[string]any{"members": node.Status().Members})
	})
	mux.HandleFunc("POST /cluster/members", func(w http.ResponseWriter, r *http.Request) {
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
		admin.WriteValue(w, http.StatusCreated, map[string]any{
			"name": m.Name, "address": m.Addr, "id": replication.FormatID(m.ID), "role": "learner", "join": node.JoinString(m.ID),
		})
	})
	mux.HandleFunc("DELETE /cluster/members/{name}", func(w http.ResponseWriter, r *http.Request) {
		m, err := node.RemoveMember(r.Context(), r.PathValue("name"))
		if err != nil {
			writeChangeError(w, err)
			return
		}
		log.Info().Str("member", m.Name).Str("remote", r.RemoteAddr).Msg("member removed")
		admin.WriteValue(w, http.StatusOK, map[string]any{"name": m.Name, "address": m.Addr, "id": replication.FormatID(m.ID), "removed": true})
	})
	guarded := guard(mux)
	if next == nil {
		next = http.NotFoundHandler()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			next.ServeHTTP(w, r)
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

// writeChangeError answers a membership change that failed.
func writeChangeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, replication.ErrBadMember):
		status = http.StatusBadRequest
	case errors.Is(err, replication.ErrUnknownMember):
		status = http.StatusNotFound
	case errors.Is(err, replication.ErrChangeInProgress), errors.Is(err, replication.ErrMemberExists):
		status = http.StatusConflict
	case errors.Is(err, replication.ErrNoLeader), errors.Is(err, replication.ErrChangeTimeout),
		errors.Is(err, context.DeadlineExceeded):
		status = http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled):
		return // the client went away
	}
	admin.WriteError(w, &admin.Error{Status: status, Message: err.Error()})
}

package admin

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// DefaultListLimit is a page's size when the request does not say.
const DefaultListLimit = 100

// listStates are the states a listing may name.
var listStates = map[string]store.State{
	"ready":    store.StateReady,
	"delayed":  store.StateDelayed,
	"reserved": store.StateReserved,
	"buried":   store.StateBuried,
}

// encodeCursor makes a page's end opaque: base64 of "state:key:id", so a
// client passes it back as it got it and cannot mistake it for a job id.
func encodeCursor(state store.State, at *store.ListCursor) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%s:%d:%d", state, at.Key, at.ID))
}

// decodeCursor reads a cursor back; one made for another state is refused,
// since its key means something else there.
func decodeCursor(s string, state store.State) (*store.ListCursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	parts := strings.Split(string(raw), ":")
	if err != nil || len(parts) != 3 {
		return nil, errorf(http.StatusBadRequest, "invalid cursor %q: pass back the next of a page as it came", s)
	}
	if parts[0] != state.String() {
		return nil, errorf(http.StatusBadRequest, "the cursor is from a listing of %s jobs, not %s", parts[0], state)
	}
	key, err1 := strconv.ParseInt(parts[1], 10, 64)
	id, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return nil, errorf(http.StatusBadRequest, "invalid cursor %q: pass back the next of a page as it came", s)
	}
	return &store.ListCursor{Key: key, ID: id}, nil
}

// flushAt is how much of a listing is encoded before it is written out.
const flushAt = 64 << 10

// listJobs answers a page of the tube's jobs in a state (see doc.go).
// Bodies come with them when the request may see bodies, unless it asks
// bodies=false.
func (a *API) listJobs(w http.ResponseWriter, r *http.Request, acc Access) error {
	name, err := tubeName(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	stateName := q.Get("state")
	if stateName == "" {
		stateName = "ready"
	}
	state, ok := listStates[stateName]
	if !ok {
		return errorf(http.StatusBadRequest, "state must be ready, delayed, reserved or buried, not %q", stateName)
	}
	limit := DefaultListLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > store.MaxListPage {
			return errorf(http.StatusBadRequest, "limit must be from 1 to %d, not %q", store.MaxListPage, s)
		}
		limit = n
	}
	var after *store.ListCursor
	if s := q.Get("cursor"); s != "" {
		if after, err = decodeCursor(s, state); err != nil {
			return err
		}
	}
	bodies := acc.Bodies
	if s := q.Get("bodies"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return errorf(http.StatusBadRequest, "bodies must be true or false, not %q", s)
		}
		bodies = bodies && b
	}

	c := a.client(r)
	defer c.Close()
	page, next, ok := c.ListJobs(name, state, after, limit)
	if !ok {
		return errNoTube(name)
	}
	if err := a.acknowledged(r.Context(), c); err != nil {
		return err
	}
	// Streamed: a page of large bodies is not held twice. The bodies are
	// the jobs' own memory, which never changes, or copies the store made
	// where deleted jobs' bodies are recycled (store.SetRecycler).
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	b := append(make([]byte, 0, flushAt+4096), `{"jobs":[`...)
	for i := range page {
		if i > 0 {
			b = append(b, ',')
		}
		var body []byte
		if bodies {
			body = page[i].Body
			if body == nil {
				body = []byte{}
			}
		}
		b = appendJob(b, &page[i].JobStats, body)
		if len(b) >= flushAt {
			if _, err := w.Write(b); err != nil {
				return nil // the client has gone
			}
			b = b[:0]
		}
	}
	b = append(b, `],"next":`...)
	if next != nil {
		b = appendString(b, encodeCursor(state, next))
	} else {
		b = append(b, "null"...)
	}
	_, _ = w.Write(append(b, "}\n"...))
	return nil
}

// jobID is the {id} of r's path.
func jobID(r *http.Request) (uint64, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, errorf(http.StatusBadRequest, "invalid job id %q: a whole number from 1", s)
	}
	return id, nil
}

func errNoJob(id uint64) error { return errorf(http.StatusNotFound, "no such job: %d", id) }

// getJob answers a job's stats-job figures, and its body if the request
// may see bodies.
func (a *API) getJob(w http.ResponseWriter, r *http.Request, acc Access) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	c := a.client(r)
	defer c.Close()
	js, ok := c.JobStats(id)
	if !ok {
		return errNoJob(id)
	}
	var body []byte
	if acc.Bodies {
		// A copy made under the store's lock: an in-memory engine
		// recycles the bodies of deleted jobs (store.SetRecycler).
		_, b, ok := c.PeekBody(id)
		if !ok {
			return errNoJob(id) // deleted meanwhile
		}
		body = b[:len(b)-2]
	}
	if err := a.acknowledged(r.Context(), c); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, append(appendJob(nil, &js, body), '\n'))
	return nil
}

// deleteJob deletes a ready, delayed or buried job. A reserved job is its
// worker's to delete: 409. Counted as one delete, as the protocol counts
// every delete command.
func (a *API) deleteJob(w http.ResponseWriter, r *http.Request, _ Access) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	a.engine.CountCommand(codec.CmdDelete, 1)
	c := a.client(r)
	defer c.Close()
	var deleted bool
	if err := a.byID(r, c, id, func() { deleted = c.Delete(id) }); err != nil {
		return err
	}
	if !deleted {
		return a.whyNot(r, c, id, "delete")
	}
	if err := a.acknowledged(r.Context(), c); err != nil {
		return err
	}
	WriteValue(w, http.StatusOK, map[string]int{"deleted": 1})
	return nil
}

// kickJob is kick-job: a buried or delayed job becomes ready. Any other
// state is 409. The protocol counts no kick-job, so neither does this.
func (a *API) kickJob(w http.ResponseWriter, r *http.Request, _ Access) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	c := a.client(r)
	defer c.Close()
	var kerr error
	if err := a.byID(r, c, id, func() { kerr = c.KickJob(id) }); err != nil {
		return err
	}
	switch err := kerr; {
	case errors.Is(err, store.ErrNotFound):
		return a.whyNot(r, c, id, "kick")
	case errors.Is(err, store.ErrNoSpace):
		return errorf(http.StatusInsufficientStorage, "the write-ahead log's disk is full: the job was not kicked")
	case err != nil:
		return err
	}
	if err := a.acknowledged(r.Context(), c); err != nil {
		return err
	}
	WriteValue(w, http.StatusOK, map[string]int{"kicked": 1})
	return nil
}

// byID runs change, a change of job id, unless a move between groups has
// frozen its tube (unfrozen). A job's tube never changes; one not here
// is left to change to find missing.
func (a *API) byID(r *http.Request, c *store.Client, id uint64, change func()) error {
	tube, _, ok := c.JobIn(id)
	if !ok {
		change()
		return nil
	}
	return a.unfrozen(r, []byte(tube), change)
}

// whyNot explains an operation by id the store refused: 404 when the job
// does not exist, 409 when it is in a state the operation does not take
// (reserved, for a delete; ready or reserved, for a kick). The job is
// looked up after the refusal, so the answer says what it is now; like
// any answer that shows a job, it waits until the job's put is durable.
func (a *API) whyNot(r *http.Request, c *store.Client, id uint64, op string) error {
	js, ok := c.JobStats(id)
	if !ok {
		return errNoJob(id)
	}
	if err := a.acknowledged(r.Context(), c); err != nil {
		return err
	}
	return errorf(http.StatusConflict, "cannot %s job %d: it is %s", op, id, js.State)
}

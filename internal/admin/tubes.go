package admin

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// Defaults of a put that leaves them out: Pheanstalk's, and below 1024 is
// "urgent" in stats.
const (
	DefaultPri = 1024
	DefaultTTR = 60
)

// putJob is the store's put; tests replace it to make the disk look full.
var putJob = (*store.Client).Put

func (a *API) getStats(w http.ResponseWriter, r *http.Request, _ Access) error {
	if sv, ok := r.Context().Value(servedKey{}).(served); ok && sv.part {
		writeJSON(w, http.StatusOK, a.partOf(r.URL.Path, sv))
		return nil
	}
	st := a.engine.Stats()
	writeJSON(w, http.StatusOK, append(appendServerStats(nil, &st), '\n'))
	return nil
}

// getTubes lists every tube with its stats-tube figures, in list-tubes
// order; each tube's lock is held only while its figures are copied.
func (a *API) getTubes(w http.ResponseWriter, r *http.Request, _ Access) error {
	if sv, ok := r.Context().Value(servedKey{}).(served); ok && sv.part {
		writeJSON(w, http.StatusOK, a.partOf(r.URL.Path, sv))
		return nil
	}
	writeJSON(w, http.StatusOK, tubesJSON(a.store(r.Context()), nil))
	return nil
}

// tubesJSON is {"tubes": [...]} of st's tubes that keep allows (nil:
// every one), each with its stats-tube figures, in list-tubes order.
func tubesJSON(st *store.Store, keep func(name string) bool) []byte {
	b := []byte(`{"tubes":[`)
	first := true
	st.EachTube(func(t *store.TubeStats) {
		if keep != nil && !keep(t.Name) {
			return
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendTube(b, t)
	})
	return append(b, "]}\n"...)
}

func (a *API) getTube(w http.ResponseWriter, r *http.Request, _ Access) error {
	name, err := tubeName(r)
	if err != nil {
		return err
	}
	st, ok := a.store(r.Context()).TubeStats(name)
	if !ok {
		return errNoTube(name)
	}
	writeJSON(w, http.StatusOK, append(appendTube(nil, &st), '\n'))
	return nil
}

// putRequest is a put's body; a field left out takes its default.
type putRequest struct {
	Body *string `json:"body"`
	// BodyEncoding is "text" (the default) or "base64".
	BodyEncoding string       `json:"body-encoding"`
	Pri          *json.Number `json:"pri"`
	Delay        *json.Number `json:"delay"`
	TTR          *json.Number `json:"ttr"`
}

// putJob puts a job into the tube (made if need be, as use makes it),
// counted as a put, and answers 201 {"id": N} once it is durable.
func (a *API) putJob(w http.ResponseWriter, r *http.Request, _ Access) error {
	name, err := tubeName(r)
	if err != nil {
		return err
	}
	args, err := a.readPut(w, r)
	if err != nil {
		return err
	}
	if a.engine.Draining() {
		return errorf(http.StatusServiceUnavailable, "draining: the server takes no new jobs")
	}
	c := a.client(r)
	defer c.Close()
	var j *store.Job
	if ferr := a.unfrozen(r, name, func() {
		c.Use(name)
		j, err = putJob(c, a.store(r.Context()).NextID(), args.pri, args.delay, args.ttr, append(args.body, '\r', '\n'))
	}); ferr != nil {
		return ferr
	}
	switch {
	case errors.Is(err, store.ErrNoSpace):
		return errorf(http.StatusInsufficientStorage, "the write-ahead log's disk is full: the job was not stored")
	case err != nil:
		return err
	}
	if err := a.acknowledged(r.Context(), c); err != nil {
		return err
	}
	w.Header().Set("Location", fmt.Sprintf("/api/v1/jobs/%d", j.ID()))
	WriteValue(w, http.StatusCreated, map[string]uint64{"id": j.ID()})
	return nil
}

// putArgs is a put's request, read and checked.
type putArgs struct {
	pri, delay, ttr uint32
	body            []byte // with room for the CRLF the store wants
}

// readPut reads a put's request: its fields, checked as the protocol
// checks a put's header (a bad one is 400, as BAD_FORMAT), then its
// job's body, which is 413 when over -z (as JOB_TOO_BIG), as is a
// request too long to hold a body within -z. The put counts in cmd-put
// once its fields are read and good, whatever follows, as the protocol
// counts a put once its header parses: a request too long to read, or
// not JSON, is not counted.
func (a *API) readPut(w http.ResponseWriter, r *http.Request) (putArgs, error) {
	// JSON may spell each byte of a body in six (\u00XX); the decoded body
	// is held to -z below.
	r.Body = http.MaxBytesReader(w, r.Body, 6*int64(a.maxJobSize)+4096)
	var req putRequest
	if err := decodeJSON(r.Body, &req); err != nil {
		return putArgs{}, err
	}
	if req.Body == nil {
		return putArgs{}, errorf(http.StatusBadRequest, `a put needs a "body"`)
	}
	var p putArgs
	var err error
	if p.pri, err = uint32Field("pri", req.Pri, DefaultPri); err != nil {
		return putArgs{}, err
	}
	if p.delay, err = uint32Field("delay", req.Delay, 0); err != nil {
		return putArgs{}, err
	}
	if p.ttr, err = uint32Field("ttr", req.TTR, DefaultTTR); err != nil {
		return putArgs{}, err
	}
	a.engine.CountCommand(codec.CmdPut, 1)
	switch req.BodyEncoding {
	case "", "text":
		p.body = make([]byte, len(*req.Body), len(*req.Body)+2)
		copy(p.body, *req.Body)
	case "base64":
		if p.body, err = base64.StdEncoding.AppendDecode(nil, []byte(*req.Body)); err != nil {
			return putArgs{}, errorf(http.StatusBadRequest, "body is not valid base64: %v", err)
		}
	default:
		return putArgs{}, errorf(http.StatusBadRequest, `body-encoding must be "text" or "base64", not %q`, req.BodyEncoding)
	}
	if len(p.body) > a.maxJobSize {
		return putArgs{}, errorf(http.StatusRequestEntityTooLarge,
			"body of %d bytes is over the maximum job size (-z) of %d", len(p.body), a.maxJobSize)
	}
	return p, nil
}

// uint32Field reads a whole number from 0 to 2^32-1, as the protocol's
// priorities, delays and bounds are; def when it is left out.
func uint32Field(name string, n *json.Number, def uint32) (uint32, error) {
	if n == nil {
		return def, nil
	}
	v, err := strconv.ParseUint(n.String(), 10, 32)
	if err != nil {
		return 0, errorf(http.StatusBadRequest, "%s must be a whole number from 0 to %d, not %s", name, uint32(math.MaxUint32), n)
	}
	return uint32(v), nil
}

// smallBody bounds the body of a request that is not a put.
const smallBody = 4 << 10

// numberBody reads a body of one field, a whole number within uint32,
// that must be given: {"bound": N}.
func numberBody(w http.ResponseWriter, r *http.Request, field string) (uint32, error) {
	var req map[string]json.Number
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	if err := decodeJSON(r.Body, &req); err != nil {
		return 0, err
	}
	for k := range req {
		if k != field {
			return 0, errorf(http.StatusBadRequest, "unknown field %q: the body is {%q: N}", k, field)
		}
	}
	n, ok := req[field]
	if !ok {
		return 0, errorf(http.StatusBadRequest, "%q is required", field)
	}
	return uint32Field(field, &n, 0)
}

// kickTube is kick on the tube, for up to bound jobs, in batches: buried
// ones if it has any, else delayed ones. Counted as one kick. A log that
// refuses the first kick is 507; one that refuses a later kick ends the
// kick early, and the answer counts the jobs kicked (the next is 507).
func (a *API) kickTube(w http.ResponseWriter, r *http.Request, _ Access) error {
	name, err := tubeName(r)
	if err != nil {
		return err
	}
	bound, err := numberBody(w, r, "bound")
	if err != nil {
		return err
	}
	a.engine.CountCommand(codec.CmdKick, 1)
	c := a.client(r)
	defer c.Close()
	var kicked int
	var ok bool
	var kerr error
	if err := a.unfrozen(r, name, func() { kicked, ok, kerr = c.KickTube(name, int(bound)) }); err != nil {
		return err
	}
	if !ok {
		return errNoTube(name)
	}
	if kerr != nil && kicked == 0 {
		return errorf(http.StatusInsufficientStorage, "the write-ahead log's disk is full: no job was kicked")
	}
	if err := a.acknowledged(r.Context(), c); err != nil {
		return err
	}
	WriteValue(w, http.StatusOK, map[string]int{"kicked": kicked})
	return nil
}

// pauseTube is pause-tube: no reserve takes from the tube for delay
// seconds. A single node does not log a pause (beanstalkd does not keep
// one over a restart either); a cluster group does, and the answer waits
// for that record, as the protocol's reply does.
func (a *API) pauseTube(w http.ResponseWriter, r *http.Request, _ Access) error {
	name, err := tubeName(r)
	if err != nil {
		return err
	}
	delay, err := numberBody(w, r, "delay")
	if err != nil {
		return err
	}
	a.engine.CountCommand(codec.CmdPauseTube, 1)
	c := a.client(r)
	defer c.Close()
	var ok bool
	if err := a.unfrozen(r, name, func() { ok = c.PauseTube(name, time.Duration(delay)*time.Second) }); err != nil {
		return err
	}
	if !ok {
		return errNoTube(name)
	}
	if err := a.acknowledged(r.Context(), c); err != nil {
		return err
	}
	WriteValue(w, http.StatusOK, map[string]uint32{"paused": delay})
	return nil
}

// clearStates are the states a clear may name.
var clearStates = map[string][]store.State{
	"ready":   {store.StateReady},
	"delayed": {store.StateDelayed},
	"buried":  {store.StateBuried},
	"all":     {store.StateReady, store.StateDelayed, store.StateBuried},
}

// clearTube deletes the tube's jobs in a state, or in all but reserved, in
// the store's bounded batches; each delete is logged and counted as a
// delete as it is made, so stats follows a long clear.
func (a *API) clearTube(w http.ResponseWriter, r *http.Request, _ Access) error {
	name, err := tubeName(r)
	if err != nil {
		return err
	}
	var req struct {
		State *string `json:"state"`
	}
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	if err := decodeJSON(r.Body, &req); err != nil {
		return err
	}
	if req.State == nil {
		return errorf(http.StatusBadRequest, `"state" is required: ready, delayed, buried or all`)
	}
	states, ok := clearStates[*req.State]
	if !ok {
		if *req.State == "reserved" {
			return errorf(http.StatusBadRequest, "reserved jobs are never cleared: their workers hold them")
		}
		return errorf(http.StatusBadRequest, "state must be ready, delayed, buried or all, not %q", *req.State)
	}
	c := a.client(r)
	defer c.Close()
	counted := 0
	var deleted int
	if err := a.unfrozen(r, name, func() {
		deleted, ok = c.ClearTube(name, states, func(n int) {
			a.engine.CountCommand(codec.CmdDelete, uint64(n-counted))
			counted = n
		})
	}); err != nil {
		return err
	}
	if !ok {
		return errNoTube(name)
	}
	if err := a.acknowledged(r.Context(), c); err != nil {
		return err
	}
	WriteValue(w, http.StatusOK, map[string]int{"deleted": deleted})
	return nil
}

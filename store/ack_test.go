package store_test

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// The store owns the rule "a reply that shows a job waits until the job's
// put may be acknowledged": every method that hands a client a job, or a
// job's figures, raises that client's PendingAck itself. The tests here
// hold the store to it. A new method of Client or Store that returns a job
// fails TestShowPathsAreListed until it is listed in showPaths, and a
// listed path that forgets to raise the position fails
// TestEveryShowWaitsForThePut.

// showPath shows one job to c. job is the job's id; the fixture has put
// it in c's used tube, in the state the path needs. It reports whether the
// job was shown.
type showPath struct {
	state store.State
	show  func(c *store.Client, job uint64) bool
}

// showPaths are every way a client can be shown a job, by method name.
// Put is here too: it hands back the job it made, and its reply waits for
// that job's own record.
var showPaths = map[string]showPath{
	"Client.Put": {store.StateReady, nil}, // the fixture's own put; see showJob
	"Client.PutAt": {store.StateReady, func(c *store.Client, job uint64) bool {
		// Its own job, whose record comes after the fixture's.
		s := c.Store()
		j, err := c.PutAt(s.NextID(), s.Now(), 1, 0, 60, []byte("body\r\n"))
		return err == nil && j.ID() > job
	}},
	"Client.Reserve": {store.StateReady, func(c *store.Client, job uint64) bool {
		j, r := c.Reserve(0)
		return r == store.Reserved && j.ID() == job
	}},
	"Client.TakeAtMost": {store.StateReady, func(c *store.Client, job uint64) bool {
		j, _, r := c.TakeAtMost(store.Candidate{Pri: ^uint32(0), ID: ^uint64(0)})
		return r == store.Taken && j.ID() == job
	}},
	"Client.ReserveJob": {store.StateBuried, func(c *store.Client, job uint64) bool {
		_, ok := c.ReserveJob(job)
		return ok
	}},
	"Client.Peek": {store.StateReady, func(c *store.Client, job uint64) bool {
		_, ok := c.Peek(job)
		return ok
	}},
	"Client.PeekBody": {store.StateReady, func(c *store.Client, job uint64) bool {
		_, body, ok := c.PeekBody(job)
		return ok && string(body) == "body\r\n"
	}},
	"Client.PeekReady":   {store.StateReady, peekedBy((*store.Client).PeekReady)},
	"Client.PeekDelayed": {store.StateDelayed, peekedBy((*store.Client).PeekDelayed)},
	"Client.PeekBuried":  {store.StateBuried, peekedBy((*store.Client).PeekBuried)},
	"Client.JobStats": {store.StateDelayed, func(c *store.Client, job uint64) bool {
		js, ok := c.JobStats(job)
		return ok && js.ID == job
	}},
	"Client.Holding": {store.StateReady, func(c *store.Client, job uint64) bool {
		// Taken as a handover gives it: Adopt shows nothing.
		c.Adopt(store.Reservation{ID: job, Deadline: time.Now().Add(time.Minute).UnixNano()})
		return c.Holding(job) != nil
	}},
	"Client.ListJobs": {store.StateBuried, func(c *store.Client, job uint64) bool {
		page, _, ok := c.ListJobs([]byte(store.DefaultTube), store.StateBuried, nil, 10)
		return ok && len(page) == 1 && page[0].ID == job
	}},
}

func peekedBy(peek func(*store.Client) *store.Job) func(*store.Client, uint64) bool {
	return func(c *store.Client, job uint64) bool {
		j := peek(c)
		return j != nil && j.ID() == job
	}
}

// showsJobs reports whether a method's results carry a job or its figures.
func showsJobs(m reflect.Method) bool {
	for i := range m.Type.NumOut() {
		if carriesJob(m.Type.Out(i), map[reflect.Type]bool{}) {
			return true
		}
	}
	return false
}

// carriesJob reports whether a value of type t holds a job or its figures,
// in a slice, array, map, pointer or exported struct field. seen breaks
// cycles.
func carriesJob(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == reflect.TypeFor[*store.Job]() || t == reflect.TypeFor[store.JobStats]() {
		return true
	}
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Slice, reflect.Array, reflect.Pointer, reflect.Map:
		return carriesJob(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && carriesJob(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

// unlistedShows names the methods of the given types that show jobs and
// are not in paths.
func unlistedShows(paths map[string]showPath, types ...reflect.Type) []string {
	var missing []string
	for _, typ := range types {
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			name := typ.Elem().Name() + "." + m.Name
			if _, ok := paths[name]; !ok && showsJobs(m) {
				missing = append(missing, name)
			}
		}
	}
	return missing
}

func TestShowPathsAreListed(t *testing.T) {
	for _, name := range unlistedShows(showPaths, reflect.TypeFor[*store.Client](), reflect.TypeFor[*store.Store]()) {
		t.Errorf("%s shows jobs but is not in showPaths: list it, and make it raise the client's PendingAck", name)
	}
}

// heldAcks acknowledges nothing, so every put stays pending.
type heldAcks struct{}

func (heldAcks) Acked() uint64          { return 0 }
func (heldAcks) OnAcked(uint64, func()) {}

// newUnacked returns a store on a log whose acknowledgements never come.
func newUnacked(t *testing.T) *store.Store {
	t.Helper()
	wl, err := wal.Open(t.TempDir(), wal.Options{SegmentSize: 1 << 20, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(store.Options{Log: wl, Acks: heldAcks{}})
	if err := wl.Start(s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = wl.Close()
		s.Close()
	})
	return s
}

// showJob puts a job in state, shows it to a fresh client through path and
// says what went wrong, if anything: the path did not show it, or the
// client's PendingAck stayed below the put's position.
func showJob(t *testing.T, path showPath) error {
	s := newUnacked(t)
	producer := s.NewClient(nil)
	defer producer.Close()
	var delay uint32
	if path.state == store.StateDelayed {
		delay = 3600
	}
	id := s.NextID()
	if _, err := producer.Put(id, 1, delay, 60, []byte("body\r\n")); err != nil {
		return err
	}
	putAt := producer.PendingAck()
	if putAt == 0 {
		return fmt.Errorf("put left its client's PendingAck at 0")
	}
	if path.show == nil {
		return nil // Put: its own position, just checked
	}
	if path.state == store.StateBuried {
		if _, ok := producer.ReserveJob(id); !ok {
			return fmt.Errorf("fixture: reserve-job %d failed", id)
		}
		if err := producer.Bury(id, 1); err != nil {
			return err
		}
	}
	viewer := s.NewClient(nil)
	defer viewer.Close()
	if !path.show(viewer, id) {
		return fmt.Errorf("did not show job %d", id)
	}
	if got := viewer.PendingAck(); got < putAt {
		return fmt.Errorf("PendingAck %d after showing a job put at %d: the reply would not wait for the put", got, putAt)
	}
	return nil
}

func TestEveryShowWaitsForThePut(t *testing.T) {
	for name, path := range showPaths {
		t.Run(name, func(t *testing.T) {
			if err := showJob(t, path); err != nil {
				t.Error(err)
			}
		})
	}
}

// waitRecorder is a Notifier that notes the client's PendingAck when a
// job reaches its blocked reserve, as the engine then reads it.
type waitRecorder struct {
	c    *store.Client
	mu   sync.Mutex
	seen []uint64
}

func (w *waitRecorder) JobReserved(*store.Job) {
	w.mu.Lock()
	w.seen = append(w.seen, w.c.PendingAck())
	w.mu.Unlock()
}

func (w *waitRecorder) WaitEnded(store.ReserveResult) {}

// TestHandedOffJobWaitsForThePut: a job put on one client and handed to
// another's blocked reserve makes the waiter's reply wait for the put,
// before the Notifier hears of it.
func TestHandedOffJobWaitsForThePut(t *testing.T) {
	s := newUnacked(t)
	rec := &waitRecorder{}
	waiter := s.NewClient(rec)
	rec.c = waiter
	defer waiter.Close()
	if _, r := waiter.Reserve(-1); r != store.Waiting {
		t.Fatalf("reserve on an empty tube: %v", r)
	}
	producer := s.NewClient(nil)
	defer producer.Close()
	if _, err := producer.Put(s.NextID(), 1, 0, 60, []byte("x\r\n")); err != nil {
		t.Fatal(err)
	}
	putAt := producer.PendingAck()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.seen) != 1 || rec.seen[0] < putAt {
		t.Errorf("waiter's PendingAck when JobReserved ran: %v; want one reading of at least %d", rec.seen, putAt)
	}
}

// sneakyClient adds a show path the store did not vet, to check that the
// checks above catch it.
type sneakyClient struct{ *store.Client }

// PeekUnvetted returns a job without raising anything.
func (c sneakyClient) PeekUnvetted(id uint64) *store.Job {
	j, _ := store.PeekByID(store.StoreOf(c.Client), id)
	return j
}

// TestChecksCatchAForgottenShow: an unlisted method that returns a job is
// named, and a listed path that shows a job without raising PendingAck
// fails.
func TestChecksCatchAForgottenShow(t *testing.T) {
	missing := unlistedShows(showPaths, reflect.TypeFor[*sneakyClient]())
	if !slices.Contains(missing, "sneakyClient.PeekUnvetted") {
		t.Errorf("unlisted show paths found: %v; want sneakyClient.PeekUnvetted among them", missing)
	}
	forgetful := showPath{store.StateReady, func(c *store.Client, job uint64) bool {
		return sneakyClient{c}.PeekUnvetted(job) != nil
	}}
	if err := showJob(t, forgetful); err == nil {
		t.Error("a path that shows a job without raising PendingAck passed")
	}
}

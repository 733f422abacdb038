package router

import (
	"sync/atomic"
	"testing"

	"github.com/sproutmq/sprout/store"
)

// TestLocalReserveJobNotRunUnleased: a reserve-job of a buried job that
// a session on the leader's own member sends, the leadership's lease
// lapsing before the store has answered, is not run on the store to be
// undone: undone (Unreserve), the job went back ready, not buried, on
// the leader alone. reserve-job goes the other way, where a reply
// refused for the lease keeps the job the owner's (refuseLocked).
func TestLocalReserveJobNotRunUnleased(t *testing.T) {
	st := store.New(store.Options{})
	t.Cleanup(st.Close)
	cl := st.NewClient(nil)
	cl.Use([]byte("t"))
	cl.Watch([]byte("t"))
	id := st.NextID()
	if _, err := cl.Put(id, 0, 0, 60, []byte("a\r\n")); err != nil {
		t.Fatal(err)
	}
	if j, res := cl.Reserve(0); res != store.Reserved || j.ID() != id {
		t.Fatalf("reserve: %v", res)
	}
	if err := cl.Bury(id, 0); err != nil {
		t.Fatal(err)
	}
	r := newServerRig(t, map[uint16]*store.Store{0: st})
	// Leased as the request begins, not once the store has answered: the
	// lease lapsed in between.
	var asked atomic.Int32
	r.srv.cfg.Leased = func(uint16) bool { return asked.Add(1) == 1 }
	var stamp atomic.Uint64
	if _, _, _, ran := r.srv.local(ownerKey{member: 7, session: 3}, Request{Op: OpReserveJob, ID: id}, &stamp); ran {
		t.Fatal("ran here, the lease lapsing meanwhile")
	}
	if s := st.Stats(); s.Buried != 1 || s.Ready != 0 {
		t.Fatalf("after a reserve-job not answered for the lease: %+v; want the job still buried", s)
	}
}

package router

import (
	"sync"
	"sync/atomic"
	"time"
)

// refusalRecall is how long a leader remembers a session's request it
// refused as not serving (refusals): longer than the requests pipelined
// behind it take to arrive, which the member sent before the refusal
// reached it. The member sends nothing newer until the refused one goes
// again (Link.postCall).
const refusalRecall = time.Second

// refusals are the sessions' first requests this member refused because
// it did not serve their groups (not yet, or gated by a handover), for
// refusalRecall. Until one comes again, a later pipelined request of its
// session is refused too: it was in flight behind the refused one, and
// run now it would run before it, when the member sends that again
// (a put's id below an earlier put's). The member sends it again after
// the first, in order (Link.resend).
type refusals struct {
	// any says whether first may hold a refusal: the requests of a
	// member that refused none take no lock.
	any   atomic.Bool
	mu    sync.Mutex
	first map[ownerKey]refusal
	order []refusedNote // the keys noted, oldest first, for their expiry
}

type refusal struct {
	seq uint32
	at  time.Time
}

type refusedNote struct {
	key ownerKey
	at  time.Time
}

// note remembers that key's request seq was refused, unless one before
// it was and is remembered still.
func (r *refusals) note(key ownerKey, seq uint32) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked(now)
	if f, ok := r.first[key]; ok && !seqAfter(f.seq, seq) {
		return
	}
	if r.first == nil {
		r.first = make(map[ownerKey]refusal)
	}
	r.first[key] = refusal{seq, now}
	r.order = append(r.order, refusedNote{key, now})
	r.any.Store(true)
}

// holds reports whether it, of session key, must be refused: a request
// refused before it has not come again. One that is the refused request
// or an older one (sent again), or that says the session had every
// answer before it (not pipelined: the refused one was answered
// elsewhere), ends the refusal.
func (r *refusals) holds(key ownerKey, it *Item) bool {
	if !r.any.Load() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked(time.Now())
	f, ok := r.first[key]
	if !ok {
		return false
	}
	if seqAfter(it.Seq, f.seq) &&
		it.Kind == KindRequest && Pipelined(it.Request.Op) {
		return true
	}
	r.deleteLocked(key)
	return false
}

// pending reports whether a request of session key was refused and has
// not come again: the local path must not run one after it.
func (r *refusals) pending(key ownerKey) bool {
	if !r.any.Load() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked(time.Now())
	_, ok := r.first[key]
	return ok
}

// forgetGroup forgets group g's refusals: this member no longer serves
// it, and the requests go to its next leader.
func (r *refusals) forgetGroup(g uint16) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.first {
		if k.group == g {
			r.deleteLocked(k)
		}
	}
}

// forgetLocked drops the refusals noted more than refusalRecall before
// now.
func (r *refusals) forgetLocked(now time.Time) {
	i := 0
	for ; i < len(r.order) && now.Sub(r.order[i].at) > refusalRecall; i++ {
		n := r.order[i]
		if f, ok := r.first[n.key]; ok && f.at.Equal(n.at) {
			r.deleteLocked(n.key)
		}
	}
	clear(r.order[:i])
	r.order = r.order[i:]
}

func (r *refusals) deleteLocked(key ownerKey) {
	delete(r.first, key)
	if len(r.first) == 0 {
		r.any.Store(false)
	}
}

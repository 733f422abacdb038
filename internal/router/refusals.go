package router

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// refusalRecall is how long a leader remembers a session's requests it
// refused as not serving (refusals) after the last so refused (not the
// last held back behind them: refusals.holds): longer than the
// requests pipelined behind them take to arrive, which the member sent
// before the refusal reached it. The member sends nothing newer until a
// refused one goes again (Link.postCall).
const refusalRecall = time.Second

// refusals are the sessions' requests this member refused because it did
// not serve their groups (not yet, or gated by a handover), for
// refusalRecall. While one is refused and has not come again, a later
// pipelined request of its session is refused too, and remembered so: it
// was in flight behind the refused one, and run now it would run before
// it, when the member sends that again (a put's id below an earlier
// put's). The member sends each again once it has read its refusal, in
// order (Link.resendLocked); a request that is not pipelined says the session
// had every answer before it, and ends them all.
type refusals struct {
	// any says whether first may hold a refusal: the requests of a
	// member that refused none take no lock.
	any   atomic.Bool
	mu    sync.Mutex
	first map[ownerKey]refusal
	order []refusedNote // the keys noted, oldest first, for their expiry
}

// refusal is a session's refused sequences in a group, and when the last
// was noted.
type refusal struct {
	seqs []uint32
	at   time.Time
}

type refusedNote struct {
	key ownerKey
	at  time.Time
}

// note remembers that key's request seq was refused.
func (r *refusals) note(key ownerKey, seq uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noteLocked(key, seq, time.Now())
}

func (r *refusals) noteLocked(key ownerKey, seq uint32, now time.Time) {
	r.forgetLocked(now)
	if r.first == nil {
		r.first = make(map[ownerKey]refusal)
	}
	f := r.first[key]
	if !slices.Contains(f.seqs, seq) {
		f.seqs = append(f.seqs, seq)
	}
	f.at = now
	r.first[key] = f
	r.order = append(r.order, refusedNote{key, now})
	r.any.Store(true)
}

// holds reports whether it, of session key, must be refused: a pipelined
// request while one before it was refused and has not come again (it is
// then remembered as refused too). Run, it is no longer refused; one that
// is not pipelined ends every refusal of its session.
func (r *refusals) holds(key ownerKey, it *Item) bool {
	if !r.any.Load() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.forgetLocked(now)
	f, ok := r.first[key]
	if !ok {
		return false
	}
	if it.Kind != KindRequest || !Pipelined(it.Request.Op) {
		r.deleteLocked(key)
		return false
	}
	if slices.ContainsFunc(f.seqs, func(seq uint32) bool { return seqAfter(it.Seq, seq) && seq != it.Seq }) {
		// Remembered, but the refusal is not renewed: it ends
		// refusalRecall after the last request refused as not served.
		// Renewed by each hold-back, it never ended when the refused one
		// was answered by another leader and never came here again: the
		// later one, asked every retryEvery, was refused for good.
		if !slices.Contains(f.seqs, it.Seq) {
			f.seqs = append(f.seqs, it.Seq)
			r.first[key] = f
		}
		return true
	}
	r.dropLocked(key, it.Seq)
	return false
}

// cancelled forgets key's refused wait of sequence seq: the session
// cancelled it, and it will not come again.
func (r *refusals) cancelled(key ownerKey, seq uint32) {
	if !r.any.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropLocked(key, seq)
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

// dropLocked forgets key's refused sequence seq, if it is one.
func (r *refusals) dropLocked(key ownerKey, seq uint32) {
	f, ok := r.first[key]
	if !ok {
		return
	}
	if f.seqs = slices.DeleteFunc(f.seqs, func(s uint32) bool { return s == seq }); len(f.seqs) == 0 {
		r.deleteLocked(key)
		return
	}
	r.first[key] = f
}

// forgetLocked drops the refusals whose last was noted more than
// refusalRecall before now.
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

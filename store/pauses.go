package store

import (
	"time"

	"github.com/sproutmq/sprout/store/wal"
)

// A cluster's pauses (Options.LogPauses) outlive its leader: each
// pause-tube is logged (a wal.KindMeta record, MetaPause), and so is the
// end of a pause that its tube's freeing drops, as beanstalkd forgets a
// freed tube's pause. Every replica keeps the latest of each tube's
// (internal/replication's TubeBook) and gives them to its store
// (SetPauses), which pauses its tubes so and keeps the others' for when
// they are made: a leader's tube lives on its clients' references, which
// its followers' stores do not hold. So the next leader's tubes are
// paused as the last leader's were, until the same end.

// Pause is a tube's pause as logged: the pause-tube's duration, and when
// it ends (wall ns).
type Pause struct {
	Dur   time.Duration `json:"dur"`
	Until int64         `json:"until"`
}

// Lead tells a cluster's store that it serves now (its group's leader's):
// a pause its freed tube drops is logged from then on, until Reset (a
// follower's store logs nothing).
func (s *Store) Lead() { s.leading.Store(true) }

// logPause logs tube's pause (dur 0: none any more), if the store logs
// pauses and serves; c's reply, if c is set, waits for it. The caller
// holds the tube's lock, or registryMu.
//
// A keyed pause-tube's key (key not zero, with Options.Dedup) follows
// its record as a KindReq, which every replica's table folds as one a
// snapshot carries: a pause-tube resent after a failover is answered
// PAUSED from it (PauseTubeKeyed), its pause not begun again. A KindMeta
// record carries no key: a release before keys read only a KindFull,
// KindUpdate or KindDelete so (wal's kindKeyed).
func (s *Store) logPause(c *Client, tube string, dur, until int64, key wal.Req) {
	if !s.logPauses || s.log == nil || !s.leading.Load() {
		return
	}
	r := wal.Record{Kind: wal.KindMeta, State: wal.MetaPause, Tube: tube, Delay: dur, Deadline: until}
	lsn, _, err := s.log.Append(&r, wal.Loc{})
	if err != nil || c == nil {
		return
	}
	c.raisePendingAck(lsn)
	if key.IsZero() || s.dedup == nil {
		return
	}
	req := wal.Record{Kind: wal.KindReq, Req: key, Time: s.Clock(), Count: 1}
	if lsn, _, err = s.log.Append(&req, wal.Loc{}); err == nil {
		c.raisePendingAck(lsn)
		c.keep(key, Outcome{Count: 1})
	}
}

// SetPauses makes the store's pauses the given ones, by tube (a cluster's
// replica's, as its log holds them): a tube held here is paused until
// its pause's end, unless it has ended; the others' pauses are kept for
// when their tubes are made. On a store that follows (not Lead), a tube
// held here that is paused and has no pause not yet ended among them is
// unpaused, its waiters served: a pause-tube of 0 is logged as a pause of
// 1 ns, over by the time a replica applies it, and a freed tube's pause
// is dropped from the log; either way the pause before it ends. Not on
// the leader's store, whose own pauses are ahead of the log's: a pause it
// made whose record is not applied yet would end. A pause-tube's count
// is not counted again.
func (s *Store) SetPauses(pauses map[string]Pause) {
	now := s.now()
	var hs handoffs
	s.registryMu.Lock()
	s.pauses = nil
	for name, t := range s.tubes {
		if p, ok := pauses[name]; s.leading.Load() || ok && s.mono(p.Until) > now {
			continue
		}
		t.mu.Lock()
		if t.pauseDur > 0 {
			hs = t.unpauseLocked(now, hs)
		}
		t.mu.Unlock()
	}
	for name, p := range pauses {
		if s.mono(p.Until) <= now {
			continue
		}
		if t := s.tubes[name]; t != nil {
			t.mu.Lock()
			t.pauseDur, t.pauseUntil = int64(p.Dur), s.mono(p.Until)
			s.timers.schedule(&t.pauseTimer, t.pauseUntil)
			t.mu.Unlock()
			continue
		}
		s.keepPauseLocked(name, p)
	}
	s.registryMu.Unlock()
	s.complete(hs)
}

// keepPauseLocked keeps the pause p of the tube named name, which the
// store does not hold, for when it is made (resumePauseLocked).
// registryMu is held for writing.
func (s *Store) keepPauseLocked(name string, p Pause) {
	if s.pauses == nil {
		s.pauses = make(map[string]Pause)
	}
	s.pauses[name] = p
}

// resumePauseLocked pauses t, just made, if SetPauses kept a pause of
// its name that has not ended. registryMu is held for writing.
func (s *Store) resumePauseLocked(t *Tube) {
	p, ok := s.pauses[t.name]
	if !ok {
		return
	}
	delete(s.pauses, t.name)
	if until := s.mono(p.Until); until > s.now() {
		t.pauseDur, t.pauseUntil = int64(p.Dur), until
		s.timers.schedule(&t.pauseTimer, t.pauseUntil)
	}
}

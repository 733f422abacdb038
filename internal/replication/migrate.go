package replication

import (
	"time"

	"github.com/sproutmq/sprout/store/segment"
)

// Migrate requests (docs/design/shards.md 2.4). The groups of a member
// share its segments, and each group's serving leader moves its own live
// jobs out of old segments by proposing their rewrites (segment.Migrator,
// the store). A group led by another member has no Migrator here: until
// its leader's rewrites move them, its live jobs pin the segment they
// are in, and since segments go oldest first, every segment after it;
// an idle group's leader never rewrites at all. So the segment log hands
// those jobs' ids to the group's asker (askMigrator), and the node asks
// the group's leader to rewrite them: a migrate request on the Raft
// stream (wire.go, typedMigrate). The leader rewrites each id still live
// as a full record (store.Store.Rewrite); the rewrites commit and apply
// here like any entry, which moves the jobs out of the old segment.
//
// Nothing is lost when a request is: a job handed out stays asked for
// until the log sees it moved or deleted, and is asked for again each
// askWait while it is not. A job is first asked for an askWait after it
// was handed out, which leaves a leader whose own segments need the same
// compaction (one group alone: its members' segments are alike) the time
// to move it itself, so a job is rarely rewritten twice.
const (
	// maxMigrateIDs bounds the ids of one request: its frame (8 bytes an
	// id) stays well within messagePart.
	maxMigrateIDs = 1 << 16
	// maxAskBytes bounds the records one request has the leader rewrite:
	// what it proposes at once for another member's compaction.
	maxAskBytes = 16 << 20
)

// ask is a job the segment log handed out to move: the segment it is to
// leave, and when it was handed out or last asked for.
type ask struct {
	seg uint32
	at  time.Time
}

// askMigrator is the segment.Migrator of a group this member does not
// lead: it keeps the ids handed out for the node to ask for.
type askMigrator struct{ l *GroupLog }

// Migrate implements segment.Migrator.
func (m askMigrator) Migrate(seg uint32, ids []uint64) {
	l, now := m.l, time.Now()
	l.asksMu.Lock()
	defer l.asksMu.Unlock()
	if l.asks == nil {
		l.asks = make(map[uint64]ask, len(ids))
	}
	for _, id := range ids {
		l.asks[id] = ask{seg: seg, at: now}
	}
}

// Asker is the log's Migrator while this member does not lead the
// group: it keeps the ids handed out, for takeAsks.
func (l *GroupLog) Asker() segment.Migrator { return askMigrator{l} }

// takeAsks returns the ids to ask the group's leader to rewrite now:
// those handed out or last asked for at least wait ago whose latest full
// record is still in the segment they were to leave, up to
// maxMigrateIDs and maxAskBytes of records. The others are forgotten:
// moved or deleted. The ids returned count as asked for now.
func (l *GroupLog) takeAsks(now time.Time, wait time.Duration) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asksMu.Lock()
	defer l.asksMu.Unlock()
	var ids []uint64
	bytes := 0
	for id, a := range l.asks {
		p, live := l.latest.get(id)
		switch {
		case !live || p.loc.Seg != a.seg:
			delete(l.asks, id)
		case now.Sub(a.at) >= wait && len(ids) < maxMigrateIDs && bytes < maxAskBytes:
			ids = append(ids, id)
			bytes += int(p.loc.Size)
			l.asks[id] = ask{seg: a.seg, at: now}
		}
	}
	return ids
}

// askWait is how long a job handed out waits before it is asked for, and
// between asks: raft's base election timeout.
func (n *Node) askWait() time.Duration { return time.Duration(n.cfg.ElectionTick) * n.cfg.Tick }

// askMigrations, on the node goroutine at a tick, at most every half
// askWait: compacts the log as of the index applied, so that a group
// that applies nothing more still lets go of the segments its entries
// kept for followers were in (GroupLog.Compact, retainSegments); and
// asks the group's leader to rewrite the jobs the log wants moved, or on
// the leader itself has its store rewrite them (the jobs its log handed
// out before it led).
func (n *Node) askMigrations(now time.Time) {
	l, ok := n.log.(migratingLog)
	if !ok || now.Sub(n.lastAsk) < n.askWait()/2 {
		return
	}
	n.lastAsk = now
	n.log.Compact(n.core.Applied())
	if n.store == nil || !n.serving && (n.lead == 0 || n.lead == n.self.ID) {
		return // no leader to ask: the jobs wait for one
	}
	ids := l.takeAsks(now, n.askWait())
	switch {
	case len(ids) == 0:
	case n.serving:
		n.startRewrite(ids)
	default:
		n.host.transport.sendMigrate(n.group, n.lead, ids)
		n.mu.Lock()
		n.askedIDs += uint64(len(ids))
		n.mu.Unlock()
	}
}

// migrateAsked takes a peer's migrate request, from the transport: the
// node goroutine rewrites the ids if it serves, one request at a time.
// A request that finds another in the mailbox or being rewritten is
// dropped: its member asks again.
func (n *Node) migrateAsked(ids []uint64) {
	n.mailMu.Lock()
	if n.migrateIn == nil {
		n.migrateIn = ids
	}
	n.mailMu.Unlock()
	n.signal()
}

// startRewrite, on the node goroutine, has the store rewrite ids as full
// records for the members' compaction, on a goroutine of its own unless
// one still runs; it only runs while this member serves, and a rebuild
// waits for it (rebuild).
func (n *Node) startRewrite(ids []uint64) {
	if !n.serving || n.store == nil || n.rewriting.Load() {
		return
	}
	n.rewriting.Store(true)
	n.rewrites.Add(1)
	go func() {
		defer n.rewrites.Done()
		defer n.rewriting.Store(false)
		done := n.store.Rewrite(ids)
		n.mu.Lock()
		n.rewrittenIDs += uint64(done)
		n.mu.Unlock()
	}()
}

package replication

import (
	"context"
	"slices"
	"time"

	"github.com/sproutmq/sprout/store/wal"
)

// Finalization (docs/design/shards.md 1.6). A cluster runs as the
// release before it did, protocol 2 on the wire and version 2 segments,
// until every member speaks protocol 3: a rolling upgrade can stop and go
// back at any point until then. Once group 0's leader has a protocol-3
// connection to every other member of its book, it proposes a control
// record (wal.KindControl) that raises the cluster version to 3. Each
// member that applies it keeps the version in its book (the log's
// checkpoints and snapshots carry it, so compaction never loses it) and
// from then on refuses protocol-2 hellos, and its log moves to version 3
// segments, which a release before refuses in one line: there is no way
// back. What the version opens comes with the steps after it (the meta
// group, the router).
const (
	// clusterVersion is the version a finalized cluster runs.
	clusterVersion = 3
	// finalizeEvery is how often a leader may propose finalization while
	// it has not been applied: a proposal lost in a leader change is made
	// again by the next leader, or this one, an election timeout later.
	finalizeEvery = time.Second
)

// maybeFinalize, on the node goroutine at a tick, has group 0's serving
// leader propose finalization once every other member of its book speaks
// protocol 3 with it (NodeConfig.NoFinalize keeps a cluster at version 2).
func (n *Node) maybeFinalize(now time.Time) {
	// The host's version first: once finalized, nothing here runs again
	// (the book is a copy).
	if n.group != group0 || !n.serving || n.cfg.NoFinalize || n.host.Version() >= clusterVersion ||
		now.Sub(n.lastFinalize) < finalizeEvery {
		return
	}
	book := n.core.Book()
	if book.Version >= clusterVersion {
		return // applied here, the host not yet told
	}
	for _, m := range book.Members {
		if m.ID != n.self.ID && n.host.transport.protocolOf(m.ID) < clusterVersion {
			return
		}
	}
	n.lastFinalize = now
	if _, _, err := n.journal.Append(&wal.Record{Kind: wal.KindControl, Pri: clusterVersion}, wal.Loc{}); err != nil {
		n.logger.Warn().Err(err).Msg("cannot propose finalization yet")
		return
	}
	n.logger.Info().Int("version", clusterVersion).Msg("every member speaks protocol 3: finalizing the cluster")
}

// applyControlAct carries out ActControl: the book with the new version goes
// to the log, and the member acts on it.
func (n *Node) applyControlAct(a Action) {
	n.log.SetMembership(n.conf, a.Book)
	n.mu.Lock()
	drains := !slices.Equal(n.draining, a.Book.Draining)
	cordons := !slices.Equal(n.cordoned, a.Book.Cordoned)
	n.draining = slices.Clone(a.Book.Draining)
	n.cordoned = slices.Clone(a.Book.Cordoned)
	n.mu.Unlock()
	moved := !n.Tubes().equal(a.Book.Tubes)
	n.setTubes(a.Book.Tubes)
	switch {
	case drains:
		n.logger.Info().Uint64("index", a.Index).Strs("draining", n.names(a.Book.Draining)).Msg("members draining")
		return
	case cordons:
		n.logger.Info().Uint64("index", a.Index).Strs("cordoned", n.names(a.Book.Cordoned)).Msg("members cordoned")
		return
	case moved:
		n.logger.Debug().Uint64("index", a.Index).Msg("a tube's move recorded")
		return
	}
	n.logger.Info().Uint64("index", a.Index).Uint16("version", a.Book.Version).Msg("the cluster version was raised")
	if n.group == group0 {
		n.host.setVersion(a.Book)
	}
}

// setVersion acts on the cluster version of group 0's book, at start and
// when a control record raised it: from version 3 the transport refuses
// protocol-2 hellos, and the member's log moves to version 3 segments (on
// a goroutine of its own: it may wait for the spare).
func (h *Host) setVersion(book Book) {
	v := book.Version
	if v < clusterVersion {
		return
	}
	if h.version.Swap(uint32(v)) >= clusterVersion {
		return
	}
	h.transport.setFloor(clusterVersion)
	if h.finalizeLog != nil {
		go func() {
			if err := h.finalizeLog(h.transport.ctx); err != nil && h.transport.ctx.Err() == nil {
				h.transport.cfg.log.Error().Err(err).Msg("cannot move the log to version 3 segments")
			}
		}()
	}
}

// Finalized reports whether the cluster runs version 3: every member
// speaks protocol 3 and none of the release before may join.
func (h *Host) Finalized() bool { return h.Version() >= clusterVersion }

// Version is the cluster version: 2 until finalization, then 3.
func (h *Host) Version() int {
	if v := h.version.Load(); v >= clusterVersion {
		return int(v)
	}
	return 2
}

// finalizer is a log that moves to version 3 segments on finalization
// (GroupLog, WALLog).
type finalizer interface {
	Finalize(ctx context.Context) error
}

// Finalize moves the shared log to version 3 segments if it is not yet:
// a release before refuses the directory from then on.
func (l *GroupLog) Finalize(ctx context.Context) error { return l.s.toV3(ctx, nil) }

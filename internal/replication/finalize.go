package replication

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/sproutmq/sprout/internal/meta"
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
	n.draining = slices.Clone(a.Book.Draining)
	n.mu.Unlock()
	moved := !n.Tubes().equal(a.Book.Tubes)
	n.setTubes(a.Book.Tubes)
	switch {
	case drains:
		n.logger.Info().Uint64("index", a.Index).Strs("draining", n.names(a.Book.Draining)).Msg("members draining")
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
// when a control record raised it: from version 3 the meta group starts
// (startMeta), the transport refuses protocol-2 hellos, and the member's
// log moves to version 3 segments (on a goroutine of its own: it may wait
// for the spare).
func (h *Host) setVersion(book Book) {
	v := book.Version
	if v < clusterVersion {
		return
	}
	h.startMeta(book)
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

// metaVoters are the meta group's voters at finalization: those
// meta.Formation chooses among group 0's voters, so the state and the Raft
// group agree; nil if it chooses none.
func metaVoters(book Book, voters map[uint64]struct{}) []uint64 {
	var ms []meta.Member
	for _, m := range book.Members {
		if _, ok := voters[m.ID]; ok {
			ms = append(ms, meta.Member{Name: m.Name, ID: m.ID})
		}
	}
	formation, err := meta.Formation(ms, 1, len(ms))
	if err != nil {
		return nil
	}
	var ids []uint64
	for _, name := range formation.MetaVoters {
		if m, ok := book.byName(name); ok {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// metaSegmentSize is the meta group's segments' size: its state is tens
// of KB, rewritten whole on each (rare) change.
const metaSegmentSize = 1 << 20

// startMeta starts the meta group's replica, once, on a finalized member
// that votes in it and has a directory for its log (NodeConfig.MetaDir).
func (h *Host) startMeta(book Book) {
	if h.metaBase.MetaDir == "" || !slices.Contains(book.MetaVoters, h.self.ID) {
		return
	}
	h.metaOnce.Do(func() { go h.runMeta(book.clone()) })
}

// runMeta opens the meta group's log in NodeConfig.MetaDir and starts its
// replica from the formation the finalized book gives: its voters, one
// group, as many replicas (docs/design/shards.md 1.6); the leader then
// commits that state (settle), so the formation every member reads is the
// one the log holds, whatever book a member restarted with.
func (h *Host) runMeta(book Book) {
	logger := h.metaBase.Logger.With().Str("node", h.self.Name).Str("group", "meta").Logger()
	var peers []Member
	var members []meta.Member
	for _, id := range book.MetaVoters {
		m, ok := book.byID(id)
		if !ok {
			logger.Error().Str("id", FormatID(id)).Msg("a meta voter is not in the book: the meta group does not start")
			return
		}
		peers = append(peers, m)
		members = append(members, meta.Member{Name: m.Name, ID: m.ID})
	}
	formation, err := meta.Formation(members, 1, len(members))
	if err != nil {
		logger.Error().Err(err).Msg("the meta group does not start")
		return
	}
	cfg := h.metaBase
	// Its own: the clients are group 0's to close on a rebuild, and the
	// proposals' figures group 0's.
	cfg.Peers, cfg.Retain, cfg.CloseClients, cfg.Observer = peers, 0, nil, nil
	wcfg := WALConfig{Dir: cfg.MetaDir, ClusterID: h.cluster, ID: h.self.ID, Name: h.self.Name, Voters: book.MetaVoters,
		Wal: wal.Options{SegmentSize: metaSegmentSize, Logger: logger}}
	l, err := OpenWALLog(wcfg)
	if err != nil {
		logger.Error().Err(err).Msg("cannot open the meta group's log: the meta group does not start")
		return
	}
	cfg.Log = l
	m, err := h.StartMeta(cfg, formation)
	if err != nil {
		_ = l.Close()
		if !errors.Is(err, errStopped) {
			logger.Error().Err(err).Msg("the meta group does not start")
		}
		return
	}
	h.mu.Lock()
	closed := h.closed
	if !closed {
		h.meta, h.metaLog = m, l
	}
	h.mu.Unlock()
	if closed {
		// The host stopped meanwhile, closing the replica or about to.
		m.Close()
		_ = l.Close()
		return
	}
	m.settle(h.transport.ctx)
}

// Meta is the meta group's replica on this member, nil while it runs none
// (before finalization, on a member that does not vote in it, or without
// NodeConfig.MetaDir).
func (h *Host) Meta() *Meta {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.meta
}

// settle has the meta group's serving leader commit the state it started
// from, if no state is committed yet: the formation each member computed
// is then the log's, the same everywhere. It returns once a state is.
func (m *Meta) settle(ctx context.Context) {
	for {
		s, changed := m.State()
		if s.Version > 0 {
			return
		}
		info, lead := m.node.Leader()
		if info.Serving && m.Propose(ctx) == nil {
			continue
		}
		select {
		case <-changed:
		case <-lead:
		case <-m.node.Done():
			return
		case <-ctx.Done():
			return
		}
	}
}

package member

import "github.com/sproutmq/sprout/store/wal"

// logFigures are the figures of the member's log for the
// sprout_binlog_* series: its segments, records and bytes are the shared
// log's, every group's, which its groups' journals do not have
// (replication.Journal.Stats counts the records a store appended, and
// migrated); the records migrated are group 0's journal's, as stats'
// binlog-records-migrated, since the shared log does not count the
// records its groups' leaders rewrite.
func (m *Member) logFigures() wal.Stats {
	st := m.clusterLog.Shared().Stats()
	if own, ok := m.store.LogStats(); ok {
		st.RecordsMigrated = own.RecordsMigrated
	}
	return st
}

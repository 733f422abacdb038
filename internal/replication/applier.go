package replication

import "github.com/sproutmq/sprout/store/wal"

// Applier is a group's state machine (docs/design/shards.md, 2.3): its
// store (*store.Store). Records are its changes, whichever it is: the serving
// leader's state makes them as it executes (through the group's
// Journal), and every member applies those committed. The node goroutine
// alone calls these methods.
type Applier interface {
	// Apply applies committed records that this member did not make as
	// the serving leader: a follower's, and everything a restore reads.
	Apply(records []wal.Record, locs []wal.Loc)
	// Located tells the serving leader's state where its own records,
	// executed when they were made, now lie in the log.
	Located(records []wal.Record, locs []wal.Loc)
	// Reset empties the state before it is filled again from the log: at
	// start, after a snapshot, in a rebuild. An error stops the member.
	Reset() error
	// Close ends it with the node.
	Close()
}

// noState makes no state machine: the node makes a store.
func noState(*Node) Applier { return nil }

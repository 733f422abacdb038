package segment

import (
	"errors"
	"fmt"
)

// Errors. They name no flag or command: whoever reads them to the
// operator (cmd/sprout) says what to do.
var (
	// ErrLocked: another server holds the directory's lock (LockDir).
	ErrLocked = errors.New("segment: directory is locked by another server")
	// ErrNoSpace: the disk has no room for a new segment, or too much
	// waits for an fsync that keeps failing, so a refusable group is
	// refused (Group.Refusable). beanstalkd answers OUT_OF_MEMORY to a
	// put in this state.
	ErrNoSpace = errors.New("segment: no space left for new records")
	// ErrClosed answers an Append after Close.
	ErrClosed = errors.New("segment: closed")
	// ErrCorrupt is a frame whose length or CRC is wrong. A replay
	// callback returns an error that is (errors.Is) ErrCorrupt for a frame
	// whose payload it finds damaged, which Open then treats as it treats
	// a bad CRC.
	ErrCorrupt = errors.New("segment: corrupt frame")
	// ErrNotSegment: a file named as a segment does not begin with a
	// segment's header.
	ErrNotSegment = errors.New("segment: not a Sprout segment")
)

// VersionError: Open found a segment of another user (Options.Version).
type VersionError struct {
	Path    string // the segment's file
	Version uint32 // what its header says
	Want    uint32 // Options.Version
}

func (e *VersionError) Error() string {
	switch e.Version {
	case VersionJournal:
		return fmt.Sprintf("segment: %s is a single node's job journal, not a version %d segment", e.Path, e.Want)
	case VersionRaftLog:
		return fmt.Sprintf("segment: %s is a cluster member's Raft log, not a version %d segment", e.Path, e.Want)
	case VersionMultiRaft:
		return fmt.Sprintf("segment: %s is a cluster member's log of several Raft groups, not a version %d segment", e.Path, e.Want)
	}
	return fmt.Sprintf("segment: %s: unknown version %d", e.Path, e.Version)
}

// DamageError: Open found a damaged frame that is not a torn write at the
// end of the log, and Options.SkipDamaged is not set.
type DamageError struct {
	Path   string // the segment's file
	Offset int64  // where the frame begins
	Err    error  // what is wrong with it (ErrCorrupt, or the replay's)
}

func (e *DamageError) Error() string {
	return fmt.Sprintf("segment: %s: damaged frame at offset %d: %v", e.Path, e.Offset, e.Err)
}

func (e *DamageError) Unwrap() error { return e.Err }

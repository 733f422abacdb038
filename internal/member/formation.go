package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sproutmq/sprout/internal/replication"
)

// formationFile, in -b beside the log's segments (which the log alone
// reads), records the G and R a cluster of several groups was formed
// with, once the member has started with them: its log holds only the
// groups placed on it, which cannot tell how many there are, so a
// restart without --cluster-groups takes them from here.
const formationFile = "cluster-groups.json"

// formation is what formationFile holds.
type formation struct {
	Groups   int `json:"groups"`
	Replicas int `json:"replicas"`
}

// readFormation reads dir's formationFile; none is the zero formation.
func readFormation(dir string) (formation, error) {
	var f formation
	b, err := os.ReadFile(filepath.Join(dir, formationFile))
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	if err == nil && (f.Groups < 1 || f.Replicas < 1) {
		err = fmt.Errorf("groups %d, replicas %d", f.Groups, f.Replicas)
	}
	if err != nil {
		return formation{}, fmt.Errorf("member: %s: %w", filepath.Join(dir, formationFile), err)
	}
	return f, nil
}

// writeFormation writes dir's formationFile durably: a new file renamed
// into place, the directory synced.
func writeFormation(dir string, f formation) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, formationFile)
	tmp, err := os.CreateTemp(dir, formationFile+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("member: writing %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// The formation every member runs is group 0's (docs/design/shards.md
// 1.3): its first serving leader records its own G and R there
// (recordFormation, a replication.GroupsFormed record), and the first
// record applied is the cluster's. A member whose own disagree stops
// with one line (checkFormed): one that joined with another
// --cluster-groups, or one of the formation's members started with
// other flags than the rest. The flags alone cannot tell it at start: a
// joining member's log is empty, and each member of a formation plans
// from its own. Routes would differ by member, and a command for a group
// the cluster does not have would wait for a leader it never gets.

// recordFormationEvery is how often a member looks whether group 0's
// book holds the formation, and records it when it leads group 0.
const recordFormationEvery = time.Second

// formed is the formation this member runs: its recorded G and R, or
// one group, whose replicas are its members.
func (sh *shards) formed() replication.Formed {
	if sh.formation.Groups <= 1 {
		return replication.Formed{Groups: 1}
	}
	return replication.Formed{Groups: uint16(sh.formation.Groups), Replicas: uint16(sh.formation.Replicas)}
}

// recordFormation, until group 0's book holds the formation or the node
// stops, records this member's in it whenever it serves group 0 in a
// finalized cluster (a release before reads no GroupsFormed record).
func (m *Member) recordFormation() {
	t := time.NewTicker(recordFormationEvery)
	defer t.Stop()
	for {
		select {
		case <-m.node.Done():
			return
		case <-t.C:
		}
		if m.node.Tubes().Formed.Groups != 0 {
			return
		}
		if info, _ := m.node.Leader(); !info.Serving || !m.node.Host().Finalized() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), m.node.ElectionTimeout())
		err := m.node.ProposeFormed(ctx, m.shards.formed())
		cancel()
		if err != nil {
			m.log.Debug().Err(err).Msg("cannot record the formation in group 0 yet")
		}
	}
}

// checkFormed stops the member, once, if the formation group 0's book
// records (f; zero: none yet) is not the one it runs. If its log holds
// group 0 alone, nothing of its own formation is on it: its formation
// record becomes the cluster's, so that it starts again with the
// cluster's groups when started without --cluster-groups. Called on
// group 0's goroutine.
func (m *Member) checkFormed(f replication.Formed) {
	if !m.shards.disagrees(f) {
		return
	}
	m.foreignOnce.Do(func() {
		err := m.refuseFormed(f)
		m.log.Error().Err(err).Msg("stopping: this member does not run the cluster's groups")
		m.foreign <- err // watch stops the member, once it has started
	})
}

// disagrees reports whether the formation group 0's book records (f;
// zero: none yet) is not the one this member runs.
func (sh *shards) disagrees(f replication.Formed) bool {
	mine := sh.formed()
	return f.Groups != 0 && f != mine && (f.Groups != mine.Groups || f.Replicas != 0 && mine.Replicas != 0)
}

// refuseFormed is the refusal of a member whose formation is not f, the
// cluster's. If its log holds group 0 alone, nothing of its own
// formation is on it: f becomes its record, so that it starts again
// with the cluster's groups when started without the flags.
func (m *Member) refuseFormed(f replication.Formed) *FormationError {
	mine := m.shards.formed()
	flag, set, own, theirs := "--cluster-groups", m.cfg.Groups, int(mine.Groups), int(f.Groups)
	if f.Groups == mine.Groups {
		flag, set, own, theirs = "--cluster-replicas", m.cfg.Replicas, int(mine.Replicas), int(f.Replicas)
	}
	reason := fmt.Sprintf("%s %d disagrees with this cluster's %d, set when it was formed", flag, own, theirs)
	if set == 0 {
		reason = fmt.Sprintf("%s unset runs %d, and this cluster's is %d, set when it was formed", flag, own, theirs)
	}
	cluster := fmt.Sprintf("--cluster-groups %d", f.Groups)
	if f.Groups > 1 {
		cluster += fmt.Sprintf(" --cluster-replicas %d", f.Replicas)
	}
	switch held := m.clusterLog.Shared().Groups(); {
	case len(held) > 1:
		reason += ": start it on an empty -b with " + cluster
	case m.adoptFormed(f) != nil:
		reason += ": start it with " + cluster + " on an empty -b"
	default:
		reason += ": its -b records the cluster's now; start it again without either flag, or with " + cluster
	}
	return &FormationError{reason}
}

// formedWait bounds how long a member's start waits for its log's replay
// to show the formation group 0 records (refuseFormedAtStart).
const formedWait = 5 * time.Second

// refuseFormedAtStart refuses, at start, a member whose log's group 0 records a
// formation other than the one it plans (a member restarted with other
// flags than the cluster's): it waits until the replay of what its log
// had committed shows one, or is done, for up to formedWait (a log whose
// replay takes longer is checked by checkFormed once it runs, as a
// joining member's is).
func (m *Member) refuseFormedAtStart() error {
	deadline := time.Now().Add(formedWait)
	for m.node.Tubes().Formed.Groups == 0 && !m.node.Replayed() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if f := m.node.Tubes().Formed; m.shards.disagrees(f) {
		return m.refuseFormed(f)
	}
	return nil
}

// adoptFormed makes f this member's formation record: none for one
// group.
func (m *Member) adoptFormed(f replication.Formed) error {
	if f.Groups <= 1 {
		err := os.Remove(filepath.Join(m.cfg.WALDir, formationFile))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return writeFormation(m.cfg.WALDir, formation{Groups: int(f.Groups), Replicas: int(f.Replicas)})
}

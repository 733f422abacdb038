package replication

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"

	"github.com/sproutmq/sprout/store"
)

// A member's digest is a summary of its own store that two members agree
// on when their stores hold the same jobs as the log describes them: the
// fault tests (internal/clusterfault) wait for every member's to be equal
// before they call the cluster converged.
//
// What goes in is what the log carries and applying it reproduces: each
// job's id, tube, priority, delay, TTR, body, and whether it is buried.
// Reserved and delayed count as ready: reservations live on the leader
// only (doc.go, "Time"), and a delay's end moves a job to ready by each
// member's own timer, with no record. The counters (reserves, releases,
// ...) and times (age, deadlines) stay out: a follower's counters are
// those of the last record, and its clock is its own.
//
// The digest reads the store through the admin listing (store's
// ListJobs), a page at a time, so it costs work in proportion to the
// jobs and holds no tube lock for long; a store that changes meanwhile
// may be summed half before and half after, so it is exact only for a
// store at rest, and callers compare digests until they agree.

// digestPage is how many jobs one listing call returns.
const digestPage = store.MaxListPage

// digestEntry is one job as the digest sums it.
type digestEntry struct {
	id         uint64
	tube       string
	buried     bool
	pri        uint32
	delay, ttr int64
	body       [sha256.Size]byte
}

// Digest sums the member's own store (its replica on a follower): the
// number of jobs, and a hash of them in hex. See the comment above for
// what is summed and when two members' digests must agree.
func (n *Node) Digest() (jobs int, sum string) {
	return StoreDigest(n.Store())
}

// StoreDigest is Node.Digest of the store st.
func StoreDigest(st *store.Store) (jobs int, sum string) {
	c := st.NewClient(nil)
	defer c.Close()
	var all []digestEntry
	for _, tube := range st.TubeNames() {
		for _, state := range []store.State{store.StateReady, store.StateReserved, store.StateDelayed, store.StateBuried} {
			var after *store.ListCursor
			for {
				page, next, ok := c.ListJobs([]byte(tube), state, after, digestPage)
				if !ok {
					break
				}
				for _, j := range page {
					all = append(all, digestEntry{
						id: j.ID, tube: j.Tube, buried: j.State == store.StateBuried, pri: j.Pri,
						delay: int64(j.Delay), ttr: int64(j.TTR), body: sha256.Sum256(j.Body),
					})
				}
				if next == nil {
					break
				}
				after = next
			}
		}
	}
	slices.SortFunc(all, func(a, b digestEntry) int { return cmp.Compare(a.id, b.id) })
	h := sha256.New()
	var buf []byte
	for _, e := range all {
		buf = binary.LittleEndian.AppendUint64(buf[:0], e.id)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(e.tube)))
		buf = append(buf, e.tube...)
		buf = append(buf, boolByte(e.buried))
		buf = binary.LittleEndian.AppendUint32(buf, e.pri)
		buf = binary.LittleEndian.AppendUint64(buf, uint64(e.delay))
		buf = binary.LittleEndian.AppendUint64(buf, uint64(e.ttr))
		buf = append(buf, e.body[:]...)
		h.Write(buf)
	}
	return len(all), hex.EncodeToString(h.Sum(nil)[:16])
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

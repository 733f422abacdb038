package replication

import (
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"go.etcd.io/raft/v3"
)

// Member is one member of the cluster as the operator names it: its name
// (--node) and the address the other members dial (its entry in
// --cluster-peers), with the Raft id derived from the name.
type Member struct {
	Name string `json:"name"`
	Addr string `json:"address"`
	ID   uint64 `json:"id"`
}

// Book is the address book (doc.go, "Membership changes"): every member's
// name, address and Raft id, the ids removed, and the index of the last
// membership change it reflects. Raft's ConfState says which ids vote;
// the book says who they are and where.
type Book struct {
	Index   uint64   `json:"index"`
	Members []Member `json:"members"`
	Removed []uint64 `json:"removed,omitempty"`
	// Version is the cluster version (finalize.go): 0 before the first
	// control record raised it, which is version 2.
	Version uint16 `json:"version,omitempty"`
	// Draining are the members being removed, by Raft id, whose groups'
	// replicas move away first (Node.SetDraining; a cluster of several
	// groups).
	Draining []uint64 `json:"draining,omitempty"`
	// Cordoned are the members that lead no group, by Raft id: each hands
	// over what it leads and is given none (Node.SetCordoned; a cluster
	// of several groups' balancer).
	Cordoned []uint64 `json:"cordoned,omitempty"`
	// Tubes are what moves of tubes decided (tubes.go): in group 0, the
	// tubes moves placed and the moves decided; in any group, its tubes
	// moving or moved out.
	Tubes TubeBook `json:"tubes,omitzero"`
	// Joined is, by Raft id, the index of the membership change that last
	// added each replica the group did not have: a replica of a group but
	// 0 removed and added again has its member's id again, and an answer
	// of its older replica must not count for the new one (Core.olderAck).
	// None for the formation's replicas.
	Joined map[uint64]uint64 `json:"joined,omitempty"`
}

// clone returns a copy that shares nothing with b.
func (b Book) clone() Book {
	return Book{Index: b.Index, Members: slices.Clone(b.Members), Removed: slices.Clone(b.Removed), Version: b.Version,
		Draining: slices.Clone(b.Draining), Cordoned: slices.Clone(b.Cordoned), Tubes: b.Tubes.clone(), Joined: maps.Clone(b.Joined)}
}

// marked is the list of members the control record state marks
// (controlDrain: Draining, controlCordon: Cordoned); nil for another.
func (b *Book) marked(state uint8) *[]uint64 {
	switch state {
	case controlDrain:
		return &b.Draining
	case controlCordon:
		return &b.Cordoned
	}
	return nil
}

// mark puts id in marked (on) or takes it out, and reports whether that
// changed it: a member draining (Book.Draining) or cordoned
// (Book.Cordoned), or no longer.
func mark(marked *[]uint64, id uint64, on bool) bool {
	if slices.Contains(*marked, id) == on {
		return false
	}
	if on {
		*marked = append(*marked, id)
	} else {
		*marked = slices.DeleteFunc(*marked, func(d uint64) bool { return d == id })
	}
	return true
}

// byName returns the member named name.
func (b Book) byName(name string) (Member, bool) {
	for _, m := range b.Members {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}

// byID returns the member whose Raft id is id.
func (b Book) byID(id uint64) (Member, bool) {
	for _, m := range b.Members {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// MayLead reports whether the member whose Raft id is id may be given a
// group's leadership: it is neither cordoned nor draining (meta.Member's
// MayLead, over the book's lists).
func (b Book) MayLead(id uint64) bool {
	return !slices.Contains(b.Cordoned, id) && !slices.Contains(b.Draining, id)
}

// removed reports whether id was a member and was removed.
func (b Book) removed(id uint64) bool { return slices.Contains(b.Removed, id) }

// add puts m in the book, replacing the entry of its id, or of its name
// (a member removed and added again under its name has a new id). A
// replica of a group but 0 added again has its member's id again
// (Node.AddReplica), which is then no longer removed.
func (b *Book) add(m Member) {
	b.Members = slices.DeleteFunc(b.Members, func(o Member) bool { return o.ID == m.ID || o.Name == m.Name })
	b.Members = append(b.Members, m)
	b.Removed = slices.DeleteFunc(b.Removed, func(id uint64) bool { return id == m.ID })
}

// remove takes id out of the book and remembers it removed.
func (b *Book) remove(id uint64) {
	b.Members = slices.DeleteFunc(b.Members, func(o Member) bool { return o.ID == id })
	mark(&b.Draining, id, false)
	mark(&b.Cordoned, id, false)
	delete(b.Joined, id)
	if !b.removed(id) {
		b.Removed = append(b.Removed, id)
	}
}

// join notes that the replica of Raft id id joined the group at index.
func (b *Book) join(id, index uint64) {
	if b.Joined == nil {
		b.Joined = make(map[uint64]uint64)
	}
	b.Joined[id] = max(b.Joined[id], index)
}

// merge takes into b what o knows: its members (o's entry wins) and its
// removed ids; b's index stays.
func (b *Book) merge(o Book) {
	if o.Version > b.Version {
		b.Version = o.Version
	}
	b.Draining = slices.Clone(o.Draining)
	b.Cordoned = slices.Clone(o.Cordoned)
	b.Tubes = o.Tubes.clone()
	for id, at := range o.Joined {
		b.join(id, at)
	}
	for _, id := range o.Removed {
		b.remove(id)
	}
	for _, m := range o.Members {
		b.add(m) // a replica added again after its removal is o's member
	}
}

// maxNameLen bounds a member's name: names travel in every hello and
// label metrics, and a pod's name is at most 63 characters.
const maxNameLen = 128

// ParsePeers parses --cluster-peers: NAME=HOST:PORT entries separated by
// commas, in the operator's order. Each entry must be well formed; a
// duplicate is Validate's to refuse, so that the message can say which.
func ParsePeers(s string) ([]Member, error) {
	if strings.TrimSpace(s) == "" {
		return nil, configErrorf(SettingPeers, "empty: want NAME=HOST:PORT,...")
	}
	var members []Member
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		name, addr, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, configErrorf(SettingPeers, "%q is not NAME=HOST:PORT", entry)
		}
		if err := checkName(name); err != nil {
			return nil, configErrorf(SettingPeers, "%q: %v", entry, err)
		}
		if err := checkAddr(addr, false); err != nil {
			return nil, configErrorf(SettingPeers, "%q: %v", entry, err)
		}
		members = append(members, Member{Name: name, Addr: addr, ID: MemberID(name)})
	}
	return members, nil
}

// checkName refuses a name that could not travel in a hello, a log line
// or a metric label unchanged.
func checkName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("a member's name has 1 to %d characters", maxNameLen)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("a member's name holds only letters, digits, '-', '_' and '.', not %q", r)
		}
	}
	return nil
}

// checkAddr refuses what is not HOST:PORT with a numeric port; anyHost
// allows an empty host (listening on every interface).
func checkAddr(addr string, anyHost bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT", addr)
	}
	if host == "" && !anyHost {
		return fmt.Errorf("%q has no host", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("%q: the port is a number from 1 to 65535", addr)
	}
	return nil
}

// MemberID is the Raft id of the initial member named name: FNV-1a of the
// name, so every member derives every other's id from --cluster-peers
// alone. (A member that joins later, or comes back on an empty directory,
// gets a new id through a membership change.)
func MemberID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	id := h.Sum64()
	if id == 0 || raft.IsLocalMsgTarget(id) {
		id ^= 1 << 32 // never so for a real name; raft would panic on these
	}
	return id
}

// ClusterID is the id of the cluster whose initial members are named
// names: FNV-1a of the sorted names. Names, not addresses: members that
// spell one address differently (an IP, a DNS name) still agree.
func ClusterID(names []string) uint64 {
	sorted := slices.Sorted(slices.Values(names))
	h := fnv.New64a()
	h.Write([]byte("sprout cluster"))
	for _, n := range sorted {
		h.Write([]byte{0})
		h.Write([]byte(n))
	}
	return max(h.Sum64(), 1)
}

// validateMembers refuses a member list the cluster cannot run with:
// duplicate names, addresses or ids, or one that leaves out self (but
// for a joining member's, which names only the members it reaches first).
func validateMembers(self string, members []Member, joining bool) error {
	names := make(map[string]bool, len(members))
	addrs := make(map[string]string, len(members))
	ids := make(map[uint64]string, len(members))
	for _, m := range members {
		if names[m.Name] {
			return configErrorf(SettingPeers, "names %s twice", m.Name)
		}
		names[m.Name] = true
		key := strings.ToLower(m.Addr)
		if other, ok := addrs[key]; ok {
			return configErrorf(SettingPeers, "gives %s and %s the same address %s", other, m.Name, m.Addr)
		}
		addrs[key] = m.Name
		if m.ID == 0 || raft.IsLocalMsgTarget(m.ID) {
			return configErrorf(SettingPeers, "member %s has no usable Raft id", m.Name)
		}
		if other, ok := ids[m.ID]; ok {
			return configErrorf(SettingPeers, "members %s and %s have the same Raft id %x: rename one", other, m.Name, m.ID)
		}
		ids[m.ID] = m.Name
	}
	if !names[self] && !joining {
		return configErrorf(SettingPeers, "does not include this member, %s", self)
	}
	return nil
}

// isLoopback reports whether addr's host is a loopback address or
// "localhost": traffic to it never leaves the machine.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// FormatID is a Raft id as the status and the join string show it: hex.
func FormatID(id uint64) string { return strconv.FormatUint(id, 16) }

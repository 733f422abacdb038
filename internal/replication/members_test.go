package replication

import (
	"errors"
	"strings"
	"testing"
)

// TestParsePeers: well-formed entries parse in order with their ids;
// each malformed one is refused in one line that quotes it.
func TestParsePeers(t *testing.T) {
	got, err := ParsePeers("a=127.0.0.1:7001, b=node-b.sprout.svc:7002,c_3=[::1]:7003")
	if err != nil {
		t.Fatal(err)
	}
	want := []Member{
		{"a", "127.0.0.1:7001", MemberID("a")},
		{"b", "node-b.sprout.svc:7002", MemberID("b")},
		{"c_3", "[::1]:7003", MemberID("c_3")},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: got %+v, want %+v", i, got[i], want[i])
		}
	}

	for _, tc := range []struct{ in, want string }{
		{"", "empty"},
		{"a", `"a" is not NAME=HOST:PORT`},
		{"a=127.0.0.1:1,b", `"b" is not NAME=HOST:PORT`},
		{"=127.0.0.1:1", "1 to 128 characters"},
		{"a b=127.0.0.1:1", `not ' '`},
		{"a=127.0.0.1", "is not HOST:PORT"},
		{"a=:7000", "has no host"},
		{"a=h:0", "the port is a number from 1 to 65535"},
		{"a=h:http", "the port is a number"},
		{"a=h:70000", "the port is a number"},
	} {
		_, err := ParsePeers(tc.in)
		checkConfigError(t, err, SettingPeers, tc.want)
	}
}

// TestValidate: each configuration a member cannot start with is refused
// in one line that names the setting at fault.
func TestValidate(t *testing.T) {
	peers := func(s string) []Member {
		m, err := ParsePeers(s)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	good := func() NodeConfig {
		return NodeConfig{Node: "a", Listen: ":7001", Peers: peers("a=h1:7001,b=h2:7001,c=h3:7001")}
	}
	if cfg := good(); cfg.Validate() != nil {
		t.Fatal(cfg.Validate())
	}
	for _, tc := range []struct {
		name    string
		change  func(*NodeConfig)
		setting Setting
		want    string
	}{
		{"no node", func(c *NodeConfig) { c.Node = "" }, SettingNode, "1 to 128 characters"},
		{"node not a peer", func(c *NodeConfig) { c.Node = "d" }, SettingPeers, "does not include this member, d"},
		{"bad listen", func(c *NodeConfig) { c.Listen = "7001" }, SettingListen, "is not HOST:PORT"},
		{"no peers", func(c *NodeConfig) { c.Peers = nil }, SettingPeers, "empty"},
		{"duplicate name", func(c *NodeConfig) { c.Peers = peers("a=h1:1,b=h2:1,a=h3:1") }, SettingPeers, "names a twice"},
		{"duplicate address", func(c *NodeConfig) { c.Peers = peers("a=h1:1,b=H1:1") }, SettingPeers, "the same address"},
		{"colliding ids", func(c *NodeConfig) { c.Peers[1].ID = c.Peers[0].ID }, SettingPeers, "the same Raft id"},
		{"cert alone", func(c *NodeConfig) { c.TLSCert = "c.pem" }, SettingTLSKey, "missing"},
		{"no ca", func(c *NodeConfig) { c.TLSCert, c.TLSKey = "c.pem", "k.pem" }, SettingTLSCA, "missing"},
		{"no cert", func(c *NodeConfig) { c.TLSKey, c.TLSCA = "k.pem", "ca.pem" }, SettingTLSCert, "missing"},
		{"negative tick", func(c *NodeConfig) { c.Tick = -1 }, SettingTiming, "cannot be negative"},
		{"joining, no cluster", func(c *NodeConfig) { c.Node, c.JoinID = "d", 7 }, SettingJoin, "needs the cluster's id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good()
			tc.change(&cfg)
			err := cfg.Validate()
			checkConfigError(t, err, tc.setting, tc.want)
			if _, serr := StartNode(cfg); serr == nil || serr.Error() != err.Error() {
				t.Errorf("StartNode: %v, want Validate's %v", serr, err)
			}
		})
	}
}

// checkConfigError fails unless err is a one-line *ConfigError of
// setting, saying want, and naming no flag: the binary names those.
func checkConfigError(t *testing.T, err error, setting Setting, want string) {
	t.Helper()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Setting != setting || !strings.Contains(ce.Err.Error(), want) ||
		strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "--") {
		t.Errorf("got %v, want a one-line ConfigError of %s with %q, naming no flag", err, setting, want)
	}
}

// TestStartNodeNeedsLog: a member without its log is refused, not given
// one in memory that would report writes durable with nothing on disk.
func TestStartNodeNeedsLog(t *testing.T) {
	peers, err := ParsePeers("a=127.0.0.1:7001,b=127.0.0.1:7002,c=127.0.0.1:7003")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := StartNode(NodeConfig{Node: "a", Listen: "127.0.0.1:7001", Peers: peers}); !errors.Is(err, ErrNoLog) {
		t.Errorf("StartNode without a Log: %v, want ErrNoLog", err)
	}
}

// TestValidateJoining: a joining member need not be in --cluster-peers,
// and then reaches the others at its --cluster-listen; an initial member
// must be there.
func TestValidateJoining(t *testing.T) {
	peers, err := ParsePeers("a=h1:7001,b=h2:7001")
	if err != nil {
		t.Fatal(err)
	}
	cfg := NodeConfig{Node: "d", Listen: "0.0.0.0:7001", Peers: peers, ClusterID: 3, JoinID: 7}
	if err := cfg.Validate(); err != nil {
		t.Errorf("a joining member not in its peers: %v", err)
	}
	if got := cfg.SelfAddr(); got != "0.0.0.0:7001" {
		t.Errorf("its address: %q, want its --cluster-listen", got)
	}
	cfg.Peers = append(cfg.Peers, Member{Name: "d", Addr: "h4:7001", ID: MemberID("d")})
	if got := cfg.SelfAddr(); got != "h4:7001" {
		t.Errorf("its address, named in its peers: %q, want its entry's", got)
	}
	cfg.Peers, cfg.ClusterID, cfg.JoinID = peers, 0, 0
	checkConfigError(t, cfg.Validate(), SettingPeers, "does not include this member, d")
}

// TestSelectJoin: the plain CLUSTER:ID is every member's; a list gives
// each member its entry, or none; a malformed list is refused whoever
// reads it, in one line naming the setting.
func TestSelectJoin(t *testing.T) {
	for _, tc := range []struct {
		in, node    string
		cluster, id uint64
		found       bool
	}{
		{"c0ffee:12ab", "any", 0xc0ffee, 0x12ab, true},
		{"sprout-3=c0ffee:12ab", "sprout-3", 0xc0ffee, 0x12ab, true},
		{"sprout-3=c0ffee:12ab, sprout-4=c0ffee:9", "sprout-4", 0xc0ffee, 9, true},
		{"sprout-3=c0ffee:12ab,sprout-4=c0ffee:9", "sprout-0", 0, 0, false},
		// A replaced member's new entry, appended: the later counts.
		{"sprout-3=c0ffee:12ab,sprout-4=c0ffee:9,sprout-3=c0ffee:77", "sprout-3", 0xc0ffee, 0x77, true},
		{"sprout-3=c0ffee:12ab,sprout-3=c0ffee:77", "sprout-0", 0, 0, false},
	} {
		cluster, id, found, err := SelectJoin(tc.in, tc.node)
		if err != nil || cluster != tc.cluster || id != tc.id || found != tc.found {
			t.Errorf("SelectJoin(%q, %s) = %x, %x, %v, %v; want %x, %x, %v", tc.in, tc.node,
				cluster, id, found, err, tc.cluster, tc.id, tc.found)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"c0ffee", "is not CLUSTER:ID"},
		{"a=c0ffee:1,b", `"b" is not NAME=CLUSTER:ID`},
		{"a=c0ffee:1,", `"" is not NAME=CLUSTER:ID`},
		{"a b=c0ffee:1", "not ' '"},
		{"a=c0ffee", `"a=c0ffee" is not NAME=CLUSTER:ID in hex`},
		{"a=c0ffee:0", "is not NAME=CLUSTER:ID in hex"},
		{"a=c0ffee:1,b=beef:2", "of cluster beef"},
	} {
		for _, node := range []string{"a", "z"} {
			_, _, _, err := SelectJoin(tc.in, node)
			checkConfigError(t, err, SettingJoin, tc.want)
		}
	}
}

// TestWithHost: a wildcard host in a hello's address is the book's.
func TestWithHost(t *testing.T) {
	for _, tc := range []struct{ addr, via, want string }{
		{":11300", "sprout-3.sprout-headless:11390", "sprout-3.sprout-headless:11300"},
		{"0.0.0.0:11300", "sprout-3.sprout-headless:11390", "sprout-3.sprout-headless:11300"},
		{"[::]:11380", "10.0.0.4:11390", "10.0.0.4:11380"},
		{"10.0.0.5:11300", "10.0.0.4:11390", "10.0.0.5:11300"},
		{"host:11300", "10.0.0.4:11390", "host:11300"},
		{"", "10.0.0.4:11390", ""},
		{":11300", "", ":11300"},
	} {
		if got := WithHost(tc.addr, tc.via); got != tc.want {
			t.Errorf("WithHost(%q, %q) = %q, want %q", tc.addr, tc.via, got, tc.want)
		}
	}
}

// TestClusterID: the order of the names does not matter, the names do.
func TestClusterID(t *testing.T) {
	a := ClusterID([]string{"a", "b", "c"})
	if b := ClusterID([]string{"c", "a", "b"}); a != b {
		t.Errorf("order changed the id: %x, %x", a, b)
	}
	if b := ClusterID([]string{"a", "b", "d"}); a == b {
		t.Errorf("other names, same id %x", a)
	}
	if b := ClusterID([]string{"ab", "c"}); b == ClusterID([]string{"a", "bc"}) {
		t.Errorf("names run together: %x", b)
	}
}

// TestLoopback: what counts as staying on this machine.
func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:1": true, "127.0.0.3:1": true, "[::1]:1": true, "localhost:1": true,
		":1": false, "0.0.0.0:1": false, "10.0.0.1:1": false, "node-a:1": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v", addr, got)
		}
	}
}

// TestBookMarks: a member's marks go with its removal, a clone shares
// none of them, and a merge takes the other book's.
func TestBookMarks(t *testing.T) {
	var b Book
	b.add(Member{Name: "a", ID: 1})
	b.add(Member{Name: "b", ID: 2})
	if !mark(&b.Draining, 1, true) || !mark(&b.Cordoned, 1, true) || !mark(&b.Cordoned, 2, true) || mark(&b.Cordoned, 2, true) {
		t.Fatal("mark reported no change where it made one, or one where it made none")
	}
	c := b.clone()
	c.Cordoned[0] = 9
	if b.Cordoned[0] != 1 {
		t.Fatalf("a clone's marks are the book's: %v", b.Cordoned)
	}
	b.remove(1)
	if len(b.Draining) != 0 || len(b.Cordoned) != 1 || b.Cordoned[0] != 2 {
		t.Fatalf("after removing member 1: draining %v, cordoned %v; want none and [2]", b.Draining, b.Cordoned)
	}
	var m Book
	m.merge(b)
	if len(m.Cordoned) != 1 || m.Cordoned[0] != 2 {
		t.Fatalf("a merge took cordoned %v, want [2]", m.Cordoned)
	}
}

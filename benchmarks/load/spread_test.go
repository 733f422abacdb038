package load

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestSpreadOverMembers runs put-only traffic through a Cluster's server
// for ThroughAll whose members are three standalone Sprout processes, so
// that where each job went can be read from the member that stored it:
// every member given a connection stores some of the jobs, the others
// none, the jobs add up to the puts acknowledged, and the run marks as
// having clients exactly the members that stored jobs.
func TestSpreadOverMembers(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the generator reads the members' CPU and memory from /proc")
	}
	spec := ServerSpec{Name: "sprout", Path: testproc.SproutBinary(t)}
	rc := RunConfig{Warmup: 50 * time.Millisecond, Duration: 250 * time.Millisecond}
	for _, tt := range []struct {
		conns       int
		wantClients []bool
	}{
		{conns: 5, wantClients: []bool{true, true, true}},  // 2, 2, 1
		{conns: 2, wantClients: []bool{true, true, false}}, // fewer connections than members
	} {
		t.Run(fmt.Sprintf("c%d", tt.conns), func(t *testing.T) {
			var members []*member
			for i := range len(tt.wantClients) {
				srv, err := StartServer(spec)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(srv.Stop)
				members = append(members, &member{name: fmt.Sprintf("m%d", i+1), proc: srv.proc})
			}
			c := &Cluster{spec: spec, members: members}
			s := Scenario{Name: "spread", Kind: KindPutOnly, Conns: tt.conns, Body: 64, Members: len(members), Through: ThroughAll}
			r, err := s.Run(context.Background(), c.server(nil, members), rc, nil)
			if err != nil || r.Errors > 0 {
				t.Fatalf("run: %v; %d errors, the first: %s", err, r.Errors, r.FirstError)
			}
			if r.Sent != r.Acked || r.Acked == 0 {
				t.Fatalf("%d puts sent, %d acknowledged", r.Sent, r.Acked)
			}
			var stored int64
			var clients []bool
			for i, m := range members {
				conn, err := testproc.Dial(m.proc.Addr(), 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				ready, err := statInt(conn, "stats", "current-jobs-ready")
				conn.Close()
				if err != nil {
					t.Fatal(err)
				}
				if (ready > 0) != tt.wantClients[i] {
					t.Errorf("member %s stored %d jobs; want some: %v", m.name, ready, tt.wantClients[i])
				}
				stored += ready
				if r.Members[i].Name != m.name {
					t.Errorf("member %d reported as %q, want %q", i, r.Members[i].Name, m.name)
				}
				clients = append(clients, r.Members[i].Clients)
			}
			if stored != r.Acked {
				t.Errorf("the members stored %d jobs, %d puts were acknowledged", stored, r.Acked)
			}
			if !slices.Equal(clients, tt.wantClients) {
				t.Errorf("the run says clients on %v, want %v", clients, tt.wantClients)
			}
		})
	}
}

// TestShardFlags: a scenario passes --cluster-groups and
// --cluster-replicas only when it sets them, and no scenario of the
// catalogue sets them but the scenarios named cluster-gG- (clusterM-gG-
// on M members).
func TestShardFlags(t *testing.T) {
	for _, tt := range []struct {
		groups, replicas int
		want             []string
	}{
		{0, 0, nil},
		{5, 0, []string{"--cluster-groups", "5"}},
		{0, 3, []string{"--cluster-replicas", "3"}},
		{5, 3, []string{"--cluster-groups", "5", "--cluster-replicas", "3"}},
	} {
		s := Scenario{Members: 3, Groups: tt.groups, Replicas: tt.replicas}
		if got := s.shardFlags(); !slices.Equal(got, tt.want) {
			t.Errorf("Groups %d, Replicas %d: flags %q, want %q", tt.groups, tt.replicas, got, tt.want)
		}
	}
	// Only the scenarios named for their groups set them, so that every
	// other cluster figure stays today's cluster's.
	for _, s := range Catalogue(Sizes{}) {
		named := strings.HasPrefix(s.Name, fmt.Sprintf("cluster-g%d-", s.Groups)) ||
			strings.HasPrefix(s.Name, fmt.Sprintf("cluster%d-g%d-", s.Members, s.Groups))
		if (s.Groups != 0 || s.Replicas != 0) && !named {
			t.Errorf("%s sets Groups %d and Replicas %d", s.Name, s.Groups, s.Replicas)
		}
	}
}

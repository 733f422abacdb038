package conformance

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
)

// TestRandomThroughFollower is TestRandom against a member of a
// three-member cluster that does not lead: once the cluster is finalized,
// that member serves the sessions and sends their commands to the leader
// (internal/router), and every reply must still be beanstalkd's, but for
// the figures of the member's log (normalizeReply, inCluster). Some steps
// are bursts of commands in one write, which the member pipelines.
func TestRandomThroughFollower(t *testing.T) {
	seed, steps, header := clusterRandom(t)
	s := newSessionWith(t, header, func() (string, *tls.Config) { return startFollower(t), nil })
	s.inCluster, s.bursts = true, true
	runRandom(t, s, seed, steps)
}

// clusterRandom starts a random run through a cluster, t being its test:
// it skips the stand-in (no cluster mode), and gives the seed (-seed, a
// new one for 0), the steps (clusterSteps) and the header of a failure's
// report, which says how to run it again.
func clusterRandom(t *testing.T) (seed uint64, steps int, header string) {
	t.Helper()
	if SelfTest() {
		t.Skip(SelfTestEnv + " is set: the stand-in has no cluster mode")
	}
	seed = *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	steps = clusterSteps()
	header = fmt.Sprintf("%s seed %d; rerun with: go test ./internal/conformance -run '%s$' -seed=%d -steps=%d",
		t.Name(), seed, t.Name(), seed, steps)
	return seed, steps, header
}

// clusterSteps is how many steps a random run through a cluster takes:
// -steps when it is given, else 1500, half TestRandom's default, since a
// step through a member takes longer.
func clusterSteps() int {
	steps := min(*stepsFlag, 1500)
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "steps" {
			steps = *stepsFlag
		}
	})
	return steps
}

// startFollower starts three Sprout members on loopback, waits until they
// are finalized and agree on a leader, and returns the client address of
// one that does not lead.
func startFollower(t *testing.T) string {
	t.Helper()
	addr, _ := startCluster(t, 1)
	return addr
}

// startCluster starts three Sprout members on loopback, formed with groups
// shard groups (--cluster-groups; 1 is a cluster without the flag), and
// returns the client address of one that does not lead group 0, and the
// placement the members computed at formation. With one group it waits
// until they are finalized and agree on a leader; with several, until
// every member sees every group led by the same member and each member
// leads one group (the balance the members reach soon after formation),
// so that no leadership moves during the test: a reservation dies with
// its group's leader.
//
// The member returned has served no client connection yet (its
// sprout_connections_total, on its --http, is 0), so that its
// total-connections counts what the reference's does. A member is seen
// started by its --http, not by a connection to its client port: until
// the cluster is finalized, a member that does not lead proxies its
// clients to the one that does, and whichever member counted such a
// check could be left the only candidate (under load, every one was).
func startCluster(t *testing.T, groups int) (string, *meta.State) {
	t.Helper()
	type member struct{ name, peer, http, client string }
	var ms []member
	var peers []string
	var metaMembers []meta.Member
	for i := 1; i <= 3; i++ {
		m := member{name: fmt.Sprintf("m%d", i)}
		for _, a := range []*string{&m.peer, &m.http} {
			port, err := testproc.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			*a = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
		peers = append(peers, m.name+"="+m.peer)
		ms = append(ms, m)
		metaMembers = append(metaMembers, meta.Member{Name: m.name, ID: replication.MemberID(m.name)})
	}
	placement, err := meta.Formation(metaMembers, groups, len(ms))
	if err != nil {
		t.Fatal(err)
	}
	for i := range ms {
		m := &ms[i]
		args := []string{"--loops", "2", "-b", t.TempDir(), "--node", m.name, "--cluster-listen", m.peer,
			"--cluster-peers", strings.Join(peers, ","), "--http", m.http}
		if groups > 1 {
			args = append(args, "--cluster-groups", strconv.Itoa(groups))
		}
		p := testproc.StartConfig(t, testproc.Config{
			Binary:       testproc.SproutBinary(t),
			Args:         args,
			StartTimeout: startTimeout,
			Ready: func(string, time.Duration) error {
				r, err := (&http.Client{Timeout: time.Second}).Get("http://" + m.http + "/cluster")
				if err == nil {
					r.Body.Close()
				}
				return err
			},
		})
		m.client = p.Addr() // a failed test shows its output (testproc.StartConfig)
	}
	type status struct {
		Leader  string `json:"leader"`
		Version int    `json:"cluster_version"`
		Groups  []struct {
			ID     int    `json:"id"`
			Leader string `json:"leader"`
		} `json:"groups"`
	}
	client := &http.Client{Timeout: 2 * time.Second}
	var chosen string
	testproc.WaitForWhy(t, 45*time.Second, fmt.Sprintf("the members finalized, agreeing on the leaders of %d groups", groups), func() (bool, string) {
		leaders := map[int]string{} // by group, as every member sees it
		agreed := true
		for _, m := range ms {
			r, err := client.Get("http://" + m.http + "/cluster")
			if err != nil {
				return false, err.Error()
			}
			var st status
			err = json.NewDecoder(r.Body).Decode(&st)
			r.Body.Close()
			if err != nil || st.Version != 3 || st.Leader == "" {
				return false, fmt.Sprintf("%s: version %d, leader %q, %v", m.name, st.Version, st.Leader, err)
			}
			seen := map[int]string{0: st.Leader}
			if groups > 1 {
				if len(st.Groups) != groups {
					return false, fmt.Sprintf("%s lists %d groups", m.name, len(st.Groups))
				}
				for _, g := range st.Groups {
					seen[g.ID] = g.Leader
				}
			}
			for g, l := range seen {
				if l == "" || leaders[g] != "" && leaders[g] != l {
					agreed = false
				}
				leaders[g] = l
			}
		}
		if !agreed || len(leaders) != groups {
			return false, fmt.Sprintf("leaders not agreed: %v", leaders)
		}
		led := map[string]int{}
		for _, l := range leaders {
			led[l]++
		}
		chosen = ""
		for _, m := range ms {
			if groups > 1 && led[m.name] != 1 {
				return false, fmt.Sprintf("not balanced yet: leaders %v", leaders)
			}
		}
		served := map[string]int{}
		for _, m := range ms {
			if m.name == leaders[0] {
				continue
			}
			if served[m.name] = connectionsServed(client, m.http); served[m.name] == 0 {
				chosen = m.client
				return true, ""
			}
		}
		return false, fmt.Sprintf("no member but group 0's leader (%s) has served no connection: %v (-1: /metrics did not answer)", leaders[0], served)
	})
	// As StartBinary's readiness probe does on the reference, so that
	// both count one connection and its commands before the test's.
	if err := testproc.Probe(chosen, startTimeout); err != nil {
		t.Fatal(err)
	}
	return chosen, placement
}

// connectionsServed is the sprout_connections_total a member's --http at
// addr reports, or -1 if it reports none.
func connectionsServed(client *http.Client, addr string) int {
	r, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer r.Body.Close()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "sprout_connections_total "); ok {
			if n, err := strconv.ParseFloat(v, 64); err == nil {
				return int(n)
			}
		}
	}
	return -1
}

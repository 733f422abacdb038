package conformance

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestRandomThroughFollower is TestRandom against a member of a
// three-member cluster that does not lead: once the cluster is finalized,
// that member serves the sessions and sends their commands to the leader
// (internal/router), and every reply must still be beanstalkd's, but for
// the figures of the member's log (normalizeReply, inCluster). Some steps
// are bursts of commands in one write, which the member pipelines.
func TestRandomThroughFollower(t *testing.T) {
	if SelfTest() {
		t.Skip(SelfTestEnv + " is set: the stand-in has no cluster mode")
	}
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	steps := min(*stepsFlag, 1500)
	header := fmt.Sprintf("TestRandomThroughFollower seed %d; rerun with: go test ./internal/conformance -run 'TestRandomThroughFollower$' -seed=%d -steps=%d",
		seed, seed, steps)
	s := newSession(t, header, false)
	s.sutAddr, s.inCluster, s.bursts = startFollower(t), true, true
	runRandom(t, s, seed, steps)
}

// startFollower starts three Sprout members on loopback, waits until they
// are finalized and agree on a leader, and returns the client address of
// one that does not lead.
func startFollower(t *testing.T) string {
	t.Helper()
	type member struct{ name, peer, http, client string }
	var ms []member
	var peers []string
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
	}
	for i := range ms {
		m := &ms[i]
		p := testproc.StartConfig(t, testproc.Config{
			Binary: testproc.SproutBinary(t),
			Args: []string{"--loops", "2", "-b", t.TempDir(), "--node", m.name, "--cluster-listen", m.peer,
				"--cluster-peers", strings.Join(peers, ","), "--http", m.http},
			StartTimeout: startTimeout,
		})
		m.client = p.Addr()
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s's output:\n%s", m.name, p.Output())
			}
		})
	}
	type status struct {
		Leader  string `json:"leader"`
		Version int    `json:"cluster_version"`
	}
	client := &http.Client{Timeout: 2 * time.Second}
	var follower string
	testproc.WaitFor(t, 30*time.Second, "the members finalized and agreeing on a leader", func() bool {
		leaders := map[string]bool{}
		for _, m := range ms {
			r, err := client.Get("http://" + m.http + "/cluster")
			if err != nil {
				return false
			}
			var st status
			err = json.NewDecoder(r.Body).Decode(&st)
			r.Body.Close()
			if err != nil || st.Version != 3 || st.Leader == "" {
				return false
			}
			leaders[st.Leader] = true
		}
		if len(leaders) != 1 {
			return false
		}
		for _, m := range ms {
			if !leaders[m.name] {
				follower = m.client
			}
		}
		return true
	})
	// As StartBinary's readiness probe does on the reference, so that
	// both count one connection and its commands before the test's.
	if err := testproc.Probe(follower, startTimeout); err != nil {
		t.Fatal(err)
	}
	return follower
}

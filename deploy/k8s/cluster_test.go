package k8s

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sproutmq/sprout/deploy/internal/render"
	"github.com/sproutmq/sprout/internal/replication"
)

// electionTimeout is the longest a member waits before it campaigns (raft
// draws it between the election ticks and twice that), as the server runs.
const electionTimeout = 2 * replication.DefaultElectionTick * replication.DefaultTick

// renderCluster renders the base with the cluster component, as the
// overlay deploy/README.md shows, every object strictly decoded.
func renderCluster(t *testing.T) base {
	t.Helper()
	docs, err := render.Overlay(".", "components/cluster")
	if err != nil {
		t.Fatalf("kustomize the base with components/cluster: %v", err)
	}
	return decode(t, docs)
}

// clusterEnv is the container's environment: plain values, the downward
// API's field paths as "fieldRef:PATH", and an optional ConfigMap key as
// "configMapKeyRef:NAME/KEY".
func clusterEnv(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	m := make(map[string]string)
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			m[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			m[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			if ref.Optional == nil || !*ref.Optional {
				t.Errorf("env %s: ConfigMap key %s/%s not optional: no pod starts while it is missing", e.Name, ref.Name, ref.Key)
			}
			m[e.Name] = "configMapKeyRef:" + ref.Name + "/" + ref.Key
		default:
			t.Errorf("env %s: a valueFrom other than fieldRef and configMapKeyRef", e.Name)
		}
	}
	return m
}

// TestClusterJoinList checks the wiring that lets the StatefulSet grow
// (deploy/README.md, "Scaling 3 to 5"): every pod reads
// SPROUT_CLUSTER_JOIN from an optional key of a ConfigMap the component
// ships, without that key, so the initial members start as ever; and the
// list the operator writes there gives a new pod its own entry and the
// others none.
func TestClusterJoinList(t *testing.T) {
	b := renderCluster(t)
	e := clusterEnv(t, b.sprout(t))
	ref, ok := strings.CutPrefix(e["SPROUT_CLUSTER_JOIN"], "configMapKeyRef:")
	if !ok {
		t.Fatalf("SPROUT_CLUSTER_JOIN = %q; want it from a ConfigMap's key", e["SPROUT_CLUSTER_JOIN"])
	}
	name, key, _ := strings.Cut(ref, "/")
	cm := b.configMaps[name]
	if cm == nil {
		t.Fatalf("SPROUT_CLUSTER_JOIN reads ConfigMap %s, which components/cluster does not ship (it ships %v)", name, slices.Collect(mapKeys(b.configMaps)))
	}
	if v, set := cm.Data[key]; set {
		t.Errorf("ConfigMap %s ships the key %s = %q; want none until a member is added", name, key, v)
	}
	if len(b.configMaps) != 1 {
		t.Errorf("components/cluster ships %d ConfigMaps; want 1", len(b.configMaps))
	}

	// What the operator appends, as deploy/README.md says: the new pod
	// takes its entry, the initial ones none.
	list := fmt.Sprintf("%s-3=c0ffee:3a,%s-4=c0ffee:4b", b.sts.Name, b.sts.Name)
	for pod, want := range map[string]uint64{b.sts.Name + "-0": 0, b.sts.Name + "-3": 0x3a, b.sts.Name + "-4": 0x4b} {
		_, id, found, err := replication.SelectJoin(list, pod)
		if err != nil || id != want || found != (want != 0) {
			t.Errorf("pod %s reads %q as id %x (found %v, %v); want %x", pod, list, id, found, err, want)
		}
	}
}

// TestClusterMembers checks that the pods the StatefulSet makes are the
// members its peers list names: each pod's name is its member's name, and
// each member's address is the pod's name under the headless Service (the
// DNS name Kubernetes gives it) at the container's cluster port, where the
// member listens.
func TestClusterMembers(t *testing.T) {
	b := renderCluster(t)
	c := b.sprout(t)
	e := clusterEnv(t, c)
	sts := b.sts

	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}
	if replicas != 3 {
		t.Errorf("replicas = %d; want 3", replicas)
	}
	if sts.Spec.PodManagementPolicy != "Parallel" {
		t.Errorf("podManagementPolicy = %q; want Parallel: members need each other to become ready", sts.Spec.PodManagementPolicy)
	}
	if e["SPROUT_NODE"] != "fieldRef:metadata.name" {
		t.Errorf("SPROUT_NODE = %q; want the pod's name from the downward API (fieldRef metadata.name)", e["SPROUT_NODE"])
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, vct := range sts.Spec.VolumeClaimTemplates {
			mounted = mounted || m.Name == vct.Name && m.MountPath == e["SPROUT_WAL_DIR"] && !m.ReadOnly
		}
	}
	if !mounted {
		t.Errorf("SPROUT_WAL_DIR %q is not a claim of the pod's own: a member needs -b on a volume that follows it", e["SPROUT_WAL_DIR"])
	}
	if e["SPROUT_LISTEN"] != "0.0.0.0" {
		t.Errorf("SPROUT_LISTEN = %q; want a wildcard, so a member's client address is its peers-list host", e["SPROUT_LISTEN"])
	}

	clusterPort := portOf(t, c, intstr.FromString("cluster"))
	if got := addrPort(t, e["SPROUT_CLUSTER_LISTEN"]); got != clusterPort {
		t.Errorf("SPROUT_CLUSTER_LISTEN %q listens on %d; the container's cluster port is %d", e["SPROUT_CLUSTER_LISTEN"], got, clusterPort)
	}
	if host, _, _ := net.SplitHostPort(e["SPROUT_CLUSTER_LISTEN"]); host != "" && host != "0.0.0.0" {
		t.Errorf("SPROUT_CLUSTER_LISTEN %q: want every interface, the pod's address is not known in advance", e["SPROUT_CLUSTER_LISTEN"])
	}

	peers, err := replication.ParsePeers(e["SPROUT_CLUSTER_PEERS"])
	if err != nil {
		t.Fatalf("SPROUT_CLUSTER_PEERS: %v", err)
	}
	var names []string
	for _, p := range peers {
		names = append(names, p.Name)
		host, port, err := net.SplitHostPort(p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if want := p.Name + "." + sts.Spec.ServiceName; host != want {
			t.Errorf("member %s's address host is %q; want the pod's headless Service name %q", p.Name, host, want)
		}
		if port != strconv.Itoa(int(clusterPort)) {
			t.Errorf("member %s's address %s: port is not the cluster port %d", p.Name, p.Addr, clusterPort)
		}
	}
	var pods []string
	for i := range replicas {
		pods = append(pods, fmt.Sprintf("%s-%d", sts.Name, i))
	}
	if !slices.Equal(names, pods) {
		t.Errorf("SPROUT_CLUSTER_PEERS names %q; the StatefulSet's pods are %q", names, pods)
	}

	// The members find each other through the headless Service before
	// any is ready, and reach each other's cluster port through it.
	headless := b.services[sts.Spec.ServiceName]
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("serviceName %q is not a headless Service", sts.Spec.ServiceName)
	}
	if !headless.Spec.PublishNotReadyAddresses {
		t.Error("the headless Service does not publish pods that are not ready: members could not find each other to elect a leader")
	}
	if !slices.ContainsFunc(headless.Spec.Ports, func(p corev1.ServicePort) bool {
		return portOf(t, c, p.TargetPort) == clusterPort && p.Port == clusterPort
	}) {
		t.Errorf("the headless Service has no port %d for the cluster port (ports %+v)", clusterPort, headless.Spec.Ports)
	}
	if clients := b.services["sprout"]; clients != nil && slices.ContainsFunc(clients.Spec.Ports, func(p corev1.ServicePort) bool {
		return portOf(t, c, p.TargetPort) == clusterPort
	}) {
		t.Error("the clients' Service sprout exposes the cluster port")
	}
}

// TestClusterPolicies checks the disruption budget keeps a majority of
// the members, that the NetworkPolicy lets members reach each other's
// cluster and beanstalk ports (the proxy dials the leader's), and the
// probes.
func TestClusterPolicies(t *testing.T) {
	b := renderCluster(t)
	c := b.sprout(t)
	podLabels := labels.Set(b.sts.Spec.Template.Labels)
	replicas := int(*b.sts.Spec.Replicas)

	pdb := b.pdb.Spec
	if pdb.MaxUnavailable != nil {
		t.Errorf("PodDisruptionBudget has maxUnavailable %v besides minAvailable", pdb.MaxUnavailable)
	}
	if pdb.MinAvailable == nil {
		t.Fatal("PodDisruptionBudget has no minAvailable")
	}
	minAvailable, err := intstr.GetScaledValueFromIntOrPercent(pdb.MinAvailable, replicas, true)
	if err != nil {
		t.Fatal(err)
	}
	if majority := replicas/2 + 1; minAvailable < majority {
		t.Errorf("PodDisruptionBudget minAvailable %v of %d members; a majority is %d", pdb.MinAvailable, replicas, majority)
	}
	if minAvailable >= replicas {
		t.Errorf("PodDisruptionBudget minAvailable %v of %d members: no node could ever be drained", pdb.MinAvailable, replicas)
	}
	if s, err := metav1.LabelSelectorAsSelector(b.pdb.Spec.Selector); err != nil || s.Empty() || !s.Matches(podLabels) {
		t.Errorf("PodDisruptionBudget selector %v does not pick the pods", b.pdb.Spec.Selector)
	}

	// A member's traffic to another: the policy selects the member it
	// arrives at, and some rule admits it from a member to the port.
	if s, err := metav1.LabelSelectorAsSelector(&b.netpol.Spec.PodSelector); err != nil || !s.Matches(podLabels) {
		t.Fatalf("NetworkPolicy does not select the members")
	}
	for _, port := range []string{"cluster", "beanstalk", "http"} {
		want := portOf(t, c, intstr.FromString(port))
		admitted := false
		for _, rule := range b.netpol.Spec.Ingress {
			fromMember := len(rule.From) == 0
			for _, peer := range rule.From {
				if peer.NamespaceSelector != nil || peer.IPBlock != nil || peer.PodSelector == nil {
					continue
				}
				if s, err := metav1.LabelSelectorAsSelector(peer.PodSelector); err == nil && s.Matches(podLabels) {
					fromMember = true
				}
			}
			toPort := len(rule.Ports) == 0
			for _, p := range rule.Ports {
				if p.Port != nil && portOf(t, c, *p.Port) == want {
					toPort = true
				}
			}
			admitted = admitted || fromMember && toPort
		}
		if !admitted {
			t.Errorf("NetworkPolicy admits no member's traffic to another's %s port %d", port, want)
		}
	}

	// Every member fails /readyz while none knows a leader: one failed
	// probe during an election must not take them all out of the Service.
	if r := c.ReadinessProbe; r != nil && time.Duration(r.FailureThreshold-1)*time.Duration(r.PeriodSeconds)*time.Second < electionTimeout {
		t.Errorf("readiness probe: %d failures %d s apart take a member out of the Service during an election (up to %v)",
			r.FailureThreshold, r.PeriodSeconds, electionTimeout)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
		want := "/healthz" // a member catching up is not restarted for it
		if name == "readiness" {
			want = "/readyz"
		}
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port != intstr.FromString("http") {
			t.Errorf("%s probe %+v; want an httpGet on %s at the http port", name, p, want)
		}
	}
}

// TestClusterTLSComponent renders the cluster with components/cluster-tls
// and checks that the three files the server reads (--cluster-tls-cert,
// -key, -ca) are the keys cert-manager writes into the Secret, where the
// Secret is mounted read-only.
func TestClusterTLSComponent(t *testing.T) {
	docs, err := render.Overlay(".", "components/cluster", "components/cluster-tls")
	if err != nil {
		t.Fatal(err)
	}
	b := decode(t, docs)
	c := b.sprout(t)
	e := clusterEnv(t, c)
	secrets := make(map[string]*corev1.SecretVolumeSource)
	for _, v := range b.sts.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret
		}
	}
	for env, key := range map[string]string{
		"SPROUT_CLUSTER_TLS_CERT": corev1.TLSCertKey, "SPROUT_CLUSTER_TLS_KEY": corev1.TLSPrivateKeyKey, "SPROUT_CLUSTER_TLS_CA": "ca.crt",
	} {
		path, found := e[env], false
		for _, m := range c.VolumeMounts {
			if s := secrets[m.Name]; s != nil && path == m.MountPath+"/"+key && m.ReadOnly && len(s.Items) == 0 {
				found = true
			}
		}
		if !found {
			t.Errorf("%s = %q; want the key %s of a Secret mounted read-only (mounts %+v)", env, path, key, c.VolumeMounts)
		}
	}
	if *b.sts.Spec.Replicas != 3 || e["SPROUT_CLUSTER_PEERS"] == "" {
		t.Error("components/cluster-tls undid components/cluster")
	}
}

// TestClusterGroupsBudget: with components/cluster-groups, a voluntary
// disruption takes at most as many members as a group of
// SPROUT_CLUSTER_REPLICAS can lose and keep a majority, at any number of
// members: two members down may be two replicas of one group. It said
// minAvailable 4, right for five members only (scaled to seven, three
// could go).
func TestClusterGroupsBudget(t *testing.T) {
	docs, err := render.Overlay(".", "components/cluster", "components/cluster-groups")
	if err != nil {
		t.Fatalf("kustomize the base with components/cluster and components/cluster-groups: %v", err)
	}
	b := decode(t, docs)
	replicas, err := strconv.Atoi(clusterEnv(t, b.sprout(t))["SPROUT_CLUSTER_REPLICAS"])
	if err != nil {
		t.Fatalf("SPROUT_CLUSTER_REPLICAS: %v", err)
	}
	pdb := b.pdb.Spec
	if pdb.MinAvailable != nil || pdb.MaxUnavailable == nil {
		t.Fatalf("PodDisruptionBudget minAvailable %v, maxUnavailable %v: want maxUnavailable alone, which holds at any number of members",
			pdb.MinAvailable, pdb.MaxUnavailable)
	}
	for _, members := range []int{3, 5, 7, 9} {
		down, err := intstr.GetScaledValueFromIntOrPercent(pdb.MaxUnavailable, members, false)
		if err != nil {
			t.Fatal(err)
		}
		if down < 1 || down > (replicas-1)/2 {
			t.Errorf("%d members: %d may be down at once; a group of %d replicas keeps a majority with %d", members, down, replicas, (replicas-1)/2)
		}
	}
}

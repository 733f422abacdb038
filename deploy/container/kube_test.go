package container

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/beanstalkd/go-beanstalk"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sproutmq/sprout/deploy/internal/render"
)

// shard is one pod played from the StatefulSet's template.
type shard struct {
	member         string // the pod's name under Kubernetes: NAME-ordinal
	pod, container string // podman's names, unique to this run
	queue, ops     string // 127.0.0.1:port of the beanstalk and http ports
}

// playStatefulSet runs n pods built from sts, as the StatefulSet
// controller would (pods NAME-0 ... with a claim each), with `podman kube
// play` on a network of their own: podman cannot play a StatefulSet
// itself. Podman's names are unique to this run; what Kubernetes would
// give each pod is given here instead: its hostname NAME-i, its name
// through the downward API (metadata.name is NAME-i), and the headless
// Service's DNS name NAME-i.SERVICE of every pod, as hostAliases to static
// addresses, since podman's CNI networks here have no DNS. Their ports
// are published on 127.0.0.1. Pods, volumes and the network are removed
// when the test ends.
//
// secrets maps a Secret's name to a directory holding its keys as files,
// which the pods mount where the Secret would be (podman's secrets are not
// Kubernetes'); a Secret volume not in it fails the test.
func playStatefulSet(t *testing.T, sts *appsv1.StatefulSet, n int, secrets map[string]string) []shard {
	t.Helper()
	network := name("net")
	must(t, "network", "create", network)
	t.Cleanup(func() { run(nil, "network", "rm", "-f", network) })
	subnet, err := netip.ParsePrefix(must(t, "network", "inspect", "-f", "{{range .Subnets}}{{.Subnet}}{{end}}", network))
	if err != nil {
		t.Fatalf("network %s: %v", network, err)
	}
	// Static MAC addresses too: a pod started again with a new one would
	// find the host's neighbour entry for its address stale, and the
	// published ports unreachable for tens of seconds.
	var ips, macs []string
	aliases := make([]corev1.HostAlias, n)
	for i := range n {
		ip := subnet.Addr()
		for range 10 + i { // past the gateway and whatever podman hands out first
			ip = ip.Next()
		}
		b := ip.As4()
		ips = append(ips, ip.String())
		macs = append(macs, fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3]))
		aliases[i] = corev1.HostAlias{IP: ips[i], Hostnames: []string{fmt.Sprintf("%s-%d.%s", sts.Name, i, sts.Spec.ServiceName)}}
	}

	var docs []string
	var shards []shard
	for i := range n {
		member := fmt.Sprintf("%s-%d", sts.Name, i)
		podName := name("pod-" + member)
		spec := *sts.Spec.Template.Spec.DeepCopy()
		spec.Hostname, spec.Subdomain = member, sts.Spec.ServiceName
		spec.HostAliases = append(spec.HostAliases, aliases...)
		for vi := range spec.Volumes {
			v := &spec.Volumes[vi]
			if v.Secret == nil {
				continue
			}
			dir, ok := secrets[v.Secret.SecretName]
			if !ok {
				t.Fatalf("volume %s: Secret %s not given", v.Name, v.Secret.SecretName)
			}
			v.VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}
		}
		sh := shard{member: member, pod: podName}
		for ci := range spec.Containers {
			c := &spec.Containers[ci]
			c.Image = image
			if c.Name == "sprout" {
				sh.container = podName + "-" + c.Name
			}
			// An optional ConfigMap key (components/cluster's join list)
			// is unset, as with the ConfigMap shipped without it.
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool {
				ref := e.ValueFrom
				return ref != nil && ref.ConfigMapKeyRef != nil && ref.ConfigMapKeyRef.Optional != nil && *ref.ConfigMapKeyRef.Optional
			})
			for ei := range c.Env {
				e := &c.Env[ei]
				if e.ValueFrom == nil {
					continue
				}
				if e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
					t.Fatalf("env %s: valueFrom %+v; this test plays only fieldRef metadata.name and optional ConfigMap keys", e.Name, e.ValueFrom)
				}
				e.Value, e.ValueFrom = member, nil
			}
			// Every port on loopback: podman would publish one without
			// a hostPort on every interface, at its own number.
			for pi := range c.Ports {
				p := &c.Ports[pi]
				p.HostIP, p.HostPort = "127.0.0.1", int32(freePort(t))
				addr := "127.0.0.1:" + strconv.Itoa(int(p.HostPort))
				switch p.Name {
				case "beanstalk":
					sh.queue = addr
				case "http":
					sh.ops = addr
				}
			}
		}
		for _, vct := range sts.Spec.VolumeClaimTemplates {
			claim := fmt.Sprintf("%s-%s-%d", vct.Name, name(sts.Name), i)
			spec.Volumes = append(spec.Volumes, corev1.Volume{Name: vct.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}})
			pvc := corev1.PersistentVolumeClaim{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
				ObjectMeta: metav1.ObjectMeta{Name: claim},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: vct.Spec.AccessModes,
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceStorage: resource.MustParse("1Gi"),
					}},
				},
			}
			docs = append(docs, string(marshal(t, pvc)))
			t.Cleanup(func() { run(nil, "volume", "rm", "-f", claim) })
		}
		pod := corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: podName, Labels: sts.Spec.Template.Labels},
			Spec:       spec,
		}
		docs = append(docs, string(marshal(t, pod)))
		shards = append(shards, sh)
	}
	file := filepath.Join(t.TempDir(), "pods.yaml")
	if err := os.WriteFile(file, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, sh := range shards {
			run(nil, "pod", "rm", "-f", "-t", "0", sh.pod)
		}
	})
	// Before the pods are removed: what a failed test's pods said.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, sh := range shards {
			state, _ := run(nil, "inspect", "-f", "{{.State.Status}} exit {{.State.ExitCode}}", sh.container)
			t.Logf("%s (%s, %s), last lines:\n%s", sh.member, sh.container, state, containerLogs(sh.container, 40))
		}
	})
	args := []string{"kube", "play", "--network", network}
	for i := range n { // one of each per pod, in order
		args = append(args, "--ip", ips[i], "--mac-address", macs[i])
	}
	must(t, append(args, file)...)
	return shards
}

// baseStatefulSet is deploy/k8s's StatefulSet, strictly decoded.
func baseStatefulSet(t *testing.T) *appsv1.StatefulSet {
	t.Helper()
	sts, err := render.StatefulSet("../k8s")
	if err != nil {
		t.Fatal(err)
	}
	return sts
}

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStatefulSetPod plays the StatefulSet's pod and checks that its probes
// pass: each probe's path on the probe's port, as the kubelet asks it, and
// that the pod runs as the manifest says.
func TestStatefulSetPod(t *testing.T) {
	needPodman(t)
	sts := baseStatefulSet(t)
	t0 := time.Now()
	sh := playStatefulSet(t, sts, 1, nil)[0]
	ready := waitReady(t, sh.ops, 30*time.Second)
	t.Logf("pod played and ready in %v (/readyz 200 %v after kube play returned)", time.Since(t0).Round(time.Millisecond), ready.Round(time.Millisecond))
	c := sts.Spec.Template.Spec.Containers[0]
	for kind, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p.HTTPGet.Port.StrVal != "http" {
			t.Fatalf("%s probe on port %s; this test publishes the port named http", kind, p.HTTPGet.Port.String())
		}
		if code := status(sh.ops, p.HTTPGet.Path); code != 200 {
			t.Errorf("%s probe GET %s = %d; want 200", kind, p.HTTPGet.Path, code)
		}
	}
	if uid, gid, ok := uidOf(t, sh.container); ok && (uid != "65532" || gid != "65532") {
		t.Errorf("pod's container runs as %s:%s; want 65532:65532", uid, gid)
	}
	if ro := must(t, "inspect", "-f", "{{.HostConfig.ReadonlyRootfs}}", sh.container); ro != "true" {
		t.Errorf("ReadonlyRootfs = %s; want true", ro)
	}
	conn, err := beanstalk.Dial("tcp", sh.queue)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Put([]byte("hello"), 0, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// shardFor is deploy/README.md's client rule: FNV-1a of the tube name,
// modulo the number of shards, indexes the StatefulSet's pods in order.
func shardFor(tube string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(tube))
	return int(h.Sum32() % uint32(n))
}

// TestShards runs three shards and a client that spreads tubes over them
// by name; each tube's jobs must be on its shard only, and stay there
// across a restart of that shard.
func TestShards(t *testing.T) {
	needPodman(t)
	shards := playStatefulSet(t, baseStatefulSet(t), 3, nil)
	conns := make([]*beanstalk.Conn, len(shards))
	for i, sh := range shards {
		waitReady(t, sh.ops, 30*time.Second)
		c, err := beanstalk.Dial("tcp", sh.queue)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { conns[i].Close() }()
		conns[i] = c
	}
	const perTube = 5
	tubes := make([]string, 12)
	for i := range tubes {
		tubes[i] = fmt.Sprintf("tenant-%02d", i)
		tube := beanstalk.NewTube(conns[shardFor(tubes[i], len(shards))], tubes[i])
		for j := range perTube {
			if _, err := tube.Put(fmt.Appendf(nil, "%s/%d", tubes[i], j), 0, 0, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(when string) {
		t.Helper()
		used := make(map[int]bool)
		for _, name := range tubes {
			home := shardFor(name, len(shards))
			used[home] = true
			for i, c := range conns {
				stats, err := beanstalk.NewTube(c, name).Stats()
				switch {
				case i == home && (err != nil || stats["current-jobs-ready"] != strconv.Itoa(perTube)):
					t.Errorf("%s: tube %s on its shard %d: %v ready, %v; want %d", when, name, i, stats["current-jobs-ready"], err, perTube)
				case i != home && err == nil:
					t.Errorf("%s: tube %s exists on shard %d, not its own %d", when, name, i, home)
				}
			}
		}
		if len(used) != len(shards) {
			t.Errorf("the tubes went to %d of %d shards; pick names that spread", len(used), len(shards))
		}
	}
	check("before the restart")

	// Restart shard 1: same pod, same claim, same ports.
	const restarted = 1
	conns[restarted].Close()
	ids := podContainers(t, shards[restarted])
	must(t, "pod", "stop", "-t", strconv.Itoa(stopGrace), shards[restarted].pod)
	if code := must(t, "inspect", "-f", "{{.State.ExitCode}}", shards[restarted].container); code != "0" {
		t.Errorf("shard %d exited %s on stop; want 0", restarted, code)
	}
	startStopped(t, shards[restarted], ids)
	waitReady(t, shards[restarted].ops, 30*time.Second)
	c, err := beanstalk.Dial("tcp", shards[restarted].queue)
	if err != nil {
		t.Fatal(err)
	}
	conns[restarted] = c
	check("after restarting shard 1")
}

// containerLogs is the last lines a container wrote, stdout and stderr
// (where the server logs) together.
func containerLogs(container string, lines int) string {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, engine, "logs", "--tail", strconv.Itoa(lines), container)
	cmd.Env = append(os.Environ(), engineEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s logs: %v\n%s", engine, err, out)
	}
	return string(out)
}

// podContainers is the ids of a played pod's containers, its infra's too.
func podContainers(t *testing.T, sh shard) []string {
	t.Helper()
	return []string{
		must(t, "inspect", "-f", "{{.Id}}", sh.container),
		must(t, "pod", "inspect", "-f", "{{.InfraContainerID}}", sh.pod),
	}
}

// startStopped starts a played pod that was stopped or killed, once podman
// has finished with its containers' exits (ids, from podContainers).
// Podman 4.3 plays pods with the exit policy "stop": the cleanup process
// conmon starts when a pod's last container exits stops the pod, and one
// that runs late stops it again right after `pod start` (seen: the
// restarted member died 0.5 s later, exit 2). So it waits until neither
// conmon nor that process is left for the pod's containers.
func startStopped(t *testing.T, sh shard, ids []string) {
	t.Helper()
	deadline := time.Now().Add(commandTimeout)
	for cleanupRunning(ids) {
		if time.Now().After(deadline) {
			t.Fatalf("podman's cleanup of %s still running after %v", sh.pod, commandTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	must(t, "pod", "start", sh.pod)
}

// cleanupRunning reports whether a process on this machine is podman's
// `container cleanup` of one of the containers ids, or the conmon that
// will start it (its command line holds the cleanup command's).
func cleanupRunning(ids []string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "cleanup") {
			continue
		}
		for _, id := range ids {
			if strings.Contains(string(b), id) {
				return true
			}
		}
	}
	return false
}

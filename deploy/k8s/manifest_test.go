package k8s

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/sproutmq/sprout/deploy/internal/render"
	"github.com/sproutmq/sprout/internal/testproc"
)

// What the server promises (docs/operations.md, "Signals and shutdown";
// docs/durability.md).
const (
	defaultShutdownTimeout = 25 * time.Second
	walCloseLimit          = 10 * time.Second
	// heldRepliesLimit bounds sending the replies held for the log once
	// the connections close, handOversLimit a cluster member's handing
	// its groups' leaderships over, and sidePortLimit the side port's
	// requests in flight (internal/member).
	heldRepliesLimit = 5 * time.Second
	handOversLimit   = 3 * time.Second
	sidePortLimit    = 5 * time.Second
)

// sproutBinary builds cmd/sprout from the server's own module (not this
// one, whose dependency graph differs) into a test's temporary directory.
func sproutBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sprout")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/sprout")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/sprout: %v\n%s", err, out)
	}
	return bin
}

// render runs kustomize on dir, as `kubectl kustomize dir` does.
func renderDir(t *testing.T, dir string) [][]byte {
	t.Helper()
	docs, err := render.Docs(dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	return docs
}

// base is the rendered base, every object strictly decoded.
type base struct {
	sts        *appsv1.StatefulSet
	services   map[string]*corev1.Service
	pdb        *policyv1.PodDisruptionBudget
	netpol     *networkingv1.NetworkPolicy
	configMaps map[string]*corev1.ConfigMap // components/cluster's
	extraKinds []string                     // kinds this test has no type for
}

// strict decodes doc into v, failing on a field the type does not have.
func strict(t *testing.T, doc []byte, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		t.Fatalf("strict decode into %T: %v\n%s", v, err, doc)
	}
}

func decode(t *testing.T, docs [][]byte) base {
	t.Helper()
	b := base{services: make(map[string]*corev1.Service), configMaps: make(map[string]*corev1.ConfigMap)}
	for _, doc := range docs {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatal(err)
		}
		switch gvk := tm.APIVersion + " " + tm.Kind; gvk {
		case "apps/v1 StatefulSet":
			if b.sts != nil {
				t.Fatal("two StatefulSets")
			}
			b.sts = new(appsv1.StatefulSet)
			strict(t, doc, b.sts)
		case "v1 Service":
			svc := new(corev1.Service)
			strict(t, doc, svc)
			b.services[svc.Name] = svc
		case "policy/v1 PodDisruptionBudget":
			b.pdb = new(policyv1.PodDisruptionBudget)
			strict(t, doc, b.pdb)
		case "networking.k8s.io/v1 NetworkPolicy":
			b.netpol = new(networkingv1.NetworkPolicy)
			strict(t, doc, b.netpol)
		case "v1 ConfigMap":
			cm := new(corev1.ConfigMap)
			strict(t, doc, cm)
			b.configMaps[cm.Name] = cm
		default:
			b.extraKinds = append(b.extraKinds, gvk)
		}
	}
	if b.sts == nil || b.pdb == nil || b.netpol == nil || len(b.services) != 2 {
		t.Fatalf("rendered base lacks objects: statefulset %v, pdb %v, networkpolicy %v, services %d",
			b.sts != nil, b.pdb != nil, b.netpol != nil, len(b.services))
	}
	if len(b.extraKinds) > 0 {
		t.Fatalf("unexpected kinds in the base: %q", b.extraKinds)
	}
	return b
}

func renderBase(t *testing.T) base {
	return decode(t, renderDir(t, "."))
}

// sprout is the StatefulSet's one container.
func (b base) sprout(t *testing.T) corev1.Container {
	t.Helper()
	cs := b.sts.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != "sprout" {
		t.Fatalf("containers = %d (first %q); want one named sprout", len(cs), cs[0].Name)
	}
	return cs[0]
}

// env is the container's plain environment; valueFrom is not used.
func env(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	m := make(map[string]string)
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Errorf("env %s uses valueFrom; the test reads plain values", e.Name)
		}
		m[e.Name] = e.Value
	}
	return m
}

// portOf resolves a probe's or a Service's target port against the
// container's ports.
func portOf(t *testing.T, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort
		}
	}
	t.Errorf("port %s is none of the container's ports", p.String())
	return 0
}

// addrPort is the port of a HOST:PORT or :PORT address.
func addrPort(t *testing.T, addr string) int32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return int32(n)
}

// TestStatefulSet checks the pod against the server it runs: probes on
// the HTTP port's real paths, the claim mounted where the log is, a grace
// period the drain fits in, and the image's user.
func TestStatefulSet(t *testing.T) {
	b := renderBase(t)
	c := b.sprout(t)
	e := env(t, c)
	pod := b.sts.Spec.Template.Spec

	if got := portOf(t, c, intstr.FromString("beanstalk")); strconv.Itoa(int(got)) != e["SPROUT_PORT"] {
		t.Errorf("port beanstalk = %d; SPROUT_PORT = %q", got, e["SPROUT_PORT"])
	}
	httpPort := portOf(t, c, intstr.FromString("http"))
	if got := addrPort(t, e["SPROUT_HTTP"]); got != httpPort {
		t.Errorf("SPROUT_HTTP %q serves port %d; the container's http port is %d", e["SPROUT_HTTP"], got, httpPort)
	}
	if e["SPROUT_LISTEN"] != "0.0.0.0" {
		t.Errorf("SPROUT_LISTEN = %q; want 0.0.0.0, for the Services", e["SPROUT_LISTEN"])
	}
	for name, probe := range map[string]*corev1.Probe{
		"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe,
	} {
		want := "/healthz" // a member catching up is not restarted for it
		if name == "readiness" {
			want = "/readyz"
		}
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("%s probe: want an httpGet on %s", name, want)
			continue
		}
		if probe.HTTPGet.Path != want {
			t.Errorf("%s probe path = %q; want %q", name, probe.HTTPGet.Path, want)
		}
		if got := portOf(t, c, probe.HTTPGet.Port); got != httpPort {
			t.Errorf("%s probe port %s = %d; want the http port %d", name, probe.HTTPGet.Port.String(), got, httpPort)
		}
	}
	if c.LivenessProbe != nil && c.LivenessProbe.TimeoutSeconds <= 1 {
		t.Errorf("liveness timeoutSeconds = %d; /healthz may take 1 s to answer", c.LivenessProbe.TimeoutSeconds)
	}

	// The log's directory is the claim's mount.
	walDir := e["SPROUT_WAL_DIR"]
	if walDir == "" {
		t.Error("SPROUT_WAL_DIR is not set: the pod would keep jobs in memory only")
	}
	var claims []string
	for _, vct := range b.sts.Spec.VolumeClaimTemplates {
		claims = append(claims, vct.Name)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.MountPath == walDir && slices.Contains(claims, m.Name) && !m.ReadOnly {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("no claim from volumeClaimTemplates %q is mounted writable at SPROUT_WAL_DIR %q (mounts %+v)", claims, walDir, c.VolumeMounts)
	}

	shutdown := defaultShutdownTimeout
	if s, ok := e["SPROUT_SHUTDOWN_TIMEOUT"]; ok {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("SPROUT_SHUTDOWN_TIMEOUT %q: %v", s, err)
		}
		shutdown = d
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= shutdown+heldRepliesLimit+handOversLimit+sidePortLimit+walCloseLimit {
		t.Errorf("terminationGracePeriodSeconds = %d; want above the shutdown timeout %v plus the held replies' %v, the leaderships' handover %v, the side port's %v and the log's close limit %v",
			ptrOr(g), shutdown, heldRepliesLimit, handOversLimit, sidePortLimit, walCloseLimit)
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		t.Error("a preStop hook: SIGTERM drains by itself, and the image has no shell to run one")
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Error("enableServiceLinks is not false: the Service sprout would set SPROUT_PORT=tcp://... in the pod")
	}

	// Security: the image's user, non-root, nothing to escalate to.
	user, group := imageUser(t)
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || sc == nil {
		t.Fatal("pod or container securityContext missing")
	}
	if psc.RunAsUser == nil || *psc.RunAsUser != user || psc.RunAsGroup == nil || *psc.RunAsGroup != group {
		t.Errorf("runAsUser/runAsGroup = %v/%v; the image's USER is %d:%d", psc.RunAsUser, psc.RunAsGroup, user, group)
	}
	if psc.FSGroup == nil || *psc.FSGroup != group {
		t.Errorf("fsGroup = %v; want %d so the claim is writable", psc.FSGroup, group)
	}
	if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("pod runAsNonRoot is not true")
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod seccompProfile is not RuntimeDefault")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("capabilities = %+v; want drop [ALL] and no add", sc.Capabilities)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources = %+v; want cpu and memory requests and a memory limit (Sprout sizes its buffer budget from it)", c.Resources)
	}
}

// imageUser reads USER uid:gid from deploy/Dockerfile.
func imageUser(t *testing.T) (uid, gid int64) {
	t.Helper()
	f, err := os.Open("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && fields[0] == "USER" {
			u, g, ok := strings.Cut(fields[1], ":")
			uid, err1 := strconv.ParseInt(u, 10, 64)
			gid, err2 := strconv.ParseInt(g, 10, 64)
			if !ok || err1 != nil || err2 != nil {
				t.Fatalf("Dockerfile USER %q: want numeric uid:gid", fields[1])
			}
			return uid, gid
		}
	}
	t.Fatal("Dockerfile has no USER line")
	return 0, 0
}

// TestServicesAndPolicies checks that every selector picks the pods and
// every named port exists.
func TestServicesAndPolicies(t *testing.T) {
	b := renderBase(t)
	c := b.sprout(t)
	podLabels := labels.Set(b.sts.Spec.Template.Labels)
	sel, err := metav1.LabelSelectorAsSelector(b.sts.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(podLabels) {
		t.Errorf("StatefulSet selector %v does not pick its pods %v (%v)", b.sts.Spec.Selector, podLabels, err)
	}

	headless := b.services[b.sts.Spec.ServiceName]
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("serviceName %q is not a headless Service among %v", b.sts.Spec.ServiceName, slices.Collect(mapKeys(b.services)))
	}
	for name, svc := range b.services {
		if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
			t.Errorf("Service %s selector %v does not pick the pods %v", name, svc.Spec.Selector, podLabels)
		}
		for _, p := range svc.Spec.Ports {
			portOf(t, c, p.TargetPort)
		}
	}
	if cluster := b.services["sprout"]; cluster == nil || cluster.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Error("no ClusterIP Service sprout")
	}

	if s, err := metav1.LabelSelectorAsSelector(b.pdb.Spec.Selector); err != nil || s.Empty() || !s.Matches(podLabels) {
		t.Errorf("PodDisruptionBudget selector %v does not pick the pods", b.pdb.Spec.Selector)
	}
	if b.pdb.Spec.MaxUnavailable == nil || b.pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable = %v; want 1", b.pdb.Spec.MaxUnavailable)
	}
	if s, err := metav1.LabelSelectorAsSelector(&b.netpol.Spec.PodSelector); err != nil || s.Empty() || !s.Matches(podLabels) {
		t.Errorf("NetworkPolicy podSelector %v does not pick (only) the pods", b.netpol.Spec.PodSelector)
	}
	for _, rule := range b.netpol.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port != nil {
				portOf(t, c, *p.Port)
			}
		}
	}
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestProbesAnswer starts the real server with the container's
// environment (addresses moved to loopback, the log to a temporary
// directory) and requires 200 from every path the probes and the
// ServiceMonitor use.
func TestProbesAnswer(t *testing.T) {
	b := renderBase(t)
	c := b.sprout(t)
	var cfgEnv []string
	httpPort, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort))
	for k, v := range env(t, c) {
		switch k {
		case "SPROUT_HTTP":
			v = httpAddr
		case "SPROUT_WAL_DIR":
			v = t.TempDir()
		case "SPROUT_LISTEN", "SPROUT_PORT":
			continue // testproc passes -l and -p, which win
		}
		cfgEnv = append(cfgEnv, k+"="+v)
	}
	p := testproc.StartConfig(t, testproc.Config{
		Binary: sproutBinary(t), Args: c.Args, Env: cfgEnv,
	})
	paths := []string{c.StartupProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path, "/metrics"}
	client := &http.Client{Timeout: 5 * time.Second}
	for _, path := range paths {
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := client.Get("http://" + httpAddr + path)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				err = fmt.Errorf("status %s", resp.Status)
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %v\nserver output:\n%s", path, err, p.Output())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestServiceMonitorComponent renders the base with the optional
// component, as an overlay would, and checks the ServiceMonitor scrapes
// the Service's http port at /metrics. Its type is the Prometheus
// Operator's; the fields used are mirrored here, so a misspelt one fails.
func TestServiceMonitorComponent(t *testing.T) {
	docs, err := render.Overlay(".", "components/servicemonitor")
	if err != nil {
		t.Fatal(err)
	}
	var smDocs, rest [][]byte
	for _, doc := range docs {
		if bytes.Contains(doc, []byte("kind: ServiceMonitor")) {
			smDocs = append(smDocs, doc)
		} else {
			rest = append(rest, doc)
		}
	}
	b := decode(t, rest)
	if len(smDocs) != 1 {
		t.Fatalf("%d ServiceMonitors rendered; want 1", len(smDocs))
	}
	var sm struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Spec              struct {
			Selector  metav1.LabelSelector `json:"selector"`
			Endpoints []struct {
				Port     string `json:"port"`
				Path     string `json:"path"`
				Interval string `json:"interval"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	strict(t, smDocs[0], &sm)
	if sm.APIVersion != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion %q", sm.APIVersion)
	}
	svc := b.services["sprout"]
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(svc.Labels)) || sel.Matches(labels.Set(b.services[b.sts.Spec.ServiceName].Labels)) && len(sm.Spec.Endpoints) == 0 {
		t.Errorf("ServiceMonitor selector %v does not pick the Service sprout (labels %v)", sm.Spec.Selector, svc.Labels)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Fatalf("ServiceMonitor endpoints %+v; want one on /metrics", sm.Spec.Endpoints)
	}
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == sm.Spec.Endpoints[0].Port }) {
		t.Errorf("ServiceMonitor port %q is not a port of the Service sprout", sm.Spec.Endpoints[0].Port)
	}
}

// TestKubectlKustomize renders the base, and an overlay with the cluster,
// with kubectl where it is installed: what the README tells users to run
// must work, not only the library.
func TestKubectlKustomize(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed; the manifests were rendered with kustomize's library")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, kubectl, "kustomize", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, out)
	}
	decode(t, render.Split(out))

	// The cluster as deploy/README.md has users write its overlay.
	overlay := t.TempDir()
	if err := render.WriteOverlay(overlay, ".", "components/cluster"); err != nil {
		t.Fatal(err)
	}
	out, err = exec.CommandContext(ctx, kubectl, "kustomize", overlay).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize an overlay with components/cluster: %v\n%s", err, out)
	}
	if b := decode(t, render.Split(out)); *b.sts.Spec.Replicas != 3 {
		t.Errorf("kubectl's render of the cluster has %d replicas", *b.sts.Spec.Replicas)
	}
}

func ptrOr(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

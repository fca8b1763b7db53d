package charttest

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/reshard"
)

// cacheExpect: what a render must contain for cachenode, as a cluster
// (slot map in kvnode's Raft tier) or as standalone nodes.
type cacheExpect struct {
	cluster                       bool
	name                          string
	primaries, replicasPerPrimary int
	standalonePods                int    // cachenode.replicas, the pods without cluster
	secret                        string // Secret holding the bus secret; "" none
	secretKey, secretValue        string // secretValue "": not rendered by the chart
}

func (c cacheExpect) pods() int {
	if !c.cluster {
		return c.standalonePods
	}
	return c.primaries * (1 + c.replicasPerPrimary)
}

var (
	defaultCache = cacheExpect{cluster: true, name: "portico", primaries: 3, replicasPerPrimary: 1, standalonePods: 1}
	// testdata/all-enabled.yaml
	allEnabledCache = cacheExpect{cluster: true, name: "prod", primaries: 3, replicasPerPrimary: 2, standalonePods: 2,
		secret: fullName("cachenode-cluster"), secretKey: "cluster-secret", secretValue: "bus-s3cret"}
)

const (
	initJobLabel   = "cachenode-init"
	cacheKeyspace  = "cache"
	cpKeyspacesEnv = "PORTICO_KV_CP_KEYSPACES"
)

// jobs are the rendered Jobs and CronJobs reduced to what checkPodTemplate
// needs.
func jobs(objs []object) []workload {
	var out []workload
	for _, o := range objs {
		switch j := o.Obj.(type) {
		case *batchv1.Job:
			out = append(out, workload{Kind: o.Kind, Name: o.Name, Component: j.Spec.Template.Labels[componentLabel],
				Selector: j.Spec.Selector, Template: j.Spec.Template})
		case *batchv1.CronJob:
			tmpl := j.Spec.JobTemplate.Spec.Template
			out = append(out, workload{Kind: o.Kind, Name: o.Name, Component: tmpl.Labels[componentLabel], Template: tmpl})
		}
	}
	return out
}

// cacheInitJobs are the Jobs but the certificate sync's and the admin
// token's.
func cacheInitJobs(objs []object) []object {
	var out []object
	for _, o := range ofKind(objs, "Job") {
		if c := o.Obj.(*batchv1.Job).Spec.Template.Labels[componentLabel]; c != tlsSyncComponent && c != adminTokenComponent {
			out = append(out, o)
		}
	}
	return out
}

func checkJobs(t *testing.T, objs []object, secrets map[string]*corev1.Secret, configMaps map[string]*corev1.ConfigMap, external map[string]bool, e expect) {
	for _, j := range jobs(objs) {
		t.Run("Job/"+j.Name, func(t *testing.T) {
			checkPodTemplate(t, j, secrets, configMaps, external)
			if e.optional && !slices.ContainsFunc(j.Template.Spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == "regcred" }) {
				t.Errorf("imagePullSecrets from values not applied: %v", j.Template.Spec.ImagePullSecrets)
			}
		})
	}
}

// checkCache follows cachenode's cluster wiring: the pod count, the kvnode
// addresses, the bus port, failover, the bus secret, kvnode's CP keyspace,
// the first-map Job and init containers, and the NetworkPolicies; or, for
// standalone nodes, that none of it is rendered.
func checkCache(t *testing.T, objs []object, by map[string]workload, e expect) {
	w := by["cachenode"]
	c := w.Template.Spec.Containers[0]
	ce := e.cache
	if w.Replicas == nil || int(*w.Replicas) != ce.pods() {
		t.Errorf("cachenode replicas = %v, want %d", w.Replicas, ce.pods())
	}
	headless, ok := find[corev1.Service](objs, "Service", w.ServiceName)
	if !ok {
		t.Fatalf("no headless Service %s", w.ServiceName)
	}
	kvCP := ""
	if kv, ok := by["kvnode"]; ok {
		kvCP = envValue(t, kv.Template.Spec.Containers[0], cpKeyspacesEnv)
	}
	if !ce.cluster {
		for _, ev := range c.Env {
			if strings.HasPrefix(ev.Name, "PORTICO_CACHE_CLUSTER_") || strings.HasPrefix(ev.Name, "PORTICO_CACHE_FAIL") || ev.Name == "PORTICO_CACHE_BUS_ADDR" {
				t.Errorf("standalone cachenode has cluster env %s", ev.Name)
			}
		}
		if containerPort(c, "bus") != 0 || slices.ContainsFunc(headless.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "bus" }) {
			t.Error("standalone cachenode exposes a bus port")
		}
		if n := len(w.Template.Spec.InitContainers); n != 0 {
			t.Errorf("standalone cachenode has %d init containers", n)
		}
		if n := len(cacheInitJobs(objs)); n != 0 {
			t.Errorf("standalone cachenode: %d Jobs rendered", n)
		}
		if slices.Contains(strings.Split(kvCP, ","), cacheKeyspace) {
			t.Errorf("kvnode declares the CP keyspace %q without a cache cluster: %s", cacheKeyspace, kvCP)
		}
		return
	}

	// The node: id = pod name; the map, the bus, failover.
	if ev, _ := env(c, "PORTICO_NODE_ID"); ev.ValueFrom == nil || ev.ValueFrom.FieldRef == nil || ev.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Error("cachenode PORTICO_NODE_ID must be the pod name: the slot map's ids are the pod names")
	}
	kv, ok := by["kvnode"]
	if !ok {
		t.Fatal("a cache cluster rendered without kvnode")
	}
	kvc := kv.Template.Spec.Containers[0]
	var kvAddrs []string
	for i := range int(*kv.Replicas) {
		kvAddrs = append(kvAddrs, fmt.Sprintf("%s-%d.%s:%d", kv.Name, i, fqdn(kv.ServiceName), containerPort(kvc, "http")))
	}
	if got, want := envValue(t, c, "PORTICO_CACHE_CLUSTER_KV_ADDRS"), strings.Join(kvAddrs, ","); got != want || containerPort(kvc, "http") != 18400 {
		t.Errorf("PORTICO_CACHE_CLUSTER_KV_ADDRS = %q, want every kvnode pod's HTTP address %q", got, want)
	}
	// kvnode answers 421 to a Host it was not told of: every address the
	// cache nodes use must be one of its PORTICO_ADMIN_HOSTS.
	kvHosts := strings.Split(envValue(t, kvc, "PORTICO_ADMIN_HOSTS"), ",")
	for _, addr := range kvAddrs {
		host, _, _ := net.SplitHostPort(addr)
		if !slices.ContainsFunc(kvHosts, func(h string) bool {
			suffix, wild := strings.CutPrefix(h, "*.")
			return h == host || wild && strings.HasSuffix(host, "."+suffix)
		}) {
			t.Errorf("cache nodes reach kvnode at %s, not in its PORTICO_ADMIN_HOSTS %v", host, kvHosts)
		}
	}
	if kvHeadless, ok := find[corev1.Service](objs, "Service", kv.ServiceName); !ok ||
		!slices.ContainsFunc(kvHeadless.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == 18400 }) {
		t.Errorf("kvnode's headless Service %s does not publish 18400", kv.ServiceName)
	}
	if got := envValue(t, c, "PORTICO_CACHE_CLUSTER_NAME"); got != ce.name {
		t.Errorf("PORTICO_CACHE_CLUSTER_NAME = %q, want %q", got, ce.name)
	}
	resp, bus := containerPort(c, "resp"), containerPort(c, "bus")
	if bus != 17000 || envValue(t, c, "PORTICO_CACHE_BUS_ADDR") != ":17000" {
		t.Errorf("bus: container port %d, PORTICO_CACHE_BUS_ADDR %q; want 17000 on all addresses", bus, envValue(t, c, "PORTICO_CACHE_BUS_ADDR"))
	}
	if !slices.ContainsFunc(headless.Spec.Ports, func(p corev1.ServicePort) bool {
		return p.Name == "bus" && p.Port == 17000 && p.TargetPort.StrVal == "bus"
	}) || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("headless Service %s must publish not-ready addresses and the bus port: %+v", headless.Name, headless.Spec.Ports)
	}
	for name, want := range map[string]string{ // values.yaml's failover
		"PORTICO_CACHE_FAILOVER": "true", "PORTICO_CACHE_FAILOVER_INTERVAL": "500ms", "PORTICO_CACHE_FAIL_AFTER": "3s",
		"PORTICO_CACHE_FAILOVER_LEASE": "2s", "PORTICO_CACHE_CLUSTER_TOPOLOGY_CHECK": "500ms",
	} {
		if got := envValue(t, c, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	ev, ok := env(c, "PORTICO_CACHE_CLUSTER_SECRET")
	switch {
	case ce.secret == "" && ok:
		t.Error("PORTICO_CACHE_CLUSTER_SECRET set without a secret in values")
	case ce.secret != "" && (ev.ValueFrom == nil || ev.ValueFrom.SecretKeyRef == nil):
		t.Errorf("PORTICO_CACHE_CLUSTER_SECRET must come from the Secret %s", ce.secret)
	case ce.secret != "":
		if ref := ev.ValueFrom.SecretKeyRef; ref.Name != ce.secret || ref.Key != ce.secretKey {
			t.Errorf("PORTICO_CACHE_CLUSTER_SECRET from %s/%s, want %s/%s", ref.Name, ref.Key, ce.secret, ce.secretKey)
		}
		if ce.secretValue != "" {
			if s, ok := find[corev1.Secret](objs, "Secret", ce.secret); !ok || string(s.Data[ce.secretKey]) != ce.secretValue {
				t.Errorf("Secret %s does not hold the bus secret of values", ce.secret)
			}
		}
	}

	// kvnode serves the slot map's keyspace, declared once.
	n := 0
	for _, k := range strings.Split(kvCP, ",") {
		if k == cacheKeyspace {
			n++
		}
	}
	if n != 1 {
		t.Errorf("kvnode %s = %q: want %q exactly once", cpKeyspacesEnv, kvCP, cacheKeyspace)
	}

	// The first map: a post-install/post-upgrade hook Job and every pod's
	// init container run the same `cachectl topology init`.
	js := cacheInitJobs(objs)
	if len(js) != 1 || js[0].Name != fullName(initJobLabel) {
		t.Fatalf("want one Job %s, got %d", fullName(initJobLabel), len(js))
	}
	job := js[0].Obj.(*batchv1.Job)
	hooks := strings.Split(job.Annotations["helm.sh/hook"], ",")
	del := strings.Split(job.Annotations["helm.sh/hook-delete-policy"], ",")
	if !slices.Contains(hooks, "post-install") || !slices.Contains(hooks, "post-upgrade") ||
		!slices.Contains(del, "before-hook-creation") || !slices.Contains(del, "hook-succeeded") {
		t.Errorf("Job %s: hook %v, delete policy %v", job.Name, hooks, del)
	}
	if job.Spec.BackoffLimit == nil || job.Spec.ActiveDeadlineSeconds == nil || *job.Spec.ActiveDeadlineSeconds <= 0 {
		t.Errorf("Job %s needs a backoffLimit and a deadline", job.Name)
	}
	pod := job.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever && pod.RestartPolicy != corev1.RestartPolicyOnFailure {
		t.Errorf("Job %s: restartPolicy %q", job.Name, pod.RestartPolicy)
	}
	if selects(t, w.Selector, job.Spec.Template.Labels) {
		t.Errorf("cachenode's selector selects the Job's pods %v (its Services and PDB would too)", job.Spec.Template.Labels)
	}
	jc := pod.Containers[0]
	if jc.Image != c.Image || len(jc.Command) != 1 || jc.Command[0] != binDir+"cachectl" {
		t.Errorf("Job container: image %s, command %v; want %s, %scachectl", jc.Image, jc.Command, c.Image, binDir)
	}
	var wantNodes []string
	for i := range ce.pods() {
		pod := fmt.Sprintf("%s-%d", w.Name, i)
		wantNodes = append(wantNodes, fmt.Sprintf("%s=%s.%s:%d@%d", pod, pod, fqdn(headless.Name), resp, bus))
	}
	checkTopologyInit(t, "Job "+job.Name, jc.Args, kvAddrs, ce, wantNodes)
	inits := w.Template.Spec.InitContainers
	if len(inits) != 1 || inits[0].Image != c.Image || !slices.Equal(inits[0].Command, jc.Command) || !slices.Equal(inits[0].Args, jc.Args) {
		t.Errorf("cachenode needs one init container running the Job's command: %+v", inits)
	}

	if len(ofKind(objs, "NetworkPolicy")) > 0 {
		checkCacheNetworkPolicies(t, objs, w, kv, job)
	}
}

// checkTopologyInit parses cachectl's arguments as cachectl does and builds
// the first map from them as cachectl would: pods 0..primaries-1 own the
// slots, every later pod replicates one of them.
func checkTopologyInit(t *testing.T, where string, args, kvAddrs []string, ce cacheExpect, wantNodes []string) {
	t.Helper()
	flags := map[string]string{}
	i := 0
	for ; i+1 < len(args) && strings.HasPrefix(args[i], "--"); i += 2 {
		flags[args[i]] = args[i+1]
	}
	if flags["--kv-addrs"] != strings.Join(kvAddrs, ",") || flags["--cluster"] != ce.name {
		t.Errorf("%s: cachectl flags %v, want --kv-addrs %s --cluster %s", where, flags, strings.Join(kvAddrs, ","), ce.name)
	}
	if i+2 > len(args) || args[i] != "topology" || args[i+1] != "init" {
		t.Fatalf("%s: want `topology init` after the flags: %q", where, args)
	}
	var nodes []string
	replicas := -1
	for rest := args[i+2:]; len(rest) > 0; rest = rest[2:] {
		if len(rest) < 2 {
			t.Fatalf("%s: dangling %q", where, rest)
		}
		switch rest[0] {
		case "--node":
			nodes = append(nodes, rest[1])
		case "--replicas":
			replicas, _ = strconv.Atoi(rest[1])
		default:
			t.Errorf("%s: unexpected %q", where, rest[0])
		}
	}
	if replicas != ce.replicasPerPrimary {
		t.Errorf("%s: --replicas %d, want %d", where, replicas, ce.replicasPerPrimary)
	}
	if !slices.Equal(nodes, wantNodes) {
		t.Errorf("%s: --node\n%s\nwant every pod in order\n%s", where, strings.Join(nodes, "\n"), strings.Join(wantNodes, "\n"))
	}
	var specs []cluster.NodeSpec
	for _, n := range nodes {
		id, addr, _ := strings.Cut(n, "=")
		hostPort, busPort, _ := strings.Cut(addr, "@")
		host, port, _ := strings.Cut(hostPort, ":")
		p, _ := strconv.Atoi(port)
		b, _ := strconv.Atoi(busPort)
		specs = append(specs, cluster.NodeSpec{ID: id, Host: host, Port: p, BusPort: b})
	}
	m, err := reshard.Initial(specs, replicas)
	if err != nil {
		t.Fatalf("%s: cachectl would refuse these nodes: %v", where, err)
	}
	replicasOf := map[string]int{}
	for i, n := range m.Nodes {
		if primary := i < ce.primaries; primary != (len(n.Slots) > 0) || primary != (n.ReplicaOf == "") {
			t.Errorf("%s: node %d (%s): slots %v, replica of %q; want the first %d pods primaries", where, i, n.ID, n.Slots, n.ReplicaOf, ce.primaries)
		}
		if n.ReplicaOf != "" {
			replicasOf[n.ReplicaOf]++
		}
	}
	for _, n := range m.Nodes[:min(ce.primaries, len(m.Nodes))] {
		if replicasOf[n.ID] != ce.replicasPerPrimary {
			t.Errorf("%s: primary %s has %d replicas, want %d", where, n.ID, replicasOf[n.ID], ce.replicasPerPrimary)
		}
	}
}

// checkCacheNetworkPolicies: the bus is open to the cache pods only, and
// kvnode's HTTP port to the cache pods and the first-map Job.
func checkCacheNetworkPolicies(t *testing.T, objs []object, cache, kv workload, job *batchv1.Job) {
	policyOf := func(w workload) *networkingv1.NetworkPolicy {
		for _, o := range ofKind(objs, "NetworkPolicy") {
			if np := o.Obj.(*networkingv1.NetworkPolicy); selects(t, &np.Spec.PodSelector, w.Template.Labels) {
				return np
			}
		}
		t.Fatalf("no NetworkPolicy selects %s", w.Name)
		return nil
	}
	// admits: some rule opens port to a pod with these labels (same namespace).
	admits := func(np *networkingv1.NetworkPolicy, port int32, lbls map[string]string) bool {
		for _, r := range np.Spec.Ingress {
			if !slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.IntVal == port }) {
				continue
			}
			if len(r.From) == 0 {
				return true
			}
			for _, f := range r.From {
				if f.PodSelector != nil && f.NamespaceSelector == nil && selects(t, f.PodSelector, lbls) {
					return true
				}
			}
		}
		return false
	}
	cnp, knp := policyOf(cache), policyOf(kv)
	if !admits(cnp, 17000, cache.Template.Labels) {
		t.Errorf("NetworkPolicy %s: the cache pods cannot reach each other's bus (17000)", cnp.Name)
	}
	for _, other := range []map[string]string{kv.Template.Labels, job.Spec.Template.Labels} {
		if admits(cnp, 17000, other) {
			t.Errorf("NetworkPolicy %s opens the bus (17000) to %v", cnp.Name, other)
		}
	}
	if !admits(knp, 18400, cache.Template.Labels) || !admits(knp, 18400, job.Spec.Template.Labels) {
		t.Errorf("NetworkPolicy %s: the cache pods and the first-map Job must reach kvnode's HTTP port 18400", knp.Name)
	}
}

// TestCacheClusterNeedsKVNode: the slot map lives in kvnode.
func TestCacheClusterNeedsKVNode(t *testing.T) {
	t.Parallel()
	out := renderFails(t, "--set", "kvnode.enabled=false")
	if !strings.Contains(out, "cachenode.cluster.enabled keeps the cache's slot map in kvnode's Raft tier, but kvnode.enabled is false") {
		t.Errorf("kvnode disabled under a cache cluster: %s", out)
	}
	// Standalone cache nodes need no kvnode; neither does no cache.
	for _, set := range []string{"kvnode.enabled=false,cachenode.cluster.enabled=false", "kvnode.enabled=false,cachenode.enabled=false"} {
		mustDecode(t, render(t, chartDir(t), nil, "--set", set))
	}
}

// TestCacheStandalone: cluster.enabled=false renders the plain nodes of
// before: `replicas` pods, no cluster env, no bus, no Job, no init.
func TestCacheStandalone(t *testing.T) {
	t.Parallel()
	objs := mustDecode(t, render(t, chartDir(t), nil, "--set", "cachenode.cluster.enabled=false,cachenode.replicas=2"))
	vals, appVersion := chartValues(t)
	img := str(vals, "image", "repository") + ":" + appVersion
	checkRender(t, objs, expect{
		images:          map[string]string{"cachenode": img, "kvnode": img},
		envoyGroup:      "default",
		envoyService:    corev1.ServiceTypeLoadBalancer,
		controlReplicas: 2,
		kvReplicas:      3,
		cache:           cacheExpect{standalonePods: 2},
	})
}

// TestCacheClusterShapes: other sizes, an existing bus Secret, cpKeyspaces
// already naming "cache", failover off.
func TestCacheClusterShapes(t *testing.T) {
	t.Parallel()
	objs := mustDecode(t, render(t, chartDir(t), nil, "--set", strings.Join([]string{
		"cachenode.cluster.name=orders", "cachenode.cluster.primaries=5", "cachenode.cluster.replicasPerPrimary=0",
		"cachenode.cluster.existingSecret=cache-bus", "cachenode.cluster.existingSecretKey=token",
		"cachenode.cluster.secret=ignored-with-existingSecret",
		"kvnode.replicas=5", "kvnode.cpKeyspaces={locks,cache}",
	}, ",")))
	var by = map[string]workload{}
	for _, w := range workloads(objs) {
		by[w.Component] = w
	}
	ce := cacheExpect{cluster: true, name: "orders", primaries: 5, replicasPerPrimary: 0, secret: "cache-bus", secretKey: "token"}
	checkCache(t, objs, by, expect{cache: ce, kvReplicas: 5})
	if _, ok := find[corev1.Secret](objs, "Secret", fullName("cachenode-cluster")); ok {
		t.Error("the chart renders a bus Secret although existingSecret is set")
	}
	if got := envValue(t, by["kvnode"].Template.Spec.Containers[0], cpKeyspacesEnv); got != "locks,cache" {
		t.Errorf("%s = %q, want %q (cache declared once, the user's order kept)", cpKeyspacesEnv, got, "locks,cache")
	}

	objs = mustDecode(t, render(t, chartDir(t), nil, "--set", "cachenode.cluster.failover.enabled=false,cachenode.cluster.failover.lease=9s"))
	for _, w := range workloads(objs) {
		if w.Component != "cachenode" {
			continue
		}
		c := w.Template.Spec.Containers[0]
		if got := envValue(t, c, "PORTICO_CACHE_FAILOVER"); got != "false" {
			t.Errorf("PORTICO_CACHE_FAILOVER = %q with failover off", got)
		}
		for _, name := range []string{"PORTICO_CACHE_FAILOVER_INTERVAL", "PORTICO_CACHE_FAIL_AFTER", "PORTICO_CACHE_FAILOVER_LEASE"} {
			if _, ok := env(c, name); ok {
				t.Errorf("%s set with failover off", name)
			}
		}
	}
}

// TestCacheClusterFailoverTimings: the binary's rule interval < lease <
// failAfter is an install-time error, not a crash loop.
func TestCacheClusterFailoverTimings(t *testing.T) {
	t.Parallel()
	for set, want := range map[string]string{
		"cachenode.cluster.failover.lease=3s":                                              "lease (3s) must be shorter than failAfter (3s)",
		"cachenode.cluster.failover.lease=1m,cachenode.cluster.failover.failAfter=59.5s":   "lease (1m) must be shorter than failAfter (59.5s)",
		"cachenode.cluster.failover.lease=500ms":                                           "lease (500ms) must be longer than interval (500ms)",
		"cachenode.cluster.failover.interval=1m,cachenode.cluster.failover.failAfter=1h":   "lease (2s) must be longer than interval (1m)",
		"cachenode.cluster.failover.interval=1500ms,cachenode.cluster.failover.lease=1.5s": "lease (1.5s) must be longer than interval (1500ms)",
	} {
		if out := renderFails(t, "--set", set); !strings.Contains(out, want) {
			t.Errorf("--set %s: want %q, got %s", set, want, out)
		}
	}
	mustDecode(t, render(t, chartDir(t), nil, "--set",
		"cachenode.cluster.failover.interval=250ms,cachenode.cluster.failover.lease=1m0.5s,cachenode.cluster.failover.failAfter=1m1s"))
}

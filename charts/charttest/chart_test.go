package charttest

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/portico-io/portico/envoy/bootstrap"
)

// Components of the chart: Portico's own, and the bundled trial databases.
var (
	porticoComponents = []string{"controlplane", "envoy", "extauthz", "ratelimitsvc", "scheduler", "kvnode", "cachenode"}
	bundledComponents = []string{"postgresql", "redis"}
	// Deployments scaled by an HPA when autoscaling is on (the default).
	autoscaled = []string{"envoy", "extauthz", "ratelimitsvc"}
	// StatefulSets whose data lives on per-pod volumes.
	stateful = []string{"kvnode", "cachenode"}
)

const (
	componentLabel = "app.kubernetes.io/component"
	binDir         = "/usr/local/bin/" // where the Dockerfile puts every binary
	clusterDomain  = "cluster.local"
)

func allEnabledValues(t testing.TB) string {
	p, err := filepath.Abs(filepath.Join("testdata", "all-enabled.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// expect says what a render must contain beyond the universal invariants.
type expect struct {
	images          map[string]string // component -> image of its main container
	envoyGroup      string
	envoyService    corev1.ServiceType
	controlReplicas int32
	kvReplicas      int
	cache           cacheExpect
	optional        bool // NetworkPolicies, ServiceMonitors and bundled deps rendered
	disabled        string
	tls             tlsExpect
	adminToken      adminTokenExpect
}

func TestHelmLint(t *testing.T) {
	t.Parallel()
	runHelm(t, "lint", "--strict", chartDir(t), "--kube-version", kubeVersion)
	runHelm(t, "lint", "--strict", chartDir(t), "--kube-version", kubeVersion, "--values", allEnabledValues(t))
}

func TestRenderDefaultValues(t *testing.T) {
	t.Parallel()
	objs := mustDecode(t, render(t, chartDir(t), nil))
	vals, appVersion := chartValues(t)
	porticoImage := str(vals, "image", "repository") + ":" + appVersion
	e := expect{
		images: map[string]string{
			"controlplane": porticoImage, "extauthz": porticoImage, "ratelimitsvc": porticoImage,
			"scheduler": porticoImage, "kvnode": porticoImage, "cachenode": porticoImage,
			"envoy": str(vals, "envoy", "image", "repository") + ":" + str(vals, "envoy", "image", "tag"),
		},
		envoyGroup:      "default",
		envoyService:    corev1.ServiceTypeLoadBalancer,
		controlReplicas: 2,
		kvReplicas:      3,
		cache:           defaultCache,
	}
	checkRender(t, objs, e)
	if n := len(ofKind(objs, "ServiceMonitor")); n != 0 {
		t.Errorf("%d ServiceMonitor rendered by default; they are optional", n)
	}
	// NetworkPolicies are a secure default (secure_defaults_test.go).
	if n := len(ofKind(objs, "NetworkPolicy")); n != len(porticoComponents) {
		t.Errorf("%d NetworkPolicies rendered by default, want one per component (%d)", n, len(porticoComponents))
	}
	for _, c := range bundledComponents {
		if n := len(ofComponent(objs, c)); n != 0 {
			t.Errorf("bundled %s rendered by default: PostgreSQL and Redis are external by default", c)
		}
	}
}

func TestRenderEverythingEnabled(t *testing.T) {
	t.Parallel()
	objs := mustDecode(t, render(t, chartDir(t), []string{allEnabledValues(t)}))
	checkRender(t, objs, allEnabledExpect())
}

func allEnabledExpect() expect {
	return expect{
		images: map[string]string{
			"controlplane": "registry.test/portico:cp-test",
			"envoy":        "registry.test/envoy:v1.40.0-test",
			"extauthz":     "registry.test/extauthz-custom:9.9.9",
			"ratelimitsvc": "registry.test/portico@sha256:2222222222222222222222222222222222222222222222222222222222222222",
			"scheduler":    "registry.test/portico:sched-test",
			"kvnode":       "registry.test/portico:kv-test",
			"cachenode":    "registry.test/portico:cache-test",
			"postgresql":   "registry.test/postgres:17.1",
			"redis":        "registry.test/redis@sha256:1111111111111111111111111111111111111111111111111111111111111111",
		},
		envoyGroup:      "canary",
		envoyService:    corev1.ServiceTypeNodePort,
		controlReplicas: 3,
		kvReplicas:      5,
		cache:           allEnabledCache,
		optional:        true,
	}
}

// TestDisablingAComponentRemovesAllItsObjects turns each component off in
// the everything-enabled render: none of its objects may remain, and every
// other object must still be there.
func TestDisablingAComponentRemovesAllItsObjects(t *testing.T) {
	t.Parallel()
	full := mustDecode(t, render(t, chartDir(t), []string{allEnabledValues(t)}))
	for _, c := range append(slices.Clone(porticoComponents), bundledComponents...) {
		t.Run(c, func(t *testing.T) {
			flag := c + ".enabled=false"
			if slices.Contains(bundledComponents, c) {
				flag = c + ".bundled.enabled=false"
			}
			e := allEnabledExpect()
			full := full
			if c == "kvnode" {
				// The cache cluster keeps its slot map in kvnode (without
				// it the chart refuses to render): compare standalone
				// cache renders.
				standalone := "cachenode.cluster.enabled=false"
				full = mustDecode(t, render(t, chartDir(t), []string{allEnabledValues(t)}, "--set", standalone))
				flag += "," + standalone
				e.cache = cacheExpect{standalonePods: allEnabledCache.standalonePods}
			}
			objs := mustDecode(t, render(t, chartDir(t), []string{allEnabledValues(t)}, "--set", flag))
			if len(ofComponent(full, c)) == 0 {
				t.Fatalf("the full render has no objects of %s", c)
			}
			left := map[string]bool{}
			for _, o := range objs {
				left[o.Kind+"/"+o.Name] = true
				if o.meta().GetLabels()[componentLabel] == c || belongsByName(o.Name, c) {
					t.Errorf("%s/%s is still rendered with %s", o.Kind, o.Name, flag)
				}
			}
			for _, o := range full {
				owner := o.meta().GetLabels()[componentLabel]
				if owner == c || belongsByName(o.Name, c) || (c == "postgresql" && o.Name == release+"-database") {
					continue
				}
				if !left[o.Kind+"/"+o.Name] {
					t.Errorf("%s/%s (component %q) disappeared with %s", o.Kind, o.Name, owner, flag)
				}
			}
			e.disabled = c
			checkRender(t, objs, e)
		})
	}
}

func belongsByName(name, component string) bool {
	prefix := release + "-" + component
	return name == prefix || strings.HasPrefix(name, prefix+"-")
}

func mustDecode(t testing.TB, stream []byte) []object {
	t.Helper()
	objs, err := decodeAll(stream)
	if err != nil {
		t.Fatalf("strict decode of the rendered chart:\n%v", err)
	}
	if len(objs) == 0 {
		t.Fatal("nothing rendered")
	}
	seen := map[string]bool{}
	for _, o := range objs {
		if seen[o.Kind+"/"+o.Name] {
			t.Errorf("%s/%s rendered twice", o.Kind, o.Name)
		}
		seen[o.Kind+"/"+o.Name] = true
	}
	return objs
}

// chartValues reads values.yaml and the chart's appVersion.
func chartValues(t testing.TB) (map[string]any, string) {
	t.Helper()
	var vals map[string]any
	readYAML(t, filepath.Join(chartDir(t), "values.yaml"), &vals)
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	readYAML(t, filepath.Join(chartDir(t), "Chart.yaml"), &chart)
	if chart.AppVersion == "" {
		t.Fatal("Chart.yaml has no appVersion")
	}
	return vals, chart.AppVersion
}

func readYAML(t testing.TB, path string, into any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func str(m map[string]any, path ...string) string {
	var cur any = m
	for _, p := range path {
		mm, _ := cur.(map[string]any)
		cur = mm[p]
	}
	s, _ := cur.(string)
	return s
}

func ofKind(objs []object, kind string) []object {
	var out []object
	for _, o := range objs {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

func ofComponent(objs []object, c string) []object {
	var out []object
	for _, o := range objs {
		if o.meta().GetLabels()[componentLabel] == c {
			out = append(out, o)
		}
	}
	return out
}

func find[T any](objs []object, kind, name string) (*T, bool) {
	for _, o := range objs {
		if o.Kind == kind && o.Name == name {
			v, ok := any(o.Obj).(*T)
			return v, ok
		}
	}
	return nil, false
}

func fullName(c string) string { return release + "-" + c }

func fqdn(svc string) string {
	return fmt.Sprintf("%s.%s.svc.%s", svc, namespace, clusterDomain)
}

// workload is a Deployment or StatefulSet reduced to what the checks need.
type workload struct {
	Kind, Name, Component string
	Replicas              *int32
	Selector              *metav1.LabelSelector
	Template              corev1.PodTemplateSpec
	Claims                []corev1.PersistentVolumeClaim
	ServiceName           string
}

func workloads(objs []object) []workload {
	var out []workload
	for _, o := range objs {
		switch w := o.Obj.(type) {
		case *appsv1.Deployment:
			out = append(out, workload{Kind: o.Kind, Name: o.Name, Component: w.Spec.Template.Labels[componentLabel],
				Replicas: w.Spec.Replicas, Selector: w.Spec.Selector, Template: w.Spec.Template})
		case *appsv1.StatefulSet:
			out = append(out, workload{Kind: o.Kind, Name: o.Name, Component: w.Spec.Template.Labels[componentLabel],
				Replicas: w.Spec.Replicas, Selector: w.Spec.Selector, Template: w.Spec.Template,
				Claims: w.Spec.VolumeClaimTemplates, ServiceName: w.Spec.ServiceName})
		}
	}
	return out
}

func selects(t testing.TB, sel *metav1.LabelSelector, lbls map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("selector %v: %v", sel, err)
		return false
	}
	return !s.Empty() && s.Matches(labels.Set(lbls))
}

func env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func envValue(t testing.TB, c corev1.Container, name string) string {
	t.Helper()
	e, ok := env(c, name)
	if !ok {
		t.Errorf("container %s: no env %s", c.Name, name)
	}
	return e.Value
}

func containerPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// checkRender runs every invariant over one render.
func checkRender(t *testing.T, objs []object, e expect) {
	t.Helper()
	ws := workloads(objs)
	byComponent := map[string]workload{}
	for _, w := range ws {
		if w.Component == "" {
			t.Errorf("%s/%s: pod template without %s label", w.Kind, w.Name, componentLabel)
		}
		byComponent[w.Component] = w
	}
	enabled := func(c string) bool {
		if c == e.disabled {
			return false
		}
		return slices.Contains(porticoComponents, c) || e.optional
	}
	for _, c := range append(slices.Clone(porticoComponents), bundledComponents...) {
		_, ok := byComponent[c]
		if ok != enabled(c) {
			t.Errorf("component %s rendered = %v, want %v", c, ok, enabled(c))
		}
	}

	secrets, configMaps := map[string]*corev1.Secret{}, map[string]*corev1.ConfigMap{}
	for _, o := range objs {
		switch v := o.Obj.(type) {
		case *corev1.Secret:
			secrets[o.Name] = v
		case *corev1.ConfigMap:
			configMaps[o.Name] = v
		}
	}
	// Secrets the operator creates: the database URL on a default install,
	// and the Redis password and job secrets the all-enabled values name.
	external := map[string]bool{}
	if !e.optional || e.disabled == "postgresql" {
		external[fullName("database")] = true
	}
	if e.optional {
		external["redis-auth"] = true
		external["scheduler-job-secrets"] = true
	}
	// Certificate Secrets are written at install time (hook Job,
	// cert-manager or the user), never rendered; checkTLS follows them.
	for _, c := range porticoComponents {
		external[e.tls.secret(c)] = true
	}
	// So is the admin token's (created once by porticoctl, or the user's).
	external[e.adminToken.secret(e.tls)] = true

	for _, w := range ws {
		t.Run(w.Kind+"/"+w.Name, func(t *testing.T) {
			checkPodTemplate(t, w, secrets, configMaps, external)
			if !selects(t, w.Selector, w.Template.Labels) {
				t.Errorf("selector %v does not select its own pods %v", w.Selector, w.Template.Labels)
			}
			if e.optional && !slices.ContainsFunc(w.Template.Spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == "regcred" }) {
				t.Errorf("imagePullSecrets from values not applied: %v", w.Template.Spec.ImagePullSecrets)
			}
			if want, ok := e.images[w.Component]; ok {
				if got := w.Template.Spec.Containers[0].Image; got != want {
					t.Errorf("image = %q, want %q (from values)", got, want)
				}
			}
		})
	}
	checkJobs(t, objs, secrets, configMaps, external, e)
	checkPDBs(t, objs, ws)
	checkHPAs(t, objs, ws)
	checkServices(t, objs, ws)
	checkStatefulSets(t, objs, ws)
	if len(ofKind(objs, "NetworkPolicy")) > 0 {
		checkNetworkPolicies(t, objs, ws, e)
	}
	if e.optional {
		checkServiceMonitors(t, objs, ws, e)
	}
	checkWiring(t, objs, byComponent, e)
	checkTLS(t, objs, e)
	checkAdminToken(t, objs, e)
}

func checkPodTemplate(t *testing.T, w workload, secrets map[string]*corev1.Secret, configMaps map[string]*corev1.ConfigMap, external map[string]bool) {
	pod := w.Template.Spec
	psc := pod.SecurityContext
	if psc == nil {
		t.Fatal("no pod securityContext")
	}
	// Only the certificate sync pods talk to the Kubernetes API (checkTLSSync
	// holds their Role to the named Secrets).
	if talks := (w.Component == tlsSyncComponent || w.Component == adminTokenComponent) && pod.ServiceAccountName != ""; talks != isTrue(pod.AutomountServiceAccountToken) {
		t.Errorf("automountServiceAccountToken = %v: only the certificate sync pods, with their own service account, get a token", isTrue(pod.AutomountServiceAccountToken))
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
		if s := v.Secret; s != nil && secrets[s.SecretName] == nil && !external[s.SecretName] {
			t.Errorf("volume %s: Secret %q is not rendered", v.Name, s.SecretName)
		}
		if cm := v.ConfigMap; cm != nil {
			if configMaps[cm.Name] == nil {
				t.Errorf("volume %s: ConfigMap %q is not rendered", v.Name, cm.Name)
			}
		}
	}
	claims := map[string]bool{}
	for _, c := range w.Claims {
		claims[c.Name] = true
	}
	runsToCompletion := w.Kind == "Job" || w.Kind == "CronJob"
	porticoBinary := slices.Contains(porticoComponents, w.Component) && w.Component != "envoy" || runsToCompletion

	for i, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		where := "container " + c.Name
		// Probes: readiness means "config loaded" for Portico binaries.
		// Init containers and Jobs run to completion (and the API server
		// refuses probes on init containers).
		switch {
		case i < len(pod.InitContainers):
			if c.ReadinessProbe != nil || c.LivenessProbe != nil || c.StartupProbe != nil {
				t.Errorf("init %s: the API server refuses probes on init containers", where)
			}
		case runsToCompletion:
		case c.ReadinessProbe == nil || c.LivenessProbe == nil:
			t.Errorf("%s: readiness and liveness probes are required", where)
		case porticoBinary && (c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz"):
			t.Errorf("%s: readiness probe must GET /readyz, got %+v", where, c.ReadinessProbe)
		}
		if porticoBinary {
			if len(c.Command) != 1 || !strings.HasPrefix(c.Command[0], binDir) {
				t.Errorf("%s: command %v must be one binary under %s", where, c.Command, binDir)
			} else if bin := strings.TrimPrefix(c.Command[0], binDir); !cmdExists(t, bin) {
				t.Errorf("%s: no */cmd/%s in the repository (the image has only those)", where, bin)
			}
		}
		// Resources.
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
			if req.IsZero() || lim.IsZero() {
				t.Errorf("%s: %s request and limit are required", where, r)
			} else if req.Cmp(lim) > 0 {
				t.Errorf("%s: %s request %s above limit %s", where, r, req.String(), lim.String())
			}
		}
		// Restricted security context (pod-level values count where the
		// field exists there).
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("%s: no securityContext", where)
			continue
		}
		if !isTrue(sc.RunAsNonRoot) && !isTrue(psc.RunAsNonRoot) {
			t.Errorf("%s: runAsNonRoot must be true", where)
		}
		for _, uid := range []*int64{sc.RunAsUser, psc.RunAsUser} {
			if uid != nil && *uid == 0 {
				t.Errorf("%s: runs as uid 0", where)
			}
		}
		if !isTrue(sc.ReadOnlyRootFilesystem) {
			t.Errorf("%s: readOnlyRootFilesystem must be true", where)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation must be false", where)
		}
		if isTrue(sc.Privileged) {
			t.Errorf("%s: privileged", where)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: capabilities must drop ALL and add none, got %+v", where, sc.Capabilities)
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = psc.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: seccompProfile must be RuntimeDefault", where)
		}
		// Mounts exist; every directory the process writes is a writable
		// volume (the root filesystem is read-only).
		mounts := map[string]corev1.VolumeMount{}
		for _, m := range c.VolumeMounts {
			if _, ok := volumes[m.Name]; !ok && !claims[m.Name] {
				t.Errorf("%s: mount %s has no volume", where, m.Name)
			}
			mounts[m.MountPath] = m
		}
		names := map[string]bool{}
		for _, ev := range c.Env {
			if names[ev.Name] {
				t.Errorf("%s: env %s set twice", where, ev.Name)
			}
			names[ev.Name] = true
			if ev.ValueFrom != nil && ev.ValueFrom.SecretKeyRef != nil {
				ref := ev.ValueFrom.SecretKeyRef
				if s := secrets[ref.Name]; s == nil && !external[ref.Name] {
					t.Errorf("%s: env %s reads Secret %q, which is not rendered", where, ev.Name, ref.Name)
				} else if s != nil && !hasKey(s, ref.Key) {
					t.Errorf("%s: env %s reads key %q, missing from Secret %s", where, ev.Name, ref.Key, ref.Name)
				}
			}
			writable := strings.HasSuffix(ev.Name, "_STATE_DIR") || strings.HasSuffix(ev.Name, "_DATA_DIR") || ev.Name == "PGDATA"
			// PORTICO_GATEWAY_TLS_* are paths in the Envoy pods (checkEnvoyTLS).
			readable := strings.HasSuffix(ev.Name, "_CONFIG_DIR") || strings.HasSuffix(ev.Name, "_FILE") && !strings.HasPrefix(ev.Name, "PORTICO_GATEWAY_TLS_")
			if writable || readable {
				m, ok := mountFor(mounts, ev.Value)
				if !ok {
					t.Errorf("%s: %s=%s is on no volume", where, ev.Name, ev.Value)
				} else if writable && m.ReadOnly {
					t.Errorf("%s: %s=%s is on read-only mount %s", where, ev.Name, ev.Value, m.Name)
				}
			}
		}
		if c.WorkingDir != "" {
			if m, ok := mountFor(mounts, c.WorkingDir); !ok || m.ReadOnly {
				t.Errorf("%s: workingDir %s is not on a writable volume", where, c.WorkingDir)
			}
		}
	}
}

func hasKey(s *corev1.Secret, k string) bool {
	if _, ok := s.Data[k]; ok {
		return true
	}
	_, ok := s.StringData[k]
	return ok
}

func isTrue(b *bool) bool { return b != nil && *b }

func mountFor(mounts map[string]corev1.VolumeMount, path string) (corev1.VolumeMount, bool) {
	for mp, m := range mounts {
		if path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/") {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

func cmdExists(t testing.TB, bin string) bool {
	matches, err := filepath.Glob(filepath.Join(repoRoot(t), "*", "cmd", bin))
	return err == nil && len(matches) > 0
}

func checkPDBs(t *testing.T, objs []object, ws []workload) {
	pdbs := ofKind(objs, "PodDisruptionBudget")
	for _, w := range ws {
		if !slices.Contains(porticoComponents, w.Component) {
			continue // the bundled trial databases are single instances
		}
		n := 0
		for _, o := range pdbs {
			p := o.Obj.(*policyv1.PodDisruptionBudget)
			if selects(t, p.Spec.Selector, w.Template.Labels) {
				n++
				if p.Spec.MaxUnavailable == nil && p.Spec.MinAvailable == nil {
					t.Errorf("PDB %s: neither maxUnavailable nor minAvailable", o.Name)
				}
			}
		}
		if n != 1 {
			t.Errorf("%s/%s: %d PDBs select its pods, want 1", w.Kind, w.Name, n)
		}
	}
	for _, o := range pdbs {
		p := o.Obj.(*policyv1.PodDisruptionBudget)
		if !slices.ContainsFunc(ws, func(w workload) bool { return selects(t, p.Spec.Selector, w.Template.Labels) }) {
			t.Errorf("PDB %s selects no workload", o.Name)
		}
	}
}

func checkHPAs(t *testing.T, objs []object, ws []workload) {
	hpas := map[string]*autoscalingv2.HorizontalPodAutoscaler{}
	for _, o := range ofKind(objs, "HorizontalPodAutoscaler") {
		h := o.Obj.(*autoscalingv2.HorizontalPodAutoscaler)
		ref := h.Spec.ScaleTargetRef
		if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" {
			t.Errorf("HPA %s targets %s %s", o.Name, ref.APIVersion, ref.Kind)
		}
		hpas[ref.Name] = h
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
			t.Errorf("HPA %s: minReplicas %v, maxReplicas %d", o.Name, h.Spec.MinReplicas, h.Spec.MaxReplicas)
		}
		if len(h.Spec.Metrics) == 0 {
			t.Errorf("HPA %s: no metrics", o.Name)
		}
	}
	deployments := map[string]bool{}
	for _, w := range ws {
		if w.Kind != "Deployment" {
			continue
		}
		deployments[w.Name] = true
		_, scaled := hpas[w.Name]
		if slices.Contains(autoscaled, w.Component) && !scaled {
			t.Errorf("Deployment %s has no HPA", w.Name)
		}
		if scaled && w.Replicas != nil {
			t.Errorf("Deployment %s sets replicas although an HPA owns them", w.Name)
		}
	}
	for name := range hpas {
		if !deployments[name] {
			t.Errorf("an HPA targets Deployment %s, which is not rendered", name)
		}
	}
}

// checkServices: every Service selects pods, and its target ports exist on
// them.
func checkServices(t *testing.T, objs []object, ws []workload) {
	for _, o := range ofKind(objs, "Service") {
		svc := o.Obj.(*corev1.Service)
		var pods []workload
		for _, w := range ws {
			if len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.Template.Labels)) {
				pods = append(pods, w)
			}
		}
		if len(pods) == 0 {
			t.Errorf("Service %s selects no pods", o.Name)
			continue
		}
		for _, p := range svc.Spec.Ports {
			for _, w := range pods {
				found := false
				for _, c := range w.Template.Spec.Containers {
					for _, cp := range c.Ports {
						if (p.TargetPort.StrVal != "" && cp.Name == p.TargetPort.StrVal) || (p.TargetPort.StrVal == "" && cp.ContainerPort == p.TargetPort.IntVal) {
							found = true
						}
					}
				}
				if !found {
					t.Errorf("Service %s port %s: target %s is not a port of %s", o.Name, p.Name, p.TargetPort.String(), w.Name)
				}
			}
		}
	}
}

func checkStatefulSets(t *testing.T, objs []object, ws []workload) {
	for _, w := range ws {
		if !slices.Contains(stateful, w.Component) {
			continue
		}
		if w.Kind != "StatefulSet" {
			t.Errorf("%s is a %s, want a StatefulSet", w.Component, w.Kind)
			continue
		}
		if len(w.Claims) == 0 {
			t.Errorf("StatefulSet %s has no volumeClaimTemplates", w.Name)
		}
		for _, claim := range w.Claims {
			if claim.Spec.Resources.Requests.Storage().IsZero() {
				t.Errorf("StatefulSet %s claim %s: no storage request", w.Name, claim.Name)
			}
			mounted := false
			for _, m := range w.Template.Spec.Containers[0].VolumeMounts {
				mounted = mounted || (m.Name == claim.Name && !m.ReadOnly)
			}
			if !mounted {
				t.Errorf("StatefulSet %s: claim %s is not mounted writable", w.Name, claim.Name)
			}
		}
		svc, ok := find[corev1.Service](objs, "Service", w.ServiceName)
		if !ok {
			t.Errorf("StatefulSet %s: serviceName %q is not rendered", w.Name, w.ServiceName)
			continue
		}
		if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
			t.Errorf("Service %s must be headless and publish not-ready addresses (peers find each other before they are ready)", svc.Name)
		}
	}
}

func checkNetworkPolicies(t *testing.T, objs []object, ws []workload, e expect) {
	nps := ofKind(objs, "NetworkPolicy")
	for _, w := range ws {
		var sel []*networkingv1.NetworkPolicy
		for _, o := range nps {
			np := o.Obj.(*networkingv1.NetworkPolicy)
			if selects(t, &np.Spec.PodSelector, w.Template.Labels) {
				sel = append(sel, np)
			}
		}
		if len(sel) != 1 {
			t.Errorf("%s/%s: %d NetworkPolicies select it, want 1", w.Kind, w.Name, len(sel))
			continue
		}
		if w.Component != "envoy" {
			continue
		}
		listener := containerPort(w.Template.Spec.Containers[0], "http")
		open := false
		for _, r := range sel[0].Spec.Ingress {
			for _, p := range r.Ports {
				open = open || (len(r.From) == 0 && p.Port != nil && p.Port.IntVal == listener)
			}
		}
		if !open {
			t.Errorf("NetworkPolicy %s does not open Envoy's listener port %d to all", sel[0].Name, listener)
		}
	}
	for _, o := range nps {
		np := o.Obj.(*networkingv1.NetworkPolicy)
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			t.Errorf("NetworkPolicy %s: no Ingress policy type", o.Name)
		}
		for _, r := range np.Spec.Ingress {
			if len(r.From) == 0 && np.Spec.PodSelector.MatchLabels[componentLabel] == "controlplane" {
				for _, p := range r.Ports {
					if p.Port != nil && p.Port.IntVal == 18080 {
						t.Errorf("NetworkPolicy %s opens the admin API to everyone", o.Name)
					}
				}
			}
		}
	}
}

func checkServiceMonitors(t *testing.T, objs []object, ws []workload, e expect) {
	monitored := map[string]bool{}
	for _, o := range ofKind(objs, "ServiceMonitor") {
		sm := o.Obj.(*monitoringv1.ServiceMonitor)
		if !slices.Contains(sm.Spec.NamespaceSelector.MatchNames, namespace) {
			t.Errorf("ServiceMonitor %s does not look in %s", o.Name, namespace)
		}
		if sm.Labels["release"] != "prometheus" {
			t.Errorf("ServiceMonitor %s: serviceMonitor.labels not applied: %v", o.Name, sm.Labels)
		}
		var svcs []*corev1.Service
		for _, so := range ofKind(objs, "Service") {
			if svc := so.Obj.(*corev1.Service); selects(t, &sm.Spec.Selector, svc.Labels) {
				svcs = append(svcs, svc)
			}
		}
		if len(svcs) != 1 {
			t.Errorf("ServiceMonitor %s selects %d Services, want 1", o.Name, len(svcs))
			continue
		}
		for _, ep := range sm.Spec.Endpoints {
			if !slices.ContainsFunc(svcs[0].Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
				t.Errorf("ServiceMonitor %s: port %q is not a port of Service %s", o.Name, ep.Port, svcs[0].Name)
			}
			if ep.Path == "" {
				t.Errorf("ServiceMonitor %s: no path", o.Name)
			}
		}
		monitored[sm.Labels[componentLabel]] = true
	}
	for _, w := range ws {
		if slices.Contains(porticoComponents, w.Component) && !monitored[w.Component] {
			t.Errorf("no ServiceMonitor for %s", w.Component)
		}
	}
}

// checkWiring follows the addresses components give each other.
func checkWiring(t *testing.T, objs []object, by map[string]workload, e expect) {
	main := func(c string) (corev1.Container, bool) {
		w, ok := by[c]
		if !ok {
			return corev1.Container{}, false
		}
		return w.Template.Spec.Containers[0], true
	}
	// The headless Service named like the component, with the port.
	serviceAddr := func(component, port string, headless bool) string {
		svc, ok := find[corev1.Service](objs, "Service", fullName(component))
		if !ok {
			t.Errorf("no Service %s", fullName(component))
			return ""
		}
		if headless && svc.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("Service %s must be headless: Envoy resolves every pod (STRICT_DNS) and balances over them", svc.Name)
		}
		for _, p := range svc.Spec.Ports {
			if p.Name == port {
				return fqdn(svc.Name) + ":" + strconv.Itoa(int(p.Port))
			}
		}
		t.Errorf("Service %s has no port %s", svc.Name, port)
		return ""
	}

	if cp, ok := main("controlplane"); ok {
		if cp.Name != "controlplane" {
			t.Errorf("controlplane's first container is %s", cp.Name)
		}
		if r := by["controlplane"].Replicas; r == nil || *r < 2 || *r != e.controlReplicas {
			t.Errorf("controlplane replicas = %v, want %d (≥ 2)", r, e.controlReplicas)
		}
		if e.disabled != "extauthz" {
			if got, want := envValue(t, cp, "PORTICO_EXTAUTHZ_ADDR"), serviceAddr("extauthz", "grpc", true); got != want {
				t.Errorf("PORTICO_EXTAUTHZ_ADDR = %q, want %q", got, want)
			}
		}
		if e.disabled != "ratelimitsvc" {
			if got, want := envValue(t, cp, "PORTICO_RATELIMIT_ADDR"), serviceAddr("ratelimitsvc", "grpc", true); got != want {
				t.Errorf("PORTICO_RATELIMIT_ADDR = %q, want %q", got, want)
			}
		}
		if gw, ok := main("envoy"); ok {
			if got := envValue(t, cp, "PORTICO_ENVOY_LISTENER_PORT"); got != strconv.Itoa(int(containerPort(gw, "http"))) {
				t.Errorf("PORTICO_ENVOY_LISTENER_PORT = %s, Envoy's http port is %d", got, containerPort(gw, "http"))
			}
		}
		xds := serviceAddr("controlplane", "xds", false)
		if !strings.HasSuffix(xds, ":18000") {
			t.Errorf("control plane xDS Service address %q", xds)
		}
		for _, c := range []string{"extauthz", "ratelimitsvc"} {
			if ct, ok := main(c); ok {
				if got := envValue(t, ct, "PORTICO_XDS_ADDR"); got != xds {
					t.Errorf("%s PORTICO_XDS_ADDR = %q, want %q", c, got, xds)
				}
				if got := envValue(t, ct, "PORTICO_XDS_PROTOCOL"); got != "delta" {
					t.Errorf("%s PORTICO_XDS_PROTOCOL = %q, want delta", c, got)
				}
			}
		}
		for _, c := range []string{"controlplane", "scheduler"} {
			if ct, ok := main(c); ok {
				ev, _ := env(ct, "PORTICO_DATABASE_URL")
				if ev.ValueFrom == nil || ev.ValueFrom.SecretKeyRef == nil {
					t.Errorf("%s: PORTICO_DATABASE_URL must come from a Secret", c)
				}
			}
		}
	}
	if e.optional && e.disabled != "postgresql" {
		s, ok := find[corev1.Secret](objs, "Secret", fullName("database"))
		if !ok {
			t.Error("bundled Postgres without the database Secret")
		} else if u, err := url.Parse(string(s.Data["database-url"])); err != nil || u.Host != fullName("postgresql")+":5432" {
			t.Errorf("database-url (%v) does not point at the bundled Postgres Service", err)
		} else if pw, _ := u.User.Password(); pw == "" || pw != string(s.Data["postgres-password"]) {
			t.Errorf("database-url password does not match the bundled Postgres password")
		}
	}
	if rl, ok := main("ratelimitsvc"); ok && e.optional && e.disabled != "redis" {
		if got, want := envValue(t, rl, "PORTICO_REDIS_ADDR"), fullName("redis")+":6379"; got != want {
			t.Errorf("PORTICO_REDIS_ADDR = %q, want %q", got, want)
		}
	}
	if gw, ok := main("envoy"); ok {
		checkEnvoy(t, objs, by["envoy"], gw, e)
	}
	if kv, ok := main("kvnode"); ok {
		checkKVNode(t, by["kvnode"], kv, e)
	}
	if cn, ok := main("cachenode"); ok {
		checkCacheNode(t, cn)
		checkCache(t, objs, by, e)
	}
}

func checkEnvoy(t *testing.T, objs []object, w workload, c corev1.Container, e expect) {
	pod := w.Template.Spec
	args := strings.Join(c.Args, " ")
	arg := func(flag string) string {
		for i, a := range c.Args {
			if a == flag && i+1 < len(c.Args) {
				return c.Args[i+1]
			}
		}
		t.Errorf("envoy args %q lack %s", args, flag)
		return ""
	}
	drain, err := strconv.Atoi(arg("--drain-time-s"))
	if err != nil || drain <= 0 {
		t.Errorf("--drain-time-s %v", err)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= int64(drain) {
		t.Errorf("terminationGracePeriodSeconds %v must exceed the drain time %d", g, drain)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil ||
		!strings.Contains(strings.Join(c.Lifecycle.PreStop.Exec.Command, " "), "drain_listeners") {
		t.Errorf("envoy needs a preStop hook that drains listeners, got %+v", c.Lifecycle)
	}
	if arg("--service-node") != "$(POD_NAME)" {
		t.Error("node id must be the pod name (--service-node $(POD_NAME))")
	}
	if ev, _ := env(c, "POD_NAME"); ev.ValueFrom == nil || ev.ValueFrom.FieldRef == nil || ev.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Error("POD_NAME must come from metadata.name")
	}
	if _, err := strconv.Atoi(arg("--concurrency")); err != nil {
		t.Errorf("--concurrency: %v", err)
	}

	// The bootstrap: mounted from the rendered ConfigMap, parsed strictly.
	cfgPath := arg("--config-path")
	var cm *corev1.ConfigMap
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(cfgPath, m.MountPath+"/") {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cm, _ = find[corev1.ConfigMap](objs, "ConfigMap", v.ConfigMap.Name)
			}
		}
	}
	if cm == nil {
		t.Fatalf("--config-path %s is not on a ConfigMap volume", cfgPath)
	}
	doc, ok := cm.Data[filepath.Base(cfgPath)]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s", cm.Name, filepath.Base(cfgPath))
	}
	b, err := bootstrap.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("rendered bootstrap: %v", err)
	}
	lim, err := bootstrap.CheckGateway(b)
	if err != nil {
		t.Errorf("rendered bootstrap breaks the gateway contract: %v", err)
	}
	if g := b.GetNode().GetMetadata().GetFields()[bootstrap.GroupKey].GetStringValue(); g != e.envoyGroup {
		t.Errorf("portico.group = %q, want %q", g, e.envoyGroup)
	}
	for _, cl := range b.GetStaticResources().GetClusters() {
		if cl.GetName() != bootstrap.XDSCluster {
			continue
		}
		sa := cl.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		if got, want := fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()), fqdn(fullName("controlplane"))+":18000"; got != want {
			t.Errorf("xds_cluster = %s, want the control plane Service %s", got, want)
		}
		if cl.GetType().String() != "STRICT_DNS" {
			t.Errorf("xds_cluster type %v: a Service name needs STRICT_DNS", cl.GetType())
		}
	}
	if lim.StatsAddr != "0.0.0.0" || int32(lim.StatsPort) != containerPort(c, "stats") {
		t.Errorf("stats listener %s:%d, container port stats %d: kubelet and Prometheus reach it on the pod IP", lim.StatsAddr, lim.StatsPort, containerPort(c, "stats"))
	}
	if p := c.ReadinessProbe.HTTPGet; p == nil || p.Path != bootstrap.ReadyPath || p.Port.StrVal != "stats" {
		t.Errorf("envoy readiness must GET %s on the stats port, got %+v", bootstrap.ReadyPath, c.ReadinessProbe)
	}
	if memLimit := c.Resources.Limits.Memory(); memLimit.IsZero() || lim.MaxHeapBytes >= uint64(memLimit.Value()) {
		t.Errorf("overload heap limit %d must be below the memory limit %s", lim.MaxHeapBytes, memLimit.String())
	}
	checkEnvoyTLS(t, objs, w, c, cm, b, e)

	svc, ok := find[corev1.Service](objs, "Service", fullName("envoy"))
	if !ok {
		t.Fatal("no Envoy Service")
	}
	if svc.Spec.Type != e.envoyService {
		t.Errorf("Envoy Service type %s, want %s", svc.Spec.Type, e.envoyService)
	}
	for _, p := range svc.Spec.Ports {
		if p.TargetPort.StrVal == "stats" || p.TargetPort.IntVal == int32(lim.StatsPort) {
			t.Errorf("the public Envoy Service exposes the stats port")
		}
	}
}

func checkKVNode(t *testing.T, w workload, c corev1.Container, e expect) {
	headless := w.ServiceName
	seeds := strings.Split(envValue(t, c, "PORTICO_KV_SEEDS"), ",")
	if len(seeds) != e.kvReplicas || w.Replicas == nil || int(*w.Replicas) != e.kvReplicas {
		t.Errorf("kvnode: %d seeds, replicas %v, want %d", len(seeds), w.Replicas, e.kvReplicas)
	}
	grpc := containerPort(c, "grpc")
	for i, s := range seeds {
		if want := fmt.Sprintf("%s-%d.%s:%d", w.Name, i, fqdn(headless), grpc); s != want {
			t.Errorf("seed %d = %q, want %q", i, s, want)
		}
	}
	if got, want := envValue(t, c, "PORTICO_KV_ADVERTISE_ADDR"), fmt.Sprintf("$(POD_NAME).%s:%d", fqdn(headless), grpc); got != want {
		t.Errorf("PORTICO_KV_ADVERTISE_ADDR = %q, want %q", got, want)
	}
	if ev, _ := env(c, "PORTICO_NODE_ID"); ev.ValueFrom == nil || ev.ValueFrom.FieldRef == nil || ev.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Error("kvnode PORTICO_NODE_ID must be the pod name")
	}
	for _, addr := range []string{"PORTICO_KV_HTTP_ADDR", "PORTICO_KV_GRPC_ADDR"} {
		if v := envValue(t, c, addr); !strings.HasPrefix(v, ":") {
			t.Errorf("%s = %q: listen on all addresses", addr, v)
		}
	}
	if r, err := strconv.Atoi(envValue(t, c, "PORTICO_KV_REPLICATION")); err != nil || r < 1 || r > e.kvReplicas {
		t.Errorf("PORTICO_KV_REPLICATION = %d (%v) with %d nodes", r, err, e.kvReplicas)
	}
}

// checkCacheNode: the container's memory limit leaves room above maxmemory
// for the Go heap's GC headroom, connections and buffers: at a full quota
// the live heap is about maxmemory, and cachenode caps Go's memory limit at
// 1.5 × maxmemory + 64 MiB.
func checkCacheNode(t *testing.T, c corev1.Container) {
	maxmem, err := redisBytes(envValue(t, c, "PORTICO_CACHE_MAXMEMORY"))
	if err != nil || maxmem <= 0 {
		t.Errorf("PORTICO_CACHE_MAXMEMORY: %v (must be set)", err)
		return
	}
	limit := c.Resources.Limits.Memory()
	if want := resource.NewQuantity(maxmem*8/5+64<<20, resource.BinarySI); limit.Cmp(*want) < 0 {
		t.Errorf("cachenode memory limit %s is below 1.6 × maxmemory + 64Mi (%s)", limit.String(), want.String())
	}
}

// redisBytes parses Redis-style sizes: 1024-based kb/mb/gb, 1000-based k/m/g.
func redisBytes(s string) (int64, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	units := []struct {
		suffix string
		mult   int64
	}{{"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}, {"g", 1e9}, {"m", 1e6}, {"k", 1e3}, {"b", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	return n * mult, nil
}

// TestValuesSchemaRejectsMistakes: values.schema.json turns typos and
// impossible settings into install-time errors instead of silent defaults.
func TestValuesSchemaRejectsMistakes(t *testing.T) {
	t.Parallel()
	for _, set := range []string{
		"controlplane.replica=3",           // typo: would silently keep the default
		"envoy.service.type=Ingress",       // not a Service type
		"kvnode.enabled=maybe",             // not a boolean
		"log.format=yaml",                  // the binaries know json and text
		"ratelimitsvc.image.digest=latest", // not a digest
		"cachenode.maxmemory=lots",         // not a size
		"extauthz.pdb.minAvailable=1",      // with the default maxUnavailable: both set
		"postgresql.bundled.enabled=true,postgresql.existingSecret=mine", // bundled builds its own URL
		"cachenode.cluster.primaries=0",                                  // no slot owner
		"cachenode.cluster.replicasPerPrimary=-1",                        // not a count
		"cachenode.cluster.replicaPerPrimary=2",                          // typo
		"cachenode.cluster.failover.lease=2",                             // not a Go duration
		"cachenode.cluster.name=a/b",                                     // the key is <name>/topology
		"extauthz.xdsProtocol=incremental",                               // delta or sotw
	} {
		out := renderFails(t, "--set", set)
		if !strings.Contains(out, "Error") {
			t.Errorf("--set %s: %s", set, out)
		}
	}
}

// TestNamesStayValidWithTheLongestReleaseName renders with a 53-character
// release name (helm's maximum) and checks what strict decoding cannot:
// names, port names and label values the API server would refuse, and
// StatefulSet names short enough for their pods' controller-revision-hash
// label.
func TestNamesStayValidWithTheLongestReleaseName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("r", 53)
	args := []string{"template", long, chartDir(t), "--namespace", namespace, "--kube-version", kubeVersion, "--values", allEnabledValues(t)}
	objs := mustDecode(t, runHelm(t, args...))
	for _, o := range objs {
		m := o.meta()
		var errs []string
		switch o.Kind {
		case "Service":
			errs = validation.IsDNS1035Label(o.Name)
			for _, p := range o.Obj.(*corev1.Service).Spec.Ports {
				errs = append(errs, validation.IsValidPortName(p.Name)...)
			}
		case "Job":
			// Its pods carry the name as the job-name label.
			errs = validation.IsDNS1123Label(o.Name)
		case "CronJob":
			// Its Jobs are named <name>-<11 characters>.
			errs = validation.IsDNS1123Subdomain(o.Name)
			if len(o.Name) > 52 {
				errs = append(errs, "longer than 52 characters: the API server refuses a CronJob whose Jobs' names would pass 63")
			}
		case "StatefulSet":
			errs = validation.IsDNS1123Label(o.Name)
			if len(o.Name) > 52 {
				errs = append(errs, "longer than 52 characters: its pods' controller-revision-hash label would pass 63")
			}
		default:
			errs = validation.IsDNS1123Subdomain(o.Name)
		}
		for k, v := range m.GetLabels() {
			errs = append(errs, validation.IsQualifiedName(k)...)
			errs = append(errs, validation.IsValidLabelValue(v)...)
		}
		var pod *corev1.PodTemplateSpec
		switch w := o.Obj.(type) {
		case *appsv1.Deployment:
			pod = &w.Spec.Template
		case *appsv1.StatefulSet:
			pod = &w.Spec.Template
		}
		if pod != nil {
			for _, c := range pod.Spec.Containers {
				for _, p := range c.Ports {
					errs = append(errs, validation.IsValidPortName(p.Name)...)
				}
			}
		}
		for _, e := range errs {
			t.Errorf("%s/%s: %s", o.Kind, o.Name, e)
		}
	}
}

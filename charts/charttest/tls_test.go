package charttest

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"google.golang.org/protobuf/encoding/protojson"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/portico-io/portico/envoy/bootstrap"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
)

// Workload identity in the chart (ARCHITECTURE.md, "Trust and identity"):
// every pod mounts its certificate Secret, nothing runs plaintext, probes
// on TLS ports use HTTPS, the certificates are issued (hook Job and
// CronJob, or cert-manager) with the right SPIFFE IDs, and Envoy reaches
// xDS over mutual TLS.

const (
	tlsSyncComponent   = "tls-sync"
	tlsDir             = "/etc/portico/tls"
	defaultTrustDomain = "portico.local"
)

// Who writes the certificate Secrets.
const (
	modeJob         = ""             // the default: hook Job and CronJob
	modeCertManager = "cert-manager" // tls.certManager.enabled
	modeExternal    = "external"     // tls.job.enabled=false: the user
)

// tlsExpect says what a render's certificates must look like.
type tlsExpect struct {
	mode        string
	trustDomain string // "" = defaultTrustDomain
	prefix      string // Secret name prefix; "" = <fullname>-tls-
	issuer      string // cert-manager: the user's issuerRef name ("" = the chart's CA Issuer)
	issuerKind  string
	duration    time.Duration // 0 = values.yaml's 48h
	renewBefore time.Duration // 0 = values.yaml's 16h
}

func (x tlsExpect) td() string {
	if x.trustDomain == "" {
		return defaultTrustDomain
	}
	return x.trustDomain
}

// secret is the Secret of component c ("ca" for the CA).
func (x tlsExpect) secret(c string) string {
	if x.prefix != "" {
		return x.prefix + c
	}
	return fullName("tls-" + c)
}

func (x tlsExpect) id(c string) string {
	return "spiffe://" + x.td() + "/" + string(tlsRoles[c]) + "/" + c
}

// tlsRoles: the SPIFFE role of each component's certificate.
var tlsRoles = map[string]identity.Role{
	"envoy": identity.Gateway, "controlplane": identity.ControlPlane, "extauthz": identity.ExtAuthz,
	"ratelimitsvc": identity.RateLimit, "scheduler": identity.Scheduler, "kvnode": identity.KVNode,
	"cachenode": identity.CacheNode,
}

// tlsPorts: the container ports that speak TLS once issue 18 is in
// (ARCHITECTURE.md's ports); every other port of a Portico pod is plaintext
// (health, metrics, Envoy's listener and stats).
var tlsPorts = map[string][]string{
	"controlplane": {"xds", "admin"},
	"extauthz":     {"grpc"},
	"ratelimitsvc": {"grpc"},
	"scheduler":    {"http", "grpc"},
	"kvnode":       {"http", "grpc", "raft"},
	"cachenode":    {"resp", "bus"},
}

// certSpec is one certificate the chart asks for, from the hook Job's
// arguments or a cert-manager Certificate.
type certSpec struct {
	ID, Secret string
	DNS        []string
}

// checkTLS runs over every render (checkRender).
func checkTLS(t *testing.T, objs []object, e expect) {
	t.Helper()
	x := e.tls
	pods := append(workloads(objs), jobs(objs)...)
	for _, w := range pods {
		for _, c := range append(slices.Clone(w.Template.Spec.InitContainers), w.Template.Spec.Containers...) {
			if ev, ok := env(c, "PORTICO_INSECURE_PLAINTEXT"); ok {
				t.Errorf("%s/%s container %s: PORTICO_INSECURE_PLAINTEXT=%q; the chart has no plaintext mode", w.Kind, w.Name, c.Name, ev.Value)
			}
		}
	}
	for _, w := range workloads(objs) {
		if !slices.Contains(porticoComponents, w.Component) {
			continue
		}
		t.Run("tls/"+w.Kind+"/"+w.Name, func(t *testing.T) {
			checkPodCertificate(t, w, x.secret(w.Component), w.Component != "envoy", x)
			checkProbeSchemes(t, w)
		})
	}
	// cachectl (the first-map Job and init containers) calls kvnode's TLS
	// API: the cache nodes' certificate.
	for _, j := range cacheInitJobs(objs) {
		job := j.Obj.(*batchv1.Job)
		checkPodCertificate(t, workload{Kind: "Job", Name: j.Name, Template: job.Spec.Template}, x.secret("cachenode"), true, x)
	}
	for _, o := range ofKind(objs, "Secret") {
		if strings.HasPrefix(o.Name, x.secret("")) {
			t.Errorf("Secret %s is rendered: certificate Secrets are written at install time, never by the chart (a render would replace them)", o.Name)
		}
	}

	var specs []certSpec
	syncObjs := 0
	for _, o := range objs {
		if o.meta().GetLabels()[componentLabel] == tlsSyncComponent {
			syncObjs++
		}
	}
	cmObjs := len(ofKind(objs, "Certificate")) + len(ofKind(objs, "Issuer"))
	switch x.mode {
	case modeJob:
		specs = checkTLSSync(t, objs, e)
		if cmObjs != 0 {
			t.Errorf("%d cert-manager objects without tls.certManager.enabled", cmObjs)
		}
	case modeCertManager:
		specs = checkCertManager(t, objs, e)
		if syncObjs != 0 {
			t.Errorf("%d certificate sync objects besides cert-manager", syncObjs)
		}
	case modeExternal:
		if syncObjs+cmObjs != 0 {
			t.Errorf("tls.job.enabled=false without cert-manager: the user writes the Secrets, yet %d sync and %d cert-manager objects are rendered", syncObjs, cmObjs)
		}
	}
	for _, k := range []string{"ClusterRole", "ClusterRoleBinding"} {
		if n := len(ofKind(objs, k)); n != 0 {
			t.Errorf("%d %s rendered: the chart needs no cluster-wide rights", n, k)
		}
	}
	if x.mode == modeExternal {
		return
	}
	// One certificate per enabled component, with its identity, written to
	// the Secret its pods mount.
	want := map[string]string{}
	for _, w := range workloads(objs) {
		if slices.Contains(porticoComponents, w.Component) {
			want[x.secret(w.Component)] = x.id(w.Component)
		}
	}
	got := map[string]certSpec{}
	for _, s := range specs {
		got[s.Secret] = s
	}
	if len(got) != len(want) || len(specs) != len(want) {
		t.Errorf("certificates for %v, want one per enabled component %v", keys(got), keys(want))
	}
	for secret, id := range want {
		if got[secret].ID != id {
			t.Errorf("Secret %s: certificate %q, want %s", secret, got[secret].ID, id)
		}
	}
	checkServiceMonitorTLS(t, objs, got, x)
}

// checkPodCertificate: the Secret is mounted whole (no subPath: the
// kubelet's updates must reach the files) at tlsDir in every container of
// the pod, and Portico binaries are told where their files are.
func checkPodCertificate(t *testing.T, w workload, secret string, portico bool, x tlsExpect) {
	t.Helper()
	pod := w.Template.Spec
	var vol *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret {
			if vol != nil {
				t.Errorf("%s: Secret %s mounted by two volumes", w.Name, secret)
			}
			vol = &pod.Volumes[i]
		}
	}
	if vol == nil {
		t.Errorf("%s/%s mounts no certificate (Secret %s)", w.Kind, w.Name, secret)
		return
	}
	if len(vol.Secret.Items) != 0 {
		t.Errorf("%s: volume %s picks items %v; mount the whole Secret", w.Name, vol.Name, vol.Secret.Items)
	}
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		var mount *corev1.VolumeMount
		for i, m := range c.VolumeMounts {
			if m.Name != vol.Name {
				continue
			}
			if m.SubPath != "" || m.SubPathExpr != "" {
				t.Errorf("%s container %s: the certificate is a subPath mount, which never sees the kubelet's updates", w.Name, c.Name)
			}
			mount = &c.VolumeMounts[i]
		}
		if mount == nil || mount.MountPath != tlsDir || !mount.ReadOnly {
			t.Errorf("%s container %s: certificate mount %+v, want %s read-only", w.Name, c.Name, mount, tlsDir)
			continue
		}
		if !portico {
			continue
		}
		for name, file := range map[string]string{"PORTICO_TLS_CERT_FILE": "tls.crt", "PORTICO_TLS_KEY_FILE": "tls.key", "PORTICO_TLS_CA_FILE": "ca.crt"} {
			if got := envValue(t, c, name); got != path.Join(tlsDir, file) {
				t.Errorf("%s container %s: %s = %q, want %s", w.Name, c.Name, name, got, path.Join(tlsDir, file))
			}
		}
		if got := envValue(t, c, "PORTICO_TRUST_DOMAIN"); got != x.td() {
			t.Errorf("%s container %s: PORTICO_TRUST_DOMAIN = %q, want %q", w.Name, c.Name, got, x.td())
		}
	}
}

// checkProbeSchemes: an HTTP probe on a TLS port must say HTTPS (the
// kubelet does not verify the certificate), and one on a plaintext port
// must not.
func checkProbeSchemes(t *testing.T, w workload) {
	t.Helper()
	for _, c := range w.Template.Spec.Containers {
		byNumber := map[int32]string{}
		for _, p := range c.Ports {
			byNumber[p.ContainerPort] = p.Name
		}
		for kind, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
			if p == nil {
				continue
			}
			if p.GRPC != nil && slices.Contains(tlsPorts[w.Component], byNumber[p.GRPC.Port]) {
				t.Errorf("%s %s probe: gRPC on TLS port %d, which the kubelet cannot speak", c.Name, kind, p.GRPC.Port)
			}
			h := p.HTTPGet
			if h == nil {
				continue
			}
			port := h.Port.StrVal
			if port == "" {
				port = byNumber[h.Port.IntVal]
			}
			wantTLS := slices.Contains(tlsPorts[w.Component], port)
			if isTLS := h.Scheme == corev1.URISchemeHTTPS; isTLS != wantTLS {
				t.Errorf("%s %s probe on port %q: scheme %q, want HTTPS = %v", c.Name, kind, port, h.Scheme, wantTLS)
			}
		}
	}
}

// checkTLSSync: the hook Job and the CronJob run `porticoctl certs
// k8s-sync` with the same arguments, as service accounts whose Roles reach
// only the chart's certificate Secrets. It returns the certificates the
// arguments ask for.
func checkTLSSync(t *testing.T, objs []object, e expect) []certSpec {
	t.Helper()
	x := e.tls
	var job *batchv1.Job
	var cron *batchv1.CronJob
	for _, o := range objs {
		switch v := o.Obj.(type) {
		case *batchv1.Job:
			if v.Spec.Template.Labels[componentLabel] == tlsSyncComponent {
				job = v
			}
		case *batchv1.CronJob:
			if v.Spec.JobTemplate.Spec.Template.Labels[componentLabel] == tlsSyncComponent {
				cron = v
			}
		}
	}
	if job == nil || cron == nil {
		t.Fatalf("no certificate sync Job (%v) or CronJob (%v)", job != nil, cron != nil)
	}
	hooks := strings.Split(job.Annotations["helm.sh/hook"], ",")
	if !slices.Contains(hooks, "pre-install") || !slices.Contains(hooks, "pre-upgrade") ||
		!slices.Contains(strings.Split(job.Annotations["helm.sh/hook-delete-policy"], ","), "before-hook-creation") {
		t.Errorf("Job %s: hook %v: the Secrets must exist before any pod mounts them (pre-install, pre-upgrade)", job.Name, job.Annotations)
	}
	if job.Spec.BackoffLimit == nil || job.Spec.ActiveDeadlineSeconds == nil {
		t.Errorf("Job %s needs a backoffLimit and a deadline", job.Name)
	}
	if len(cron.Annotations["helm.sh/hook"]) != 0 || cron.Spec.Schedule == "" || cron.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("CronJob %s: a release resource on a schedule, one run at a time; got hook %q, schedule %q, concurrency %q",
			cron.Name, cron.Annotations["helm.sh/hook"], cron.Spec.Schedule, cron.Spec.ConcurrencyPolicy)
	}
	jobPod, cronPod := job.Spec.Template.Spec, cron.Spec.JobTemplate.Spec.Template.Spec
	jc, cc := jobPod.Containers[0], cronPod.Containers[0]
	if !slices.Equal(jc.Command, []string{binDir + "porticoctl"}) || len(jc.Args) < 2 || jc.Args[0] != "certs" || jc.Args[1] != "k8s-sync" {
		t.Fatalf("Job %s runs %v %v, want porticoctl certs k8s-sync", job.Name, jc.Command, jc.Args)
	}
	if !slices.Equal(jc.Args, cc.Args) || !slices.Equal(jc.Command, cc.Command) || jc.Image != cc.Image {
		t.Errorf("the CronJob does not run what the hook Job runs:\n%v\n%v", jc.Args, cc.Args)
	}

	specs, flags := syncSpecs(t, jc.Args)
	// The admin token rides along (checkAdminToken follows it).
	if tok := e.adminToken.created(e); flags["admin-token-secret"] != tok {
		t.Errorf("k8s-sync --admin-token-secret=%q, want %q", flags["admin-token-secret"], tok)
	}
	if flags["namespace"] != namespace || flags["secret-prefix"] != x.secret("") || flags["trust-domain"] != x.td() {
		t.Errorf("k8s-sync flags %v", flags)
	}
	dur, before := x.duration, x.renewBefore
	if dur == 0 {
		dur, before = 48*time.Hour, 16*time.Hour
	}
	if v, err := time.ParseDuration(flags["validity"]); err != nil || v != dur || flags["before"] == "" {
		t.Errorf("k8s-sync --validity %s --before %s, want %s and renewBefore/duration", flags["validity"], flags["before"], dur)
	} else if f := mustFloat(t, flags["before"]); f <= 0 || f >= 1 || (time.Duration(f*float64(dur))-before).Abs() > time.Minute {
		t.Errorf("k8s-sync --before %s: want renewBefore/duration = %v/%v", flags["before"], before, dur)
	}

	// RBAC: the hook's own copy for the hook Job, the release's for the
	// CronJob; both reach the named Secrets only.
	secrets := []string{x.secret("ca")}
	for _, s := range specs {
		secrets = append(secrets, s.Secret)
	}
	for _, c := range []struct {
		what string
		pod  corev1.PodSpec
		hook bool
	}{{"Job " + job.Name, jobPod, true}, {"CronJob " + cron.Name, cronPod, false}} {
		checkSyncRBAC(t, objs, c.what, c.pod.ServiceAccountName, c.hook, secrets, e.adminToken.created(e), job)
		if !isTrue(c.pod.AutomountServiceAccountToken) {
			t.Errorf("%s: its pod needs its service account token", c.what)
		}
	}
	return specs
}

// syncSpecs parses k8s-sync's --flag=value arguments as the command does.
func syncSpecs(t *testing.T, args []string) ([]certSpec, map[string]string) {
	t.Helper()
	flags := map[string]string{}
	dns := map[string][]string{}
	for _, a := range args[2:] {
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			t.Errorf("k8s-sync argument %q: want --flag=value", a)
			continue
		}
		if k == "dns" {
			name, hosts, _ := strings.Cut(v, "=")
			dns[name] = strings.Split(hosts, ",")
			continue
		}
		flags[k] = v
	}
	var specs []certSpec
	for _, w := range strings.Split(flags["workloads"], ",") {
		role, name, _ := strings.Cut(w, ":")
		specs = append(specs, certSpec{
			ID: "spiffe://" + flags["trust-domain"] + "/" + role + "/" + name, Secret: flags["secret-prefix"] + name, DNS: dns[name],
		})
	}
	return specs, flags
}

// checkSyncRBAC: the service account is bound to a Role that can get and
// update exactly the named Secrets, get (only) the admin token Secret
// tokenSecret when it is not "", and create Secrets (Kubernetes cannot
// limit create by name) — nothing else.
func checkSyncRBAC(t *testing.T, objs []object, what, sa string, hook bool, secrets []string, tokenSecret string, job *batchv1.Job) {
	t.Helper()
	if sa == "" {
		t.Errorf("%s runs as the namespace's default service account", what)
		return
	}
	acct, ok := find[corev1.ServiceAccount](objs, "ServiceAccount", sa)
	if !ok {
		t.Errorf("%s: ServiceAccount %s is not rendered", what, sa)
		return
	}
	if acct.AutomountServiceAccountToken == nil || *acct.AutomountServiceAccountToken {
		t.Errorf("ServiceAccount %s: automountServiceAccountToken must be false (the sync pods opt in)", sa)
	}
	var bindings []*rbacv1.RoleBinding
	for _, o := range ofKind(objs, "RoleBinding") {
		rb := o.Obj.(*rbacv1.RoleBinding)
		if slices.ContainsFunc(rb.Subjects, func(s rbacv1.Subject) bool { return s.Kind == "ServiceAccount" && s.Name == sa }) {
			bindings = append(bindings, rb)
			if s := rb.Subjects[0]; len(rb.Subjects) != 1 || s.Namespace != namespace {
				t.Errorf("RoleBinding %s: subjects %+v, want the one ServiceAccount of %s", rb.Name, rb.Subjects, namespace)
			}
		}
	}
	if len(bindings) != 1 || bindings[0].RoleRef.Kind != "Role" {
		t.Errorf("%s: ServiceAccount %s is bound %d times, want once to a Role", what, sa, len(bindings))
		return
	}
	role, ok := find[rbacv1.Role](objs, "Role", bindings[0].RoleRef.Name)
	if !ok {
		t.Errorf("RoleBinding %s: Role %s is not rendered", bindings[0].Name, bindings[0].RoleRef.Name)
		return
	}
	named, getOnly, create := 0, 0, 0
	for _, r := range role.Rules {
		if !slices.Equal(r.APIGroups, []string{""}) || !slices.Equal(r.Resources, []string{"secrets"}) || len(r.NonResourceURLs) != 0 {
			t.Errorf("Role %s: rule %+v reaches beyond core Secrets", role.Name, r)
			continue
		}
		for _, v := range r.Verbs {
			if v == "*" || v == "list" || v == "watch" || v == "delete" || v == "deletecollection" {
				t.Errorf("Role %s: verb %q is more than the sync needs", role.Name, v)
			}
		}
		switch {
		case slices.Equal(r.Verbs, []string{"create"}):
			create++
			if len(r.ResourceNames) != 0 {
				t.Errorf("Role %s: create with resourceNames never matches (the name is in the body)", role.Name)
			}
		case slices.Equal(r.Verbs, []string{"get"}) && len(r.ResourceNames) > 0:
			getOnly++
			if tokenSecret == "" || !slices.Equal(r.ResourceNames, []string{tokenSecret}) {
				t.Errorf("Role %s: get on %v, want only the admin token Secret %q", role.Name, r.ResourceNames, tokenSecret)
			}
		case len(r.ResourceNames) > 0:
			named++
			if !sameSet(r.ResourceNames, secrets) {
				t.Errorf("Role %s: resourceNames %v, want the chart's certificate Secrets %v", role.Name, r.ResourceNames, secrets)
			}
			for _, v := range r.Verbs {
				if v != "get" && v != "update" && v != "patch" {
					t.Errorf("Role %s: verb %q on the named Secrets", role.Name, v)
				}
			}
		default:
			t.Errorf("Role %s: rule %+v is not limited to named Secrets", role.Name, r)
		}
	}
	wantNamed, wantGet := min(len(secrets), 1), 0
	if tokenSecret != "" {
		wantGet = 1
	}
	if named != wantNamed || getOnly != wantGet || create != 1 {
		t.Errorf("Role %s: %d named, %d get-only and %d create rules, want %d, %d and 1", role.Name, named, getOnly, create, wantNamed, wantGet)
	}
	// The hook's RBAC must exist before the hook Job, as hooks of lower
	// weight; the CronJob's is a release resource.
	for _, m := range []map[string]string{acct.Annotations, role.Annotations, bindings[0].Annotations} {
		if isHook := m["helm.sh/hook"] != ""; isHook != hook {
			t.Errorf("%s: RBAC hook annotations %v, want hook = %v", what, m, hook)
		} else if hook && (m["helm.sh/hook"] != job.Annotations["helm.sh/hook"] || mustFloat(t, m["helm.sh/hook-weight"]) >= mustFloat(t, job.Annotations["helm.sh/hook-weight"])) {
			t.Errorf("%s: hook RBAC %v must run at the Job's hooks (%v), at a lower weight", what, m, job.Annotations)
		}
	}
}

// checkCertManager: a Certificate per component (SPIFFE URI SAN, ECDSA
// P-256, a new key at every renewal, server and client auth, short life),
// signed by the chart's CA Issuer (self-signed Issuer → CA Certificate →
// CA Issuer) or by the user's issuer.
func checkCertManager(t *testing.T, objs []object, e expect) []certSpec {
	t.Helper()
	x := e.tls
	issuers := map[string]*cmIssuer{}
	for _, o := range ofKind(objs, "Issuer") {
		issuers[o.Name] = o.Obj.(*cmIssuer)
	}
	wantRef := cmIssuerObjectReference{Name: fullName("tls-ca"), Kind: "Issuer", Group: "cert-manager.io"}
	if x.issuer != "" {
		wantRef = cmIssuerObjectReference{Name: x.issuer, Kind: x.issuerKind, Group: "cert-manager.io"}
		if len(issuers) != 0 {
			t.Errorf("Issuers %v rendered although issuerRef names the user's", keys(issuers))
		}
	} else {
		self, ca := issuers[fullName("tls-selfsigned")], issuers[fullName("tls-ca")]
		if len(issuers) != 2 || self == nil || self.Spec.SelfSigned == nil || ca == nil || ca.Spec.CA == nil || ca.Spec.CA.SecretName != x.secret("ca") {
			t.Errorf("want a self-signed Issuer and a CA Issuer on Secret %s, got %v", x.secret("ca"), keys(issuers))
		}
	}
	var specs []certSpec
	for _, o := range ofKind(objs, "Certificate") {
		c := o.Obj.(*cmCertificate)
		s := c.Spec
		for _, u := range s.Usages {
			if !cmKeyUsages[u] {
				t.Errorf("Certificate %s: usage %q is not one cert-manager knows", o.Name, u)
			}
		}
		if pk := s.PrivateKey; pk == nil || pk.Algorithm != "ECDSA" || pk.Size != 256 {
			t.Errorf("Certificate %s: private key %+v, want ECDSA P-256", o.Name, pk)
		}
		if o.Name == x.secret("ca") {
			if x.issuer != "" {
				t.Errorf("a CA Certificate is rendered although issuerRef names the user's issuer")
			}
			if !s.IsCA || s.SecretName != x.secret("ca") || !slices.Equal(s.URIs, []string{"spiffe://" + x.td()}) ||
				s.IssuerRef.Name != fullName("tls-selfsigned") || s.PrivateKey.RotationPolicy != "Never" {
				t.Errorf("CA Certificate %s: %+v", o.Name, s)
			}
			continue
		}
		if s.IsCA || len(s.URIs) != 1 || s.IssuerRef != wantRef {
			t.Errorf("Certificate %s: isCA %v, uris %v, issuer %+v (want %+v)", o.Name, s.IsCA, s.URIs, s.IssuerRef, wantRef)
		}
		if s.PrivateKey != nil && s.PrivateKey.RotationPolicy != "Always" {
			t.Errorf("Certificate %s: rotationPolicy %q, want a new key at every renewal", o.Name, s.PrivateKey.RotationPolicy)
		}
		if !slices.Contains(s.Usages, "server auth") || !slices.Contains(s.Usages, "client auth") || slices.Contains(s.Usages, "cert sign") {
			t.Errorf("Certificate %s: usages %v, want server and client auth", o.Name, s.Usages)
		}
		dur, before := x.duration, x.renewBefore
		if dur == 0 {
			dur, before = 48*time.Hour, 16*time.Hour
		}
		if s.Duration == nil || s.RenewBefore == nil || s.Duration.Duration != dur || s.RenewBefore.Duration != before {
			t.Errorf("Certificate %s: duration %v, renewBefore %v, want %v and %v", o.Name, s.Duration, s.RenewBefore, dur, before)
		}
		if len(s.URIs) == 1 {
			specs = append(specs, certSpec{ID: s.URIs[0], Secret: s.SecretName, DNS: s.DNSNames})
		}
	}
	if x.issuer == "" {
		if _, ok := find[cmCertificate](objs, "Certificate", x.secret("ca")); !ok {
			t.Errorf("no CA Certificate %s", x.secret("ca"))
		}
	}
	return specs
}

// checkServiceMonitorTLS: a monitor scraping a TLS port does it over HTTPS,
// verifying the component's certificate with the CA of its Secret and a
// server name the certificate carries.
func checkServiceMonitorTLS(t *testing.T, objs []object, certs map[string]certSpec, x tlsExpect) {
	t.Helper()
	for _, o := range ofKind(objs, "ServiceMonitor") {
		sm := o.Obj.(*monitoringv1.ServiceMonitor)
		c := sm.Labels[componentLabel]
		for _, ep := range sm.Spec.Endpoints {
			https := ep.Scheme != nil && strings.EqualFold(string(*ep.Scheme), "https")
			if want := slices.Contains(tlsPorts[c], ep.Port); https != want {
				t.Errorf("ServiceMonitor %s port %s: https = %v, want %v", o.Name, ep.Port, https, want)
			}
			if !https {
				continue
			}
			tc := ep.TLSConfig
			if tc == nil || tc.CA.Secret == nil || tc.CA.Secret.Name != x.secret(c) || tc.CA.Secret.Key != "ca.crt" || tc.ServerName == nil {
				t.Errorf("ServiceMonitor %s: tlsConfig %+v, want the CA of Secret %s and a server name", o.Name, tc, x.secret(c))
				continue
			}
			if tc.InsecureSkipVerify != nil && *tc.InsecureSkipVerify {
				t.Errorf("ServiceMonitor %s skips verification", o.Name)
			}
			if x.mode != modeExternal && !slices.Contains(certs[x.secret(c)].DNS, *tc.ServerName) {
				t.Errorf("ServiceMonitor %s: server name %s is not a DNS name of %s's certificate %v", o.Name, *tc.ServerName, c, certs[x.secret(c)].DNS)
			}
		}
	}
}

// checkEnvoyTLS holds the chart's bootstrap to envoy/bootstrap's mTLS
// contract (CheckXDSMutualTLS, as envoy/bootstrap_test.go holds the local
// one), then follows its SDS files: they are keys of the bootstrap
// ConfigMap, parse strictly into the secrets the bootstrap names, and read
// the gateway's mounted Secret, watching its directory. The control plane
// is told the same paths for the clusters it compiles.
func checkEnvoyTLS(t *testing.T, objs []object, w workload, c corev1.Container, cm *corev1.ConfigMap, b *bootstrapv3.Bootstrap, e expect) {
	t.Helper()
	x := e.tls
	m, err := bootstrap.CheckXDSMutualTLS(b)
	if err != nil {
		t.Fatalf("rendered bootstrap: %v", err)
	}
	for _, cl := range b.GetStaticResources().GetClusters() {
		if cl.GetName() != bootstrap.XDSCluster {
			continue
		}
		var ctx tlsv3.UpstreamTlsContext
		if err := cl.GetTransportSocket().GetTypedConfig().UnmarshalTo(&ctx); err != nil {
			t.Fatal(err)
		}
		sans := ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext().GetMatchTypedSubjectAltNames()
		if want := "spiffe://" + x.td() + "/controlplane/"; len(sans) != 1 || sans[0].GetMatcher().GetPrefix() != want {
			t.Errorf("xds_cluster accepts %v, want the prefix %s (the release's trust domain)", sans, want)
		}
	}
	cmDir, tlsMount := "", ""
	for _, vm := range c.VolumeMounts {
		for _, v := range w.Template.Spec.Volumes {
			if v.Name != vm.Name {
				continue
			}
			if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
				cmDir = vm.MountPath
			}
			if v.Secret != nil && v.Secret.SecretName == x.secret("envoy") {
				tlsMount = vm.MountPath
			}
		}
	}
	files := map[string]string{}
	for p, name := range map[string]string{m.CertPath: m.CertSecret, m.CAPath: m.CASecret} {
		rel, err := filepath.Rel(cmDir, p)
		if err != nil || strings.Contains(rel, "/") || cm.Data[rel] == "" {
			t.Errorf("SDS file %s is not a key of ConfigMap %s mounted at %s", p, cm.Name, cmDir)
			continue
		}
		js, err := yaml.YAMLToJSON([]byte(cm.Data[rel]))
		if err != nil {
			t.Fatal(err)
		}
		var resp discovery.DiscoveryResponse
		if err := protojson.Unmarshal(js, &resp); err != nil || len(resp.GetResources()) != 1 {
			t.Fatalf("%s: %v (%d resources)", rel, err, len(resp.GetResources()))
		}
		var sec tlsv3.Secret
		if err := resp.GetResources()[0].UnmarshalTo(&sec); err != nil {
			t.Fatal(err)
		}
		if err := sec.ValidateAll(); err != nil || sec.GetName() != name {
			t.Fatalf("%s: secret %q (%v), want %q", rel, sec.GetName(), err, name)
		}
		var watched string
		if tc := sec.GetTlsCertificate(); tc != nil {
			files["tls.crt"], files["tls.key"], watched = tc.GetCertificateChain().GetFilename(), tc.GetPrivateKey().GetFilename(), tc.GetWatchedDirectory().GetPath()
		} else {
			files["ca.crt"], watched = sec.GetValidationContext().GetTrustedCa().GetFilename(), sec.GetValidationContext().GetWatchedDirectory().GetPath()
		}
		if watched != tlsMount || tlsMount == "" {
			t.Errorf("%s watches %q, want the gateway Secret's mount %q (the kubelet swaps files there)", rel, watched, tlsMount)
		}
	}
	for key, f := range files {
		if f != path.Join(tlsMount, key) {
			t.Errorf("SDS reads %s, want %s of the gateway Secret", f, path.Join(tlsMount, key))
		}
	}
	if cp, ok := find[appsv1.Deployment](objs, "Deployment", fullName("controlplane")); ok {
		cpc := cp.Spec.Template.Spec.Containers[0]
		for name, key := range map[string]string{"PORTICO_GATEWAY_TLS_CERT_FILE": "tls.crt", "PORTICO_GATEWAY_TLS_KEY_FILE": "tls.key", "PORTICO_GATEWAY_TLS_CA_FILE": "ca.crt"} {
			if got := envValue(t, cpc, name); got != files[key] {
				t.Errorf("controlplane %s = %q, Envoy reads %q", name, got, files[key])
			}
		}
	}
}

// TestTLSCertManager renders with cert-manager: the chart's own CA chain,
// then the user's issuer.
func TestTLSCertManager(t *testing.T) {
	t.Parallel()
	vals, appVersion := chartValues(t)
	img := str(vals, "image", "repository") + ":" + appVersion
	base := expect{
		images:       map[string]string{"controlplane": img, "kvnode": img},
		envoyGroup:   "default",
		envoyService: corev1.ServiceTypeLoadBalancer, controlReplicas: 2, kvReplicas: 3, cache: defaultCache,
	}
	e := base
	e.tls = tlsExpect{mode: modeCertManager}
	checkRender(t, mustDecode(t, render(t, chartDir(t), nil, "--set", "tls.certManager.enabled=true")), e)

	e.tls = tlsExpect{mode: modeCertManager, issuer: "vault", issuerKind: "ClusterIssuer", trustDomain: "prod.example", duration: 24 * time.Hour, renewBefore: 8 * time.Hour}
	checkRender(t, mustDecode(t, render(t, chartDir(t), nil, "--set", strings.Join([]string{
		"tls.certManager.enabled=true", "tls.certManager.issuerRef.name=vault", "tls.certManager.issuerRef.kind=ClusterIssuer",
		"tls.trustDomain=prod.example", "tls.duration=24h", "tls.renewBefore=8h",
	}, ","))), e)
}

// TestTLSBringYourOwn: neither cert-manager nor the Job; the pods mount
// the same Secrets, which the user writes.
func TestTLSBringYourOwn(t *testing.T) {
	t.Parallel()
	e := allEnabledExpect()
	e.tls = tlsExpect{mode: modeExternal, trustDomain: "byo.example", prefix: "vault-issued-"}
	checkRender(t, mustDecode(t, render(t, chartDir(t), []string{allEnabledValues(t)}, "--set",
		"tls.job.enabled=false,tls.trustDomain=byo.example,tls.secretPrefix=vault-issued-")), e)
}

func TestTLSRefusesBadSettings(t *testing.T) {
	t.Parallel()
	for set, want := range map[string]string{
		"tls.renewBefore=48h":                             "tls.renewBefore (48h) must be shorter than tls.duration (48h)",
		"tls.duration=2d":                                 "/tls/duration",
		"tls.certManager.issuerRef.kind=Vault":            "kind",
		"tls.insecurePlaintext=true":                      "insecurePlaintext",
		"tls.job.enabeld=false":                           "enabeld",
		"tls.trustDomain=Not A Domain":                    "trustDomain",
		"tls.certManager.enabled=true,tls.renewBefore=3d": "renewBefore",
	} {
		t.Run(set, func(t *testing.T) {
			t.Parallel()
			if out := renderFails(t, "--set", set); !strings.Contains(out, want) {
				t.Errorf("--set %s: want an error mentioning %q, got %s", set, want, out)
			}
		})
	}
}

// TestTLSSyncJobAgainstItsRole runs the hook Job's command, exactly as
// rendered, with porticoctl against kubesecrettest (a stand-in for the
// Secret endpoints that checks our requests; not Kubernetes) enforcing
// the rendered Role: it must create every Secret the pods mount, with the
// keys they read and certificates the binaries accept for the right
// identities, and the admin token Secret the control plane mounts; a
// second run must change nothing. It cannot run in
// parallel: it sets KUBERNETES_SERVICE_HOST/PORT as Kubernetes does in a pod.
func TestTLSSyncJobAgainstItsRole(t *testing.T) {
	objs := mustDecode(t, render(t, chartDir(t), []string{allEnabledValues(t)}))
	srv, run := syncJobRun(t, objs, tlsSyncComponent)
	run()

	for _, w := range workloads(objs) {
		if !slices.Contains(porticoComponents, w.Component) {
			continue
		}
		name := tlsExpect{}.secret(w.Component)
		sec, ok := srv.Secret(name)
		if !ok {
			t.Errorf("%s mounts Secret %s, which the Job did not create", w.Name, name)
			continue
		}
		dir := t.TempDir()
		for k, v := range sec.Data {
			if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		f, err := tlsfiles.Load(tlsfiles.Config{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), CAFile: filepath.Join(dir, "ca.crt"), TrustDomain: defaultTrustDomain})
		if err != nil {
			t.Errorf("Secret %s: the binaries would refuse it: %v", name, err)
			continue
		}
		if got, want := f.ID().String(), (tlsExpect{}).id(w.Component); got != want {
			t.Errorf("Secret %s: identity %s, want %s", name, got, want)
		}
	}
	if _, ok := srv.Secret(fullName("tls-ca")); !ok {
		t.Error("no CA Secret")
	}

	// The control plane's admin token, created once.
	token := checkTokenSecretWorks(t, objs, srv, fullName("tls-admin-token"))

	srv.Requests()
	run()
	for _, r := range srv.Requests() {
		if r.Method != "GET" {
			t.Errorf("a second run with nothing due wrote: %s %s", r.Method, r.Path)
		}
	}
	if s, _ := srv.Secret(fullName("tls-admin-token")); string(s.Data["token"]) != token {
		t.Error("the second run replaced the admin token")
	}
}

// roleAllows evaluates a Role as Kubernetes' RBAC authorizer does for
// Secrets: a create request carries no name, so a rule with resourceNames
// never allows it.
func roleAllows(role *rbacv1.Role, verb, name string) bool {
	for _, r := range role.Rules {
		if !slices.Contains(r.APIGroups, "") || !slices.Contains(r.Resources, "secrets") || !slices.Contains(r.Verbs, verb) {
			continue
		}
		if len(r.ResourceNames) == 0 || (name != "" && slices.Contains(r.ResourceNames, name)) {
			return true
		}
	}
	return false
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	var f float64
	if err := yaml.Unmarshal([]byte(s), &f); err != nil {
		t.Errorf("%q is not a number: %v", s, err)
	}
	return f
}

package charttest

import (
	"bytes"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/portico-io/portico/controlplane/porticoctl"
	"github.com/portico-io/portico/controlplane/porticoctl/kubesecret/kubesecrettest"
	"github.com/portico-io/portico/internal/authn"
)

// The control plane's bootstrap admin token (issue 19): a Secret (key
// "token") that porticoctl creates once — in the certificate sync Job, or
// in a token-only hook Job when that does not run — or the user brings;
// mounted whole and read-only into the control plane as
// PORTICO_ADMIN_TOKEN_FILE, with a mode authn.BootstrapToken accepts and
// the non-root process can read. PORTICO_ADMIN_HOSTS names the Service.

// adminTokenComponent labels the token-only Job and its RBAC.
const adminTokenComponent = "admin-token"

// adminTokenExpect says where the token comes from; the zero value is the
// default: created by the chart as <tls prefix>admin-token.
type adminTokenExpect struct {
	existing, key string // controlplane.adminToken.existingSecret / existingSecretKey
	none          bool   // create=false without existingSecret: no token
}

func (a adminTokenExpect) secret(x tlsExpect) string {
	if a.existing != "" {
		return a.existing
	}
	return x.secret("admin-token")
}

func (a adminTokenExpect) file() string {
	if a.existing != "" && a.key != "" {
		return a.key
	}
	return "token"
}

// mounted: the control plane is rendered and has a token file.
func (a adminTokenExpect) mounted(e expect) bool { return e.disabled != "controlplane" && !a.none }

// created returns the Secret the chart's porticoctl must create, or "".
func (a adminTokenExpect) created(e expect) string {
	if !a.mounted(e) || a.existing != "" {
		return ""
	}
	return a.secret(e.tls)
}

// checkAdminToken runs over every render (checkRender).
func checkAdminToken(t *testing.T, objs []object, e expect) {
	t.Helper()
	a := e.adminToken
	secret, created := a.secret(e.tls), a.created(e)
	for _, o := range ofKind(objs, "Secret") {
		if o.Name == secret {
			t.Errorf("Secret %s is rendered: the admin token is created once at install time, never by the chart (a render would replace it)", o.Name)
		}
	}
	// Who passes --admin-token-secret: the certificate sync pods, or the
	// token-only Job, and only when the chart creates the token.
	var passing []string
	for _, j := range jobs(objs) {
		for _, arg := range j.Template.Spec.Containers[0].Args {
			if v, ok := strings.CutPrefix(arg, "--admin-token-secret="); ok {
				passing = append(passing, j.Kind+"/"+j.Name)
				if v != created {
					t.Errorf("%s/%s: --admin-token-secret=%s, want %q", j.Kind, j.Name, v, created)
				}
			}
		}
	}
	tokenObjs := ofComponent(objs, adminTokenComponent)
	switch {
	case created == "":
		if len(passing) != 0 || len(tokenObjs) != 0 {
			t.Errorf("the chart creates no admin token here, yet %v pass --admin-token-secret and %d token Job objects are rendered", passing, len(tokenObjs))
		}
	case e.tls.mode == modeJob:
		if len(passing) != 2 || len(tokenObjs) != 0 {
			t.Errorf("the certificate sync Job and CronJob keep the admin token: %v pass it, %d token-only objects", passing, len(tokenObjs))
		}
	default:
		checkAdminTokenJob(t, objs, created)
	}

	// The control plane registers the token; the scheduler accepts it too.
	for _, component := range []string{"controlplane", "scheduler"} {
		checkPodAdminToken(t, objs, e, component)
	}
}

// checkPodAdminToken: component's pod mounts the token Secret whole,
// read-only, with a mode the process reads and authn accepts, points
// PORTICO_ADMIN_TOKEN_FILE at it, and bounds its Host names.
func checkPodAdminToken(t *testing.T, objs []object, e expect, component string) {
	t.Helper()
	a := e.adminToken
	secret := a.secret(e.tls)
	cp, ok := find[appsv1.Deployment](objs, "Deployment", fullName(component))
	if !ok {
		return
	}
	pod := cp.Spec.Template.Spec
	c := pod.Containers[0]
	checkAdminHosts(t, c, component)

	var vol *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret {
			vol = &pod.Volumes[i]
		}
	}
	fileEnv, hasEnv := env(c, "PORTICO_ADMIN_TOKEN_FILE")
	if !a.mounted(e) {
		if vol != nil || hasEnv {
			t.Errorf("no admin token configured, yet %s mounts %v and has PORTICO_ADMIN_TOKEN_FILE=%q", component, vol, fileEnv.Value)
		}
		return
	}
	if vol == nil {
		t.Fatalf("%s does not mount the admin token Secret %s", component, secret)
	}
	if len(vol.Secret.Items) != 0 {
		t.Errorf("admin token volume picks items %v; mount the whole Secret", vol.Secret.Items)
	}
	checkTokenFileMode(t, vol, pod.SecurityContext)
	var mount *corev1.VolumeMount
	for _, ctr := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		for i, m := range ctr.VolumeMounts {
			if m.Name != vol.Name {
				continue
			}
			if ctr.Name != c.Name || mount != nil {
				t.Errorf("container %s mounts the admin token again", ctr.Name)
				continue
			}
			mount = &ctr.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly || mount.SubPath != "" || mount.SubPathExpr != "" {
		t.Fatalf("admin token mount %+v: want the whole Secret, read-only", mount)
	}
	if want := path.Join(mount.MountPath, a.file()); fileEnv.Value != want {
		t.Errorf("PORTICO_ADMIN_TOKEN_FILE=%q, want %s (key %q of the mounted Secret)", fileEnv.Value, want, a.file())
	}
}

// checkTokenFileMode: the kubelet writes the Secret's files with
// defaultMode, owner root and group the pod's fsGroup (which it adds to the
// process's groups). authn.BootstrapToken refuses group-write and any
// "other" bit; a non-root process reads through the group bit.
func checkTokenFileMode(t *testing.T, vol *corev1.Volume, psc *corev1.PodSecurityContext) {
	t.Helper()
	if vol.Secret.DefaultMode == nil {
		t.Error("admin token volume: no defaultMode (the default 0644 is readable by anyone and refused by the control plane)")
		return
	}
	mode := fs.FileMode(*vol.Secret.DefaultMode)
	if mode&0o027 != 0 {
		t.Errorf("admin token volume: defaultMode %v lets others (or the group write); the control plane refuses it", mode)
	}
	if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Fatal("the control plane must run as a non-root uid")
	}
	if psc.FSGroup == nil || mode&0o040 == 0 {
		t.Errorf("admin token volume: mode %v with fsGroup %v: the non-root process (uid %d) cannot read a root-owned file; want group read and an fsGroup", mode, psc.FSGroup, *psc.RunAsUser)
	}
}

// checkAdminHosts: the admin API answers 421 to a Host it was not told
// of: every name of its Service, and loopback for port-forwards.
func checkAdminHosts(t *testing.T, c corev1.Container, component string) {
	t.Helper()
	got := strings.Split(envValue(t, c, "PORTICO_ADMIN_HOSTS"), ",")
	svc := fullName(component)
	want := []string{svc, svc + "." + namespace, svc + "." + namespace + ".svc", fqdn(svc), "localhost", "127.0.0.1"}
	for _, h := range want {
		if !slices.Contains(got, h) {
			t.Errorf("PORTICO_ADMIN_HOSTS %v lacks %s", got, h)
		}
	}
	for _, h := range got {
		if !slices.Contains(want, h) && h != "::1" {
			t.Errorf("PORTICO_ADMIN_HOSTS names %q, not a name of the admin Service nor loopback", h)
		}
		if net.ParseIP(h) == nil && len(validation.IsDNS1123Subdomain(h)) != 0 {
			t.Errorf("PORTICO_ADMIN_HOSTS entry %q is neither a DNS name nor an IP", h)
		}
	}
}

// checkAdminTokenJob: without the certificate sync Job, one hook Job runs
// `porticoctl certs k8s-sync` for the token only, as a service account
// that can get that one Secret and create.
func checkAdminTokenJob(t *testing.T, objs []object, secret string) {
	t.Helper()
	var job *batchv1.Job
	for _, o := range ofKind(objs, "Job") {
		if j := o.Obj.(*batchv1.Job); j.Spec.Template.Labels[componentLabel] == adminTokenComponent {
			if job != nil {
				t.Errorf("two admin token Jobs")
			}
			job = j
		}
	}
	if job == nil {
		t.Fatal("no admin token Job, and no certificate sync Job to create the token")
	}
	for _, o := range ofKind(objs, "CronJob") {
		if o.meta().GetLabels()[componentLabel] == adminTokenComponent {
			t.Errorf("CronJob %s: the token is never renewed", o.Name)
		}
	}
	hooks := strings.Split(job.Annotations["helm.sh/hook"], ",")
	if !slices.Contains(hooks, "pre-install") || !slices.Contains(hooks, "pre-upgrade") {
		t.Errorf("Job %s: hook %v: the Secret must exist before the control plane mounts it", job.Name, job.Annotations)
	}
	pod := job.Spec.Template.Spec
	c := pod.Containers[0]
	want := []string{"certs", "k8s-sync", "--namespace=" + namespace, "--admin-token-secret=" + secret,
		"--label=app.kubernetes.io/instance=" + release + ",app.kubernetes.io/part-of=portico"}
	if !slices.Equal(c.Command, []string{binDir + "porticoctl"}) || !slices.Equal(c.Args, want) {
		t.Errorf("Job %s runs %v %v, want porticoctl %v", job.Name, c.Command, c.Args, want)
	}
	if !isTrue(pod.AutomountServiceAccountToken) {
		t.Errorf("Job %s: its pod needs its service account token", job.Name)
	}
	checkSyncRBAC(t, objs, "Job "+job.Name, pod.ServiceAccountName, true, nil, secret, job)
}

// TestAdminTokenSources renders each way of getting the token.
func TestAdminTokenSources(t *testing.T) {
	t.Parallel()
	vals, appVersion := chartValues(t)
	img := str(vals, "image", "repository") + ":" + appVersion
	base := expect{
		images:       map[string]string{"controlplane": img, "kvnode": img},
		envoyGroup:   "default",
		envoyService: corev1.ServiceTypeLoadBalancer, controlReplicas: 2, kvReplicas: 3, cache: defaultCache,
	}
	for name, c := range map[string]struct {
		set string
		tls tlsExpect
		tok adminTokenExpect
	}{
		"existing secret":              {"controlplane.adminToken.existingSecret=ops-admin-token,controlplane.adminToken.existingSecretKey=admin.tok", tlsExpect{}, adminTokenExpect{existing: "ops-admin-token", key: "admin.tok"}},
		"existing secret cert-manager": {"controlplane.adminToken.existingSecret=ops-admin-token,tls.certManager.enabled=true", tlsExpect{mode: modeCertManager}, adminTokenExpect{existing: "ops-admin-token"}},
		"none":                         {"controlplane.adminToken.create=false", tlsExpect{}, adminTokenExpect{none: true}},
		"none cert-manager":            {"controlplane.adminToken.create=false,tls.certManager.enabled=true", tlsExpect{mode: modeCertManager}, adminTokenExpect{none: true}},
		"prefix":                       {"tls.secretPrefix=certs-", tlsExpect{prefix: "certs-"}, adminTokenExpect{}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := base
			e.tls, e.adminToken = c.tls, c.tok
			checkRender(t, mustDecode(t, render(t, chartDir(t), nil, "--set", c.set)), e)
		})
	}
	for set, want := range map[string]string{
		"controlplane.adminToken.creat=false":           "creat",
		"controlplane.adminToken.existingSecretKey=a/b": "existingSecretKey",
	} {
		if out := renderFails(t, "--set", set); !strings.Contains(out, want) {
			t.Errorf("--set %s: want an error mentioning %q, got %s", set, want, out)
		}
	}
}

// syncJobRun runs the rendered Job of component (tls-sync or admin-token)
// as its pod would, with porticoctl against kubesecrettest enforcing the
// Job's rendered Role. It sets KUBERNETES_SERVICE_HOST/PORT: the caller
// cannot be parallel.
func syncJobRun(t *testing.T, objs []object, component string) (*kubesecrettest.Server, func() string) {
	t.Helper()
	var job *batchv1.Job
	for _, o := range ofKind(objs, "Job") {
		if j := o.Obj.(*batchv1.Job); j.Spec.Template.Labels[componentLabel] == component {
			job = j
		}
	}
	if job == nil {
		t.Fatalf("no %s Job", component)
	}
	pod := job.Spec.Template.Spec
	var role *rbacv1.Role
	for _, o := range ofKind(objs, "RoleBinding") {
		rb := o.Obj.(*rbacv1.RoleBinding)
		if rb.Subjects[0].Name == pod.ServiceAccountName {
			role, _ = find[rbacv1.Role](objs, "Role", rb.RoleRef.Name)
		}
	}
	if role == nil {
		t.Fatal("the Job's service account has no Role")
	}
	srv := kubesecrettest.New(t, namespace, "sa-token")
	srv.Allowed = func(verb, name string) bool { return roleAllows(role, verb, name) }
	host, port := srv.HostPort()
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	args := append(slices.Clone(pod.Containers[0].Args), "--service-account-dir="+srv.ServiceAccountDir(t))
	return srv, func() string {
		t.Helper()
		var out bytes.Buffer
		root := porticoctl.Root(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("porticoctl %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
}

// checkTokenSecretWorks: the Secret holds one ptk_ token, and the file the
// kubelet makes of it (the control plane volume's defaultMode) is one
// authn.BootstrapToken reads as is. It returns the token.
func checkTokenSecretWorks(t *testing.T, objs []object, srv *kubesecrettest.Server, name string) string {
	t.Helper()
	sec, ok := srv.Secret(name)
	if !ok {
		t.Fatalf("the control plane mounts Secret %s, which the Job did not create", name)
	}
	plain := string(sec.Data["token"])
	id, err := authn.ParseTokenID(plain)
	if err != nil || len(sec.Data) != 1 {
		t.Fatalf("Secret %s: keys %v, token: %v", name, keys(sec.Data), err)
	}
	cp, _ := find[appsv1.Deployment](objs, "Deployment", fullName("controlplane"))
	var mode fs.FileMode
	for _, v := range cp.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == name && v.Secret.DefaultMode != nil {
			mode = fs.FileMode(*v.Secret.DefaultMode)
		}
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, sec.Data["token"], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, mode); err != nil {
		t.Fatal(err)
	}
	if tok, created, err := authn.BootstrapToken(file); err != nil || created || tok.ID != id {
		t.Errorf("the control plane would not take the mounted token (mode %v): id %q, created %v, %v", mode, tok.ID, created, err)
	}
	return plain
}

// TestAdminTokenJobAgainstItsRole: with cert-manager, the token-only Job
// creates the token Secret under its Role, and an upgrade's run keeps it.
func TestAdminTokenJobAgainstItsRole(t *testing.T) {
	objs := mustDecode(t, render(t, chartDir(t), nil, "--set", "tls.certManager.enabled=true"))
	srv, run := syncJobRun(t, objs, adminTokenComponent)
	run()
	name := fullName("tls-admin-token")
	plain := checkTokenSecretWorks(t, objs, srv, name)
	srv.Requests()
	run()
	for _, r := range srv.Requests() {
		if r.Method != "GET" || r.Name != name {
			t.Errorf("second run: %s %s", r.Method, r.Path)
		}
	}
	if s, _ := srv.Secret(name); string(s.Data["token"]) != plain {
		t.Error("the second run replaced the token")
	}
}

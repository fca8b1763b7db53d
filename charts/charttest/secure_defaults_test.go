package charttest

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	cachens "github.com/portico-io/portico/cachenode/namespace"
)

// Secure defaults (issue 19, "Chart defaults"): each test here fails when
// the default it names regresses.

// npPeers flattens a NetworkPolicy into port -> sorted peer names:
// "*" (anyone), "release" (this release's pods), "pods:<component>",
// "namespace" (any pod of the namespace), "ns:<name>" (a namespace by
// name), or the peer's Go syntax for anything else.
func npPeers(np *networkingv1.NetworkPolicy) map[int32][]string {
	set := map[int32]map[string]bool{}
	for _, r := range np.Spec.Ingress {
		names := []string{"*"}
		if len(r.From) > 0 {
			names = nil
			for _, p := range r.From {
				names = append(names, peerName(p))
			}
		}
		for _, port := range r.Ports {
			if port.Port == nil || port.EndPort != nil || (port.Protocol != nil && *port.Protocol != corev1.ProtocolTCP) {
				set[-1] = map[string]bool{fmt.Sprintf("odd port %+v", port): true}
				continue
			}
			n := port.Port.IntVal
			if set[n] == nil {
				set[n] = map[string]bool{}
			}
			for _, name := range names {
				set[n][name] = true
			}
		}
		if len(r.Ports) == 0 {
			set[0] = map[string]bool{"every port": true}
		}
	}
	out := map[int32][]string{}
	for port, names := range set {
		out[port] = slices.Sorted(maps.Keys(names))
	}
	return out
}

func peerName(p networkingv1.NetworkPolicyPeer) string {
	switch {
	case p.IPBlock != nil:
	case p.NamespaceSelector != nil && p.PodSelector == nil && len(p.NamespaceSelector.MatchExpressions) == 0 &&
		len(p.NamespaceSelector.MatchLabels) == 1 && p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "":
		return "ns:" + p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]
	case p.NamespaceSelector != nil:
	case p.PodSelector != nil && len(p.PodSelector.MatchExpressions) == 0:
		l := p.PodSelector.MatchLabels
		switch {
		case len(l) == 0:
			return "namespace"
		case len(l) == 2 && l["app.kubernetes.io/name"] == "portico" && l["app.kubernetes.io/instance"] == release:
			return "release"
		case len(l) == 3 && l["app.kubernetes.io/name"] == "portico" && l["app.kubernetes.io/instance"] == release && l[componentLabel] != "":
			return "pods:" + l[componentLabel]
		}
	}
	return fmt.Sprintf("%#v", p)
}

func checkPolicies(t *testing.T, objs []object, want map[string]map[int32][]string) {
	t.Helper()
	nps := ofKind(objs, "NetworkPolicy")
	if len(nps) != len(want) {
		t.Errorf("%d NetworkPolicies, want %d (one per component)", len(nps), len(want))
	}
	for component, ports := range want {
		np, ok := find[networkingv1.NetworkPolicy](objs, "NetworkPolicy", fullName(component))
		if !ok {
			t.Errorf("no NetworkPolicy for %s", component)
			continue
		}
		if got := np.Spec.PodSelector.MatchLabels[componentLabel]; got != component {
			t.Errorf("NetworkPolicy %s selects component %q", np.Name, got)
		}
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Errorf("NetworkPolicy %s: policyTypes %v, want [Ingress] (egress, DNS included, stays open)", np.Name, np.Spec.PolicyTypes)
		}
		if got := npPeers(np); !maps.EqualFunc(got, ports, slices.Equal) {
			t.Errorf("NetworkPolicy %s ingress (port -> peers):\n got  %v\n want %v", np.Name, got, ports)
		}
	}
}

// TestSecureDefaultNetworkPolicies: NetworkPolicies are on by default, one
// per component, with exactly these peers on exactly these ports.
func TestSecureDefaultNetworkPolicies(t *testing.T) {
	t.Parallel()
	metrics := []string{"namespace", "ns:monitoring"}
	want := map[string]map[int32][]string{
		"controlplane": {18000: {"release"}, 18080: metrics},
		"envoy":        {10000: {"*"}, 19001: metrics},
		"extauthz":     {18100: {"pods:envoy"}, 18101: metrics},
		"ratelimitsvc": {18200: {"pods:envoy"}, 18201: metrics},
		"scheduler":    {18300: metrics, 18301: {"release"}},
		"kvnode":       {18400: {"ns:monitoring", "release"}, 18500: {"release"}, 18600: {"release"}},
		"cachenode":    {7000: {"release"}, 17000: {"pods:cachenode"}, 18700: metrics},
	}
	checkPolicies(t, mustDecode(t, render(t, chartDir(t), nil)), want)

	// The bundled trial databases: the release's pods only.
	want["postgresql"] = map[int32][]string{5432: {"release"}}
	want["redis"] = map[int32][]string{6379: {"release"}}
	checkPolicies(t, mustDecode(t, render(t, chartDir(t), nil, "--set", "postgresql.bundled.enabled=true,redis.bundled.enabled=true")), want)

	// adminFrom, cacheFrom and metricsFrom add peers where they belong, and
	// nowhere else; an empty metricsFrom leaves the namespace only.
	delete(want, "postgresql")
	delete(want, "redis")
	objs := mustDecode(t, render(t, chartDir(t), nil,
		"--set-json", `networkPolicy.adminFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"ops"}}}]`,
		"--set-json", `networkPolicy.cacheFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"apps"}}}]`,
		"--set-json", `networkPolicy.metricsFrom=[]`))
	want["controlplane"] = map[int32][]string{18000: {"release"}, 18080: {"namespace", "ns:ops"}}
	want["envoy"][19001] = []string{"namespace"}
	want["extauthz"][18101] = []string{"namespace"}
	want["ratelimitsvc"][18201] = []string{"namespace"}
	want["scheduler"] = map[int32][]string{18300: {"namespace", "ns:ops"}, 18301: {"release"}}
	want["kvnode"][18400] = []string{"release"}
	want["cachenode"] = map[int32][]string{7000: {"ns:apps", "release"}, 17000: {"pods:cachenode"}, 18700: {"namespace"}}
	checkPolicies(t, objs, want)
}

var generatedPassword = regexp.MustCompile(`^[A-Za-z0-9]{32}$`)

// secretRef returns the Secret an env var reads, or fails.
func secretRef(t *testing.T, c corev1.Container, name string) (secret, key string) {
	t.Helper()
	ev, ok := env(c, name)
	if !ok || ev.ValueFrom == nil || ev.ValueFrom.SecretKeyRef == nil || ev.Value != "" {
		t.Errorf("container %s: %s must come from a Secret (%+v)", c.Name, name, ev)
		return "", ""
	}
	return ev.ValueFrom.SecretKeyRef.Name, ev.ValueFrom.SecretKeyRef.Key
}

func mainContainer(t *testing.T, objs []object, component string) corev1.Container {
	t.Helper()
	for _, w := range workloads(objs) {
		if w.Component == component {
			return w.Template.Spec.Containers[0]
		}
	}
	t.Fatalf("no workload for %s", component)
	return corev1.Container{}
}

// cacheNamespaces parses the cache's rendered namespaces file as the node
// does, and returns it with the Secret.
func cacheNamespaces(t *testing.T, objs []object) (map[string]cachens.Settings, *corev1.Secret) {
	t.Helper()
	s, ok := find[corev1.Secret](objs, "Secret", fullName("cachenode-namespaces"))
	if !ok {
		t.Fatal("no cachenode-namespaces Secret")
	}
	settings, err := cachens.Parse(s.Data["namespaces.yaml"])
	if err != nil {
		t.Fatalf("namespaces.yaml: %v\n%s", err, s.Data["namespaces.yaml"])
	}
	out := map[string]cachens.Settings{}
	for _, st := range settings {
		out[st.Name] = st
	}
	return out, s
}

// TestCacheRequiresAuthByDefault: the cache refuses commands before AUTH;
// the namespace "default" has a generated password whose hash is in the
// namespaces file the pods mount (and the password, for clients, in the
// same Secret but not mounted); no empty bus secret is passed.
func TestCacheRequiresAuthByDefault(t *testing.T) {
	t.Parallel()
	objs := mustDecode(t, render(t, chartDir(t), nil))
	sts, ok := find[appsv1.StatefulSet](objs, "StatefulSet", fullName("cachenode"))
	if !ok {
		t.Fatal("no cachenode StatefulSet")
	}
	c := sts.Spec.Template.Spec.Containers[0]
	if got := envValue(t, c, "PORTICO_CACHE_REQUIRE_AUTH"); got != "true" {
		t.Errorf("PORTICO_CACHE_REQUIRE_AUTH = %q, want true", got)
	}
	if _, ok := env(c, "PORTICO_CACHE_CLUSTER_SECRET"); ok {
		t.Error("PORTICO_CACHE_CLUSTER_SECRET set by default: the bus is mutual TLS, and an empty secret must never be passed")
	}
	if _, ok := find[corev1.Secret](objs, "Secret", fullName("cachenode-cluster")); ok {
		t.Error("a bus secret is rendered by default")
	}
	file := envValue(t, c, "PORTICO_CACHE_NAMESPACES_FILE")
	var vol *corev1.Volume
	for i, v := range sts.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == fullName("cachenode-namespaces") {
			vol = &sts.Spec.Template.Spec.Volumes[i]
		}
	}
	if vol == nil {
		t.Fatal("the namespaces Secret is not mounted")
	}
	if len(vol.Secret.Items) != 1 || vol.Secret.Items[0].Key != "namespaces.yaml" {
		t.Errorf("the cache pods must mount only namespaces.yaml (hashes), not the passwords: %+v", vol.Secret.Items)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == vol.Name && file == m.MountPath+"/"+vol.Secret.Items[0].Path)
	}
	if !mounted {
		t.Errorf("PORTICO_CACHE_NAMESPACES_FILE %s is not the mounted file", file)
	}

	nss, s := cacheNamespaces(t, objs)
	pw := string(s.Data["password-default"])
	if !generatedPassword.MatchString(pw) {
		t.Fatalf("password-default = %q, want 32 generated letters and digits", pw)
	}
	if d := nss["default"]; !d.HasSecret || d.Secret != sha256.Sum256([]byte(pw)) {
		t.Errorf("namespace default: secret does not hash password-default (%+v)", d)
	}
	if strings.Contains(string(s.Data["namespaces.yaml"]), pw) {
		t.Error("namespaces.yaml holds the plaintext password")
	}
	// A new render (helm template: no cluster to look up) is a new password.
	_, s2 := cacheNamespaces(t, mustDecode(t, render(t, chartDir(t), nil)))
	if string(s2.Data["password-default"]) == pw {
		t.Error("two renders gave the same password: it is not generated")
	}

	// Namespaces from values: one without a secret gets a password; one
	// with its own keeps it and gets none.
	own := strings.Repeat("ab", 32)
	objs = mustDecode(t, render(t, chartDir(t), nil, "--set-json",
		`cachenode.namespaces={"namespaces":{"sessions":{"maxmemory":"64mb"},"orders":{"secretSHA256":"`+own+`"}}}`))
	nss, s = cacheNamespaces(t, objs)
	if len(nss) != 3 {
		t.Errorf("namespaces %v, want default, orders, sessions", slices.Sorted(maps.Keys(nss)))
	}
	for _, ns := range []string{"default", "sessions"} {
		pw := string(s.Data["password-"+ns])
		if !generatedPassword.MatchString(pw) || nss[ns].Secret != sha256.Sum256([]byte(pw)) {
			t.Errorf("namespace %s: no generated password matching its hash", ns)
		}
	}
	if _, ok := s.Data["password-orders"]; ok || fmt.Sprintf("%x", nss["orders"].Secret) != own {
		t.Error("namespace orders: its own secretSHA256 must be kept and no password generated")
	}
	if nss["sessions"].MaxMemory != 64<<20 {
		t.Errorf("namespace sessions lost its settings: %+v", nss["sessions"])
	}
}

// TestBundledDatabasesGeneratePasswords: the trial Postgres and Redis get
// generated passwords, wired to the components from Secrets.
func TestBundledDatabasesGeneratePasswords(t *testing.T) {
	t.Parallel()
	objs := mustDecode(t, render(t, chartDir(t), nil, "--set", "postgresql.bundled.enabled=true,redis.bundled.enabled=true"))

	db, ok := find[corev1.Secret](objs, "Secret", fullName("database"))
	if !ok {
		t.Fatal("no database Secret")
	}
	pgPass := string(db.Data["postgres-password"])
	if !generatedPassword.MatchString(pgPass) {
		t.Errorf("postgres-password = %q, want 32 generated letters and digits", pgPass)
	}
	if u := string(db.Data["database-url"]); !strings.Contains(u, ":"+pgPass+"@"+fullName("postgresql")+":5432/") {
		t.Errorf("database-url %q does not carry the generated password", u)
	}
	if name, key := secretRef(t, mainContainer(t, objs, "postgresql"), "POSTGRES_PASSWORD"); name != fullName("database") || key != "postgres-password" {
		t.Errorf("POSTGRES_PASSWORD from %s/%s", name, key)
	}
	for _, c := range []string{"controlplane", "scheduler"} {
		if name, key := secretRef(t, mainContainer(t, objs, c), "PORTICO_DATABASE_URL"); name != fullName("database") || key != "database-url" {
			t.Errorf("%s: PORTICO_DATABASE_URL from %s/%s", c, name, key)
		}
	}

	rs, ok := find[corev1.Secret](objs, "Secret", fullName("redis"))
	if !ok {
		t.Fatal("no Redis password Secret")
	}
	if pw := string(rs.Data["redis-password"]); !generatedPassword.MatchString(pw) {
		t.Errorf("redis-password = %q, want 32 generated letters and digits", pw)
	}
	checkRedisPassword(t, objs, fullName("redis"))

	// redis.existingSecret: the bundled Redis uses it too; nothing generated.
	objs = mustDecode(t, render(t, chartDir(t), nil, "--set", "redis.bundled.enabled=true,redis.existingSecret=my-redis"))
	if _, ok := find[corev1.Secret](objs, "Secret", fullName("redis")); ok {
		t.Error("a Redis password Secret is generated beside redis.existingSecret")
	}
	checkRedisPassword(t, objs, "my-redis")
}

// checkRedisPassword: the bundled Redis's requirepass and ratelimitsvc's
// PORTICO_REDIS_PASSWORD are the key redis-password of secret.
func checkRedisPassword(t *testing.T, objs []object, secret string) {
	t.Helper()
	r := mainContainer(t, objs, "redis")
	i := slices.Index(r.Args, "--requirepass")
	if i < 0 || i+1 >= len(r.Args) || r.Args[i+1] != "$(REDISCLI_AUTH)" {
		t.Errorf("bundled Redis args %v: want --requirepass $(REDISCLI_AUTH)", r.Args)
	}
	if name, key := secretRef(t, r, "REDISCLI_AUTH"); name != secret || key != "redis-password" {
		t.Errorf("bundled Redis REDISCLI_AUTH from %s/%s, want %s/redis-password", name, key, secret)
	}
	if name, key := secretRef(t, mainContainer(t, objs, "ratelimitsvc"), "PORTICO_REDIS_PASSWORD"); name != secret || key != "redis-password" {
		t.Errorf("ratelimitsvc PORTICO_REDIS_PASSWORD from %s/%s, want %s/redis-password", name, key, secret)
	}
}

// TestAdminServiceExposureNeedsAcknowledgement: the control plane's
// Service (xDS and the admin API) leaves the cluster only when
// controlplane.service.exposeAdmin says so.
func TestAdminServiceExposureNeedsAcknowledgement(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"LoadBalancer", "NodePort"} {
		out := renderFails(t, "--set", "controlplane.service.type="+typ)
		if !strings.Contains(out, "controlplane.service.exposeAdmin=true") {
			t.Errorf("type %s: the error does not name controlplane.service.exposeAdmin:\n%s", typ, out)
		}
		objs := mustDecode(t, render(t, chartDir(t), nil, "--set", "controlplane.service.type="+typ+",controlplane.service.exposeAdmin=true"))
		if svc, ok := find[corev1.Service](objs, "Service", fullName("controlplane")); !ok || string(svc.Spec.Type) != typ {
			t.Errorf("exposeAdmin=true: the control plane Service is not %s", typ)
		}
	}
	objs := mustDecode(t, render(t, chartDir(t), nil))
	if svc, ok := find[corev1.Service](objs, "Service", fullName("controlplane")); !ok || svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Error("the control plane Service is not ClusterIP by default")
	}
}

package charttest

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestExtauthzSecretsDir: with extauthz.secretsSecretName, extauthz mounts
// that Secret read-only, whole (rotation reaches the pod), where
// PORTICO_EXTAUTHZ_SECRETS_DIR points; without it there is neither.
func TestExtauthzSecretsDir(t *testing.T) {
	t.Parallel()
	objs := mustDecode(t, render(t, chartDir(t), nil, "--set", "extauthz.secretsSecretName=idp-clients"))
	c := mainContainer(t, objs, "extauthz")
	dir := envValue(t, c, "PORTICO_EXTAUTHZ_SECRETS_DIR")
	var mounted bool
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == "idp-secrets" && m.MountPath == dir && m.ReadOnly && m.SubPath == "")
	}
	dep, ok := find[appsv1.Deployment](objs, "Deployment", fullName("extauthz"))
	if !ok {
		t.Fatal("no extauthz Deployment")
	}
	var fromSecret bool
	for _, v := range dep.Spec.Template.Spec.Volumes {
		fromSecret = fromSecret || (v.Name == "idp-secrets" && v.Secret != nil && v.Secret.SecretName == "idp-clients")
	}
	if !mounted || !fromSecret {
		t.Fatalf("secrets dir %q: mounted=%v, volume from the Secret=%v", dir, mounted, fromSecret)
	}
	plain := mainContainer(t, mustDecode(t, render(t, chartDir(t), nil)), "extauthz")
	for _, e := range plain.Env {
		if e.Name == "PORTICO_EXTAUTHZ_SECRETS_DIR" {
			t.Fatal("PORTICO_EXTAUTHZ_SECRETS_DIR set without a Secret")
		}
	}
}

package charttest

import (
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-io/portico/scheduler/secret"
)

// TestSchedulerSecretBindings: with a secrets Secret, the scheduler mounts
// the bindings ConfigMap and is told where it is; the rendered file is
// what the scheduler parses, and binds exactly what values.yaml says.
func TestSchedulerSecretBindings(t *testing.T) {
	t.Parallel()
	objs := mustDecode(t, render(t, chartDir(t), nil,
		"--set", "scheduler.secretsSecretName=job-secrets",
		"--set", "scheduler.secretBindings[0].secret=billing-token",
		"--set", "scheduler.secretBindings[0].tenants[0]=acme",
		"--set", "scheduler.secretBindings[0].destinations[0]=https://billing.example.com/hooks/"))
	c := mainContainer(t, objs, "scheduler")
	file := envValue(t, c, "PORTICO_SCHEDULER_SECRET_BINDINGS")
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == "secret-bindings" && m.MountPath == filepath.Dir(file) && m.ReadOnly)
	}
	if !mounted {
		t.Fatalf("%s is not on a read-only secret-bindings mount: %+v", file, c.VolumeMounts)
	}
	cm, ok := find[corev1.ConfigMap](objs, "ConfigMap", fullName("scheduler-secret-bindings"))
	if !ok {
		t.Fatal("no scheduler-secret-bindings ConfigMap")
	}
	bound, err := secret.CheckBindings([]byte(cm.Data[filepath.Base(file)]))
	if err != nil {
		t.Fatalf("rendered bindings: %v\n%s", err, cm.Data[filepath.Base(file)])
	}
	if len(bound) != 1 || bound[0] != "billing-token" {
		t.Fatalf("bound secrets: %v", bound)
	}

	// The schema refuses a binding without destinations before anything renders.
	renderFails(t, "--set", "scheduler.secretsSecretName=job-secrets",
		"--set", "scheduler.secretBindings[0].secret=billing-token", "--set", "scheduler.secretBindings[0].tenants[0]=acme")
}

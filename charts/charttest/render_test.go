package charttest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const (
	release   = "portico"
	namespace = "portico-test"
	// helm built with `go install` reports Kubernetes v1.20 by default.
	kubeVersion = "1.33.0"
)

// repoRoot is two levels up from this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func chartDir(t testing.TB) string { return filepath.Join(repoRoot(t), "charts", "portico") }

// helmBin finds helm (PORTICO_HELM_BIN, then <repo>/.run/bin/helm). Missing
// helm fails the test under CI and skips it loudly elsewhere.
func helmBin(t testing.TB) string {
	t.Helper()
	candidates := []string{os.Getenv("PORTICO_HELM_BIN"), filepath.Join(repoRoot(t), ".run", "bin", "helm")}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() {
			return c
		}
	}
	msg := fmt.Sprintf("helm not found (PORTICO_HELM_BIN=%q, %s): run `make helm`", os.Getenv("PORTICO_HELM_BIN"), candidates[1])
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip("!!! SKIPPED: " + msg + " — the chart is NOT checked !!!")
	return ""
}

func runHelm(t testing.TB, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmBin(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stderr.Bytes(), out)
	}
	return out
}

// render runs helm template on dir with the values files and more flags.
func render(t testing.TB, dir string, valueFiles []string, flags ...string) []byte {
	t.Helper()
	args := []string{"template", release, dir, "--namespace", namespace, "--kube-version", kubeVersion}
	for _, f := range valueFiles {
		args = append(args, "--values", f)
	}
	return runHelm(t, append(args, flags...)...)
}

// scheme knows every kind the chart may render; anything else is an error.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme, autoscalingv2.AddToScheme,
		networkingv1.AddToScheme, monitoringv1.AddToScheme, rbacv1.AddToScheme, addCertManagerToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strictDecoder rejects unknown and duplicate fields (sigs.k8s.io/json
// strict mode) and kinds the scheme does not know; it does no conversion.
var strictDecoder = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

// object is one rendered manifest.
type object struct {
	Kind, Name string
	Obj        runtime.Object
	Raw        []byte
}

func (o object) meta() metav1.Object {
	m, err := metaAccessor(o.Obj)
	if err != nil {
		panic(err)
	}
	return m
}

func metaAccessor(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
}

// decodeAll splits a multi-document YAML stream and decodes every document
// strictly. Empty documents (comments only) are dropped.
func decodeAll(stream []byte) ([]object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var objs []object
	var errs []error
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if isEmptyDoc(doc) {
			continue
		}
		obj, gvk, err := strictDecoder.Decode(doc, nil, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", sourceOf(doc), err))
			continue
		}
		m, err := metaAccessor(obj)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if m.GetName() == "" {
			errs = append(errs, fmt.Errorf("%s: %s without a name", sourceOf(doc), gvk.Kind))
		}
		objs = append(objs, object{Kind: gvk.Kind, Name: m.GetName(), Obj: obj, Raw: doc})
	}
	return objs, errors.Join(errs...)
}

func isEmptyDoc(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		l := strings.TrimSpace(line)
		if l != "" && !strings.HasPrefix(l, "#") && l != "---" {
			return false
		}
	}
	return true
}

// sourceOf returns helm's "# Source: <template>" comment of a document.
func sourceOf(doc []byte) string {
	for _, line := range strings.Split(string(doc), "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(line), "# Source: "); ok {
			return s
		}
	}
	return "<no source>"
}

func TestStrictDecoderRejectsWhatKubernetesWould(t *testing.T) {
	good := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicas: 2\n  selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: b}}\n    spec:\n      containers: [{name: c, image: i}]\n"
	if _, err := decodeAll([]byte(good)); err != nil {
		t.Fatalf("valid Deployment: %v", err)
	}
	sm := "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec:\n  selector: {matchLabels: {a: b}}\n  endpoints: [{port: http, path: /metrics}]\n"
	if _, err := decodeAll([]byte(sm)); err != nil {
		t.Fatalf("valid ServiceMonitor: %v", err)
	}
	for name, doc := range map[string]string{
		"unknown field":          strings.Replace(good, "replicas: 2", "replica: 2", 1),
		"unknown nested field":   strings.Replace(good, "{name: c, image: i}", "{name: c, image: i, imagePolicy: x}", 1),
		"duplicate field":        strings.Replace(good, "replicas: 2", "replicas: 2\n  replicas: 3", 1),
		"wrong type":             strings.Replace(good, "replicas: 2", "replicas: two", 1),
		"unknown kind":           strings.Replace(good, "kind: Deployment", "kind: Deploymint", 1),
		"ServiceMonitor unknown": strings.Replace(sm, "path: /metrics", "paths: /metrics", 1),
		"no name":                strings.Replace(good, "metadata: {name: x}", "metadata: {labels: {a: b}}", 1),
	} {
		if _, err := decodeAll([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

// renderFails runs helm template expecting an error and returns its output.
func renderFails(t testing.TB, flags ...string) string {
	t.Helper()
	args := append([]string{"template", release, chartDir(t), "--namespace", namespace, "--kube-version", kubeVersion}, flags...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, helmBin(t), args...).CombinedOutput()
	if err == nil {
		t.Errorf("helm %s rendered; want an error", strings.Join(args, " "))
	}
	return string(out)
}

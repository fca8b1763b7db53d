package compile

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/portico-io/portico/controlplane/spec"
)

var update = flag.Bool("update", false, "rewrite testdata/out from the compiler's output")

// shortNames name the golden file of each type.
var shortNames = map[string]string{
	ClusterType:         "clusters",
	EndpointType:        "endpoints",
	ListenerType:        "listeners",
	RouteType:           "routes",
	SecretType:          "secrets",
	RateLimitConfigType: "ratelimitconfigs",
	JwtProviderType:     "jwtproviders",
	ApiKeyShardType:     "apikeyshards",
	RevocationListType:  "revocations",
	RateLimitRuleType:   "ratelimitrules",
}

// testInput is a golden case: a config as lists of resources in the admin
// API's JSON shapes, plus compile options.
type testInput struct {
	Version        int64             `json:"version"`
	Options        testOptions       `json:"options"`
	Clusters       []json.RawMessage `json:"clusters"`
	Routes         []json.RawMessage `json:"routes"`
	JWTProviders   []json.RawMessage `json:"jwtProviders"`
	Consumers      []json.RawMessage `json:"consumers"`
	APIKeys        []json.RawMessage `json:"apiKeys"`
	Revocations    []json.RawMessage `json:"revocations"`
	RateLimitRules []json.RawMessage `json:"rateLimitRules"`
	Secrets        []json.RawMessage `json:"secrets"`
	Listeners      []json.RawMessage `json:"listeners"`
	RedisProxies   []json.RawMessage `json:"redisProxies"`
}

type testOptions struct {
	ListenerPort           uint32  `json:"listenerPort"`
	ExtAuthzAddress        string  `json:"extAuthzAddress"`
	RateLimitAddress       string  `json:"rateLimitAddress"`
	XFFNumTrustedHops      uint32  `json:"xffNumTrustedHops"`
	DefaultMaxRequestBytes uint32  `json:"defaultMaxRequestBytes"`
	TracingCollector       string  `json:"tracingCollector"`
	TracingSamplePercent   float64 `json:"tracingSamplePercent"`
	// PreAuthLimit is ingress_http's (omitted: the default).
	PreAuthLimit spec.PreAuthLimit `json:"preAuthLimit"`
}

// loadCase reads testdata/in/<name>.yaml strictly: unknown fields and
// resources failing spec validation fail the test.
func loadCase(t testing.TB, path string) (*spec.Config, Options) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var in testInput
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	cfg := spec.NewConfig(in.Version)
	for _, kl := range []struct {
		kind  spec.Kind
		items []json.RawMessage
	}{
		{spec.KindCluster, in.Clusters},
		{spec.KindRoute, in.Routes},
		{spec.KindJWTProvider, in.JWTProviders},
		{spec.KindConsumer, in.Consumers},
		{spec.KindAPIKey, in.APIKeys},
		{spec.KindRevocation, in.Revocations},
		{spec.KindRateLimitRule, in.RateLimitRules},
		{spec.KindSecret, in.Secrets},
		{spec.KindListener, in.Listeners},
		{spec.KindRedisProxy, in.RedisProxies},
	} {
		for i, item := range kl.items {
			r, err := spec.Decode(kl.kind, item)
			if err != nil {
				t.Fatalf("%s: %s[%d]: %v", path, kl.kind, i, err)
			}
			cfg.Put(kl.kind, r)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	o := in.Options
	return cfg, Options{
		ListenerPort:           o.ListenerPort,
		ExtAuthzAddress:        o.ExtAuthzAddress,
		RateLimitAddress:       o.RateLimitAddress,
		XFFNumTrustedHops:      o.XFFNumTrustedHops,
		DefaultMaxRequestBytes: o.DefaultMaxRequestBytes,
		TracingCollector:       o.TracingCollector,
		TracingSamplePercent:   o.TracingSamplePercent,
		PreAuthLimit:           o.PreAuthLimit,
		Unseal:                 fakeUnseal,
	}
}

// fakeUnseal stands in for package seal in golden cases: their sealed keys
// are placeholders, and the output shows what the compiler did with them
// without any key material in testdata.
func fakeUnseal(sealed string) ([]byte, error) {
	return []byte("unsealed(" + sealed + ")"), nil
}

func goldenCases(t testing.TB) []string {
	t.Helper()
	in, err := filepath.Glob("testdata/in/*.yaml")
	if err != nil || len(in) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	return in
}

func caseName(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".yaml")
}

// renderYAML renders resources as a YAML list: protojson (proto field names)
// re-marshalled through sigs.k8s.io/yaml, whose key order is sorted, so the
// files are stable even though protojson's whitespace is not.
func renderYAML(rs []Resource) ([]byte, error) {
	items := make([]any, 0, len(rs))
	for _, r := range rs {
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(r)
		if err != nil {
			return nil, err
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, err
		}
		items = append(items, v)
	}
	return yaml.Marshal(items)
}

func TestGolden(t *testing.T) {
	inputs := map[string]bool{}
	for _, path := range goldenCases(t) {
		inputs[caseName(path)] = true
	}
	outs, _ := filepath.Glob(filepath.Join("testdata", "out", "*"))
	for _, dir := range outs {
		if name := filepath.Base(dir); !inputs[name] {
			if *update {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				continue
			}
			t.Errorf("%s has no testdata/in/%s.yaml (run with -update to remove it)", dir, name)
		}
	}
	for _, path := range goldenCases(t) {
		name := caseName(path)
		t.Run(name, func(t *testing.T) {
			cfg, opts := loadCase(t, path)
			snap, err := Compile(cfg, opts)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join("testdata", "out", name)
			if *update {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, typeURL := range TypeURLs {
				got, err := renderYAML(snap.Resources(typeURL))
				if err != nil {
					t.Fatal(err)
				}
				file := filepath.Join(dir, shortNames[typeURL]+".yaml")
				if *update {
					if err := os.WriteFile(file, got, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(file)
				if err != nil {
					t.Fatalf("%v (run go test ./controlplane/compile -update)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from the compiler's output (run with -update and review the diff):\n%s", file, firstDiff(want, got))
				}
			}
		})
	}
}

func firstDiff(want, got []byte) string {
	wl, gl := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return fmt.Sprintf("line %d:\n  want: %s\n  got:  %s", i+1, w, g)
		}
	}
	return "(no line differs)"
}

// TestGoldenResourcesValid re-checks each golden case's snapshot from the
// outside: version_info, consistency, ValidateAll and a strict protojson
// round trip of every resource.
func TestGoldenResourcesValid(t *testing.T) {
	for _, path := range goldenCases(t) {
		t.Run(caseName(path), func(t *testing.T) {
			cfg, opts := loadCase(t, path)
			snap, err := Compile(cfg, opts)
			if err != nil {
				t.Fatal(err)
			}
			checkSnapshot(t, snap, cfg.Version)
		})
	}
}

func checkSnapshot(t testing.TB, snap *Snapshot, version int64) {
	t.Helper()
	if err := snap.Consistent(); err != nil {
		t.Fatalf("Consistent: %v", err)
	}
	if err := snap.Envoy().Consistent(); err != nil {
		t.Fatalf("cache.Snapshot Consistent: %v", err)
	}
	want := fmt.Sprint(version)
	for _, typeURL := range TypeURLs {
		if v := snap.GetVersion(typeURL); v != want {
			t.Fatalf("%s version %q, want %q", typeURL, v, want)
		}
		if len(snap.GetVersionMap(typeURL)) != len(snap.GetResources(typeURL)) {
			t.Fatalf("%s: version map and resources differ in size", typeURL)
		}
		for name, r := range snap.GetResources(typeURL) {
			if n := cache.GetResourceName(r); n != name {
				t.Fatalf("%s: indexed as %q but named %q", typeURL, name, n)
			}
			if v, ok := r.(validator); ok {
				if err := v.ValidateAll(); err != nil {
					t.Fatalf("%s %s: ValidateAll: %v", typeURL, name, err)
				}
			}
			b, err := protojson.Marshal(r)
			if err != nil {
				t.Fatalf("%s %s: protojson: %v", typeURL, name, err)
			}
			back := r.ProtoReflect().New().Interface()
			if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(b, back); err != nil {
				t.Fatalf("%s %s: strict unmarshal: %v", typeURL, name, err)
			}
			if !proto.Equal(normalized(t, r), normalized(t, back)) {
				t.Fatalf("%s %s: protojson round trip changed the resource", typeURL, name)
			}
		}
	}
	if snap.GetVersion("type.googleapis.com/unknown.Type") != "" {
		t.Fatal("unknown type has a version")
	}
}

package spec

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// kindConstants returns the Kind constants declared in the package's
// source, so that a constant without a kindTable entry fails the test
// below rather than every switch that used to list it.
func kindConstants(t *testing.T) map[Kind]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[Kind]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Kind" {
					continue
				}
				for i, name := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok {
						t.Fatalf("%s: Kind constant %s is not a string literal", f, name.Name)
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out[Kind(v)] = name.Name
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("found no Kind constants")
	}
	return out
}

// TestKindTableComplete: every Kind constant has one complete kindTable
// entry, and every Config collection belongs to one.
func TestKindTableComplete(t *testing.T) {
	consts := kindConstants(t)
	if len(kindTable) != len(consts) {
		t.Errorf("kindTable has %d entries for %d Kind constants", len(kindTable), len(consts))
	}
	if !slices.Equal(Kinds, func() []Kind {
		var ks []Kind
		for _, d := range kindTable {
			ks = append(ks, d.Kind)
		}
		return ks
	}()) {
		t.Errorf("Kinds = %v, not kindTable's order", Kinds)
	}
	types := map[reflect.Type]Kind{}
	for k, name := range consts {
		d := k.Info()
		if d == nil {
			t.Errorf("%s (%q) has no kindTable entry", name, k)
			continue
		}
		if d.Kind != k || !k.Valid() {
			t.Errorf("%s: entry is for %q", name, d.Kind)
		}
		if d.Noun == "" || d.NameField == "" || d.coll == nil {
			t.Errorf("%s: incomplete entry %+v", name, d)
			continue
		}
		r := d.New()
		if got := KindOf(r); got != k {
			t.Errorf("%s: KindOf(New()) = %q", name, got)
		}
		if other, dup := types[reflect.TypeOf(r)]; dup {
			t.Errorf("%s: %T is also kind %q", name, r, other)
		}
		types[reflect.TypeOf(r)] = k
		if nr, err := New(k); err != nil || reflect.TypeOf(nr) != reflect.TypeOf(r) {
			t.Errorf("%s: New(k) = %T, %v", name, nr, err)
		}
		// NameField is the JSON name of the field ResourceName reads.
		probe := d.New()
		if err := json.Unmarshal([]byte(`{"`+d.NameField+`":"probe"}`), probe); err != nil || probe.ResourceName() != "probe" {
			t.Errorf("%s: NameField %q does not set the name (%v)", name, d.NameField, err)
		}
		for _, f := range d.Hidden {
			if !jsonFields(r)[f] {
				t.Errorf("%s: hidden field %q is not a JSON field of %T", name, f, r)
			}
		}
		if (d.Refs == nil) != (len(d.RefersTo) == 0) {
			t.Errorf("%s: Refs and RefersTo must be set together", name)
		}
		for _, to := range d.RefersTo {
			if !to.Valid() {
				t.Errorf("%s: refers to unknown kind %q", name, to)
			}
		}
		// The collection is wired to a Config field of its own.
		c := NewConfig(1)
		probe = d.New()
		_ = json.Unmarshal([]byte(`{"`+d.NameField+`":"probe"}`), probe)
		c.Put(k, probe)
		for _, other := range Kinds {
			want := 0
			if other == k {
				want = 1
			}
			if got := len(c.Names(other)); got != want {
				t.Errorf("%s: after Put, %d %s", name, got, other)
			}
		}
		if c.Get(k, "probe") != probe {
			t.Errorf("%s: Get does not return the Put resource", name)
		}
		cl := c.Clone()
		c.CloneKind(k)
		c.Delete(k, "probe")
		if c.Get(k, "probe") != nil || cl.Get(k, "probe") != probe {
			t.Errorf("%s: Delete after CloneKind reached the clone", name)
		}
	}
	// Every collection field of Config is made by some entry.
	v := reflect.ValueOf(NewConfig(1)).Elem()
	n := 0
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Name == "Version" {
			continue
		}
		n++
		if v.Field(i).IsNil() {
			t.Errorf("Config.%s is made by no kindTable entry", f.Name)
		}
	}
	if n != len(kindTable) {
		t.Errorf("Config has %d collections for %d kinds", n, len(kindTable))
	}
	var served []Kind
	for _, k := range Kinds {
		if k != KindAPIKey {
			served = append(served, k)
		}
	}
	if !slices.Equal(ServedKinds(), served) {
		t.Errorf("ServedKinds() = %v, want %v", ServedKinds(), served)
	}
}

// jsonFields are the JSON names of r's struct fields.
func jsonFields(r Resource) map[string]bool {
	out := map[string]bool{}
	typ := reflect.TypeOf(r).Elem()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		out[name] = true
	}
	return out
}

// danglers are, per kind that refers to others, a resource valid on its
// own whose references name nothing.
var danglers = map[Kind]Resource{
	KindCluster: &Cluster{Name: "c", Endpoints: []Endpoint{{Address: "10.0.0.1", Port: 443}},
		TLS: &UpstreamTLS{CASecret: "missing"}},
	KindRoute:  &Route{Name: "r", Match: RouteMatch{PathPrefix: "/"}, Cluster: "missing"},
	KindAPIKey: &APIKey{Name: "k", Consumer: "missing", SHA256: strings.Repeat("a", 64)},
	KindListener: &Listener{Name: "l", Port: 10443,
		TLS: &ListenerTLS{Certificates: []string{"missing"}}},
	KindRedisProxy: &RedisProxy{Name: "p", Listen: RedisListen{Port: 6380},
		Cluster:      RedisCluster{Seeds: []RedisSeed{{Address: "10.0.0.1", Port: 7000}}},
		PrefixRoutes: []RedisPrefixRoute{{Prefix: "a:", RedisProxy: "missing"}}},
}

// TestEveryReferenceIsChecked: a resource of any kind with references
// that name nothing fails validation, with or without a base, and names
// only kinds its entry says it refers to.
func TestEveryReferenceIsChecked(t *testing.T) {
	for _, d := range kindTable {
		if d.Refs == nil {
			continue
		}
		r, ok := danglers[d.Kind]
		if !ok {
			t.Errorf("%s refers to other kinds: add a dangling example to danglers", d.Kind)
			continue
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("%s example: %v", d.Kind, err)
		}
		refs := d.Refs(r)
		if len(refs) == 0 {
			t.Fatalf("%s example refers to nothing", d.Kind)
		}
		for _, ref := range refs {
			if !slices.Contains(d.RefersTo, ref.Kind) {
				t.Errorf("%s: reference to %s not in RefersTo", d.Kind, ref.Kind)
			}
		}
		base := NewConfig(1)
		c := base.Clone()
		c.Put(d.Kind, r)
		for _, b := range []*Config{nil, base} {
			var fe *FieldError
			err := c.ValidateFrom(b)
			if !errors.As(err, &fe) || fe.Code != CodeUnknownRef ||
				fe.Field != string(d.Kind)+"/"+r.ResourceName()+": "+refs[0].Field {
				t.Errorf("%s (base %v): %v", d.Kind, b != nil, err)
			}
			if err := c.checkRefs(d, b); err == nil {
				t.Errorf("%s (base %v): checkRefs found nothing", d.Kind, b != nil)
			}
		}
	}
}

// TestCheckRefsFromBase: with a base, a reference breaks when its target
// goes away or, for a typed target, changes type, though the referrer did
// not change.
func TestCheckRefsFromBase(t *testing.T) {
	base := NewConfig(1)
	base.Put(KindConsumer, &Consumer{Name: "acme", Tenant: "t"})
	base.Put(KindAPIKey, &APIKey{Name: "k1", Consumer: "acme", SHA256: strings.Repeat("a", 64)})
	base.Put(KindSecret, &Secret{Name: "ca", Type: SecretCA, CA: "x"})
	base.Put(KindCluster, &Cluster{Name: "up", Endpoints: []Endpoint{{Address: "10.0.0.1", Port: 443}},
		TLS: &UpstreamTLS{CASecret: "ca"}})
	for _, d := range kindTable {
		if err := base.checkRefs(d, nil); err != nil {
			t.Fatalf("base: %v", err)
		}
	}

	gone := base.Clone()
	gone.Delete(KindConsumer, "acme")
	if err := gone.checkRefs(KindAPIKey.Info(), base); err == nil || !strings.Contains(err.Error(), `consumer "acme" does not exist`) {
		t.Errorf("consumer deleted: %v", err)
	}

	retyped := base.Clone()
	retyped.Put(KindSecret, &Secret{Name: "ca", Type: SecretTLS, Files: &SecretFiles{CertificateChain: "/c", PrivateKey: "/k"}})
	err := retyped.checkRefs(KindCluster.Info(), base)
	if err == nil || err.Error() != `clusters/up: tls.caSecret: secret "ca" is of type tls; want a ca secret` {
		t.Errorf("secret retyped: %v", err)
	}

	same := base.Clone()
	same.Put(KindRevocation, &Revocation{Name: "jti", ExpiresAt: time.Unix(1, 0)})
	for _, d := range kindTable {
		if err := same.checkRefs(d, base); err != nil {
			t.Errorf("unrelated change: %s: %v", d.Kind, err)
		}
	}
}

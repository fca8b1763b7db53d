package manifest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portico-io/portico/controlplane/spec"
)

func TestParseKindsNamesAndErrors(t *testing.T) {
	in := `kind: cluster
name: echo
endpoints: [{address: 127.0.0.1, port: 18900}]
---
# an empty document is skipped
---
{"kind": "revocations", "jti": "j1", "expiresAt": "2030-01-01T00:00:00Z"}
`
	docs, err := Parse(strings.NewReader(in), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 || docs[0].Ref() != "clusters/echo" || docs[1].Ref() != "revocations/j1" || docs[1].Source != "x.yaml#3" {
		t.Fatalf("docs %+v", docs)
	}
	if strings.Contains(string(docs[0].Resource), "kind") || !strings.Contains(string(docs[0].Resource), `"port":18900`) {
		t.Fatalf("resource %s", docs[0].Resource)
	}
	for _, bad := range []struct{ doc, want string }{
		{"name: x\n", "kind: is required"},
		{"kind: apikeys\nname: x\n", "unknown kind"},
		{"kind: routes\nmatch: {}\n", "name: is required"},
		{"- a\n- b\n", "a mapping"},
		{"kind: [\n", "x.yaml#1"},
	} {
		if _, err := Parse(strings.NewReader(bad.doc), "x.yaml"); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.doc, err, bad.want)
		}
	}
}

func TestReadDirRefusesDuplicates(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "kind: consumers\nname: acme\n")
	write("b.yml", "kind: consumer\nname: other\n")
	write("notes.txt", "kind: consumer\nname: acme\n") // not read
	docs, err := Read(dir)
	if err != nil || len(docs) != 2 {
		t.Fatalf("%v %+v", err, docs)
	}
	write("c.json", `{"kind":"consumers","name":"acme"}`)
	if _, err := Read(dir); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "a.yaml#1") || !strings.Contains(err.Error(), "c.json#1") {
		t.Fatalf("duplicate: %v", err)
	}
}

// Encoding puts kind and name first, keeps the API's field order, and
// writes one file per kind in name order; reading the files back gives
// the same documents.
func TestWriteDirRoundTrip(t *testing.T) {
	docs := []Document{
		{Kind: spec.KindRoute, Name: "b", Resource: []byte(`{"name":"b","match":{"pathPrefix":"/b"},"cluster":"c"}`)},
		{Kind: spec.KindCluster, Name: "c", Resource: []byte(`{"name":"c","endpoints":[{"address":"127.0.0.1","port":1}]}`)},
		{Kind: spec.KindRoute, Name: "a", Resource: []byte(`{"name":"a","match":{"path":"/a"},"cluster":"c"}`)},
		{Kind: spec.KindSecret, Name: "s", Resource: []byte(`{"name":"s","type":"ca","ca":"line1\nline2\n"}`)},
	}
	dir := t.TempDir()
	files, err := WriteDir(dir, docs, func(d Document) string {
		if d.Kind == spec.KindSecret {
			return "note"
		}
		return ""
	})
	if err != nil || len(files) != 3 {
		t.Fatalf("%v %v", err, files)
	}
	routes, _ := os.ReadFile(filepath.Join(dir, "routes.yaml"))
	want := "kind: routes\nname: a\nmatch:\n  path: /a\ncluster: c\n---\nkind: routes\nname: b\nmatch:\n  pathPrefix: /b\ncluster: c\n"
	if string(routes) != want {
		t.Fatalf("routes.yaml:\n%s\nwant:\n%s", routes, want)
	}
	secrets, _ := os.ReadFile(filepath.Join(dir, "secrets.yaml"))
	if !strings.HasPrefix(string(secrets), "# note\nkind: secrets\nname: s\ntype: ca\nca: |\n  line1\n  line2\n") {
		t.Fatalf("secrets.yaml:\n%s", secrets)
	}
	back, err := Read(dir)
	if err != nil || len(back) != 4 {
		t.Fatalf("%v %+v", err, back)
	}
	var buf bytes.Buffer
	if err := Encode(&buf, back, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "ca: |\n  line1\n  line2\n") {
		t.Fatalf("re-encoded:\n%s", buf.String())
	}
}

// Parse never panics, and what it accepts encodes and parses back to the
// same documents.
func FuzzParse(f *testing.F) {
	f.Add("kind: clusters\nname: echo\nendpoints: [{address: 127.0.0.1, port: 1}]\n")
	f.Add("kind: revocations\njti: j\n---\n{\"kind\":\"route\",\"name\":\"r\",\"match\":{\"path\":\"/x\"}}\n")
	f.Add("kind: secrets\nname: s\nca: |\n  a\n  b\n")
	f.Fuzz(func(t *testing.T, in string) {
		docs, err := Parse(strings.NewReader(in), "fuzz")
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := Encode(&buf, docs, nil); err != nil {
			t.Fatalf("encode %q: %v", in, err)
		}
		back, err := Parse(&buf, "again")
		if err != nil || len(back) != len(docs) {
			t.Fatalf("reparse of %q: %v (%d docs, want %d)\n%s", in, err, len(back), len(docs), buf.String())
		}
		for i := range docs {
			if back[i].Ref() != docs[i].Ref() || string(back[i].Resource) != string(docs[i].Resource) {
				t.Fatalf("doc %d: %s %s, want %s %s", i, back[i].Ref(), back[i].Resource, docs[i].Ref(), docs[i].Resource)
			}
		}
	})
}

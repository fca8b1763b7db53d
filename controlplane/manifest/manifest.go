// Package manifest is the file format of declarative configuration
// (porticoctl apply and export): YAML documents, one resource each, that
// say their kind and otherwise hold the resource's JSON fields exactly as
// the admin API takes them:
//
//	kind: clusters
//	name: echo
//	endpoints:
//	- address: 127.0.0.1
//	  port: 18900
//
// Kinds are the API's ("clusters", "jwt-providers"), singular forms
// ("cluster") are accepted too. A file may hold many documents of any
// kinds; export writes one file per kind (<kind>.yaml), in name order, so
// the same config always gives the same bytes. JSON documents are YAML
// too. Decoding is not validation: the server checks every field.
package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/portico-io/portico/controlplane/spec"
)

// ErrFormat is a document that is not a resource document.
var ErrFormat = errors.New("manifest: bad document")

// Kinds are the kinds a manifest may hold: the admin API's served kinds,
// in its order. API keys are not among them: they are credentials minted
// by the server (POST /consumers/{name}/keys) or imported as hashes, never
// files.
var Kinds = spec.ServedKinds()

// Document is one resource of a manifest.
type Document struct {
	Kind spec.Kind
	Name string
	// Resource is the resource's JSON, without "kind".
	Resource json.RawMessage
	// Source says where it was read ("dir/routes.yaml#2").
	Source string
}

// Ref is "kind/name".
func (d Document) Ref() string { return string(d.Kind) + "/" + d.Name }

// ParseKind accepts a kind as the API names it or in the singular.
func ParseKind(s string) (spec.Kind, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for _, k := range Kinds {
		if s == string(k) || s+"s" == string(k) {
			return k, nil
		}
	}
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = string(k)
	}
	return "", fmt.Errorf("%w: unknown kind %q (want one of %s)", ErrFormat, s, strings.Join(names, ", "))
}

// NameField is the JSON field holding a kind's resource name ("name"
// for a kind spec does not know).
func NameField(k spec.Kind) string {
	if d := k.Info(); d != nil {
		return d.NameField
	}
	return "name"
}

// Read reads the documents of each path: a file, or a directory whose
// *.yaml, *.yml and *.json files are read in name order (not recursively).
// A resource named twice is an error naming both places.
func Read(paths ...string) ([]Document, error) {
	var docs []Document
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		files := []string{p}
		if st.IsDir() {
			entries, err := os.ReadDir(p)
			if err != nil {
				return nil, fmt.Errorf("manifest: %w", err)
			}
			files = files[:0]
			for _, e := range entries {
				switch filepath.Ext(e.Name()) {
				case ".yaml", ".yml", ".json":
					if !e.IsDir() {
						files = append(files, filepath.Join(p, e.Name()))
					}
				}
			}
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("manifest: %w", err)
			}
			d, err := Parse(bytes.NewReader(b), f)
			if err != nil {
				return nil, err
			}
			docs = append(docs, d...)
		}
	}
	seen := map[string]string{}
	for _, d := range docs {
		if other, dup := seen[d.Ref()]; dup {
			return nil, fmt.Errorf("%w: %s is in %s and in %s", ErrFormat, d.Ref(), other, d.Source)
		}
		seen[d.Ref()] = d.Source
	}
	return docs, nil
}

// Parse reads a stream of YAML documents; source names it in errors.
// Empty documents are skipped.
func Parse(r io.Reader, source string) ([]Document, error) {
	dec := yaml.NewDecoder(r)
	var out []Document
	for i := 1; ; i++ {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		where := fmt.Sprintf("%s#%d", source, i)
		if err != nil {
			return nil, fmt.Errorf("manifest: %s: %w", where, err)
		}
		if v == nil {
			continue
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: %s: a document is a mapping with kind: and the resource's fields", ErrFormat, where)
		}
		ks, _ := obj["kind"].(string)
		if ks == "" {
			return nil, fmt.Errorf("%w: %s: kind: is required", ErrFormat, where)
		}
		k, err := ParseKind(ks)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		delete(obj, "kind")
		name, _ := obj[NameField(k)].(string)
		if name == "" {
			return nil, fmt.Errorf("%w: %s: %s: is required", ErrFormat, where, NameField(k))
		}
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrFormat, where, err)
		}
		out = append(out, Document{Kind: k, Name: name, Resource: b, Source: where})
	}
}

// Sort orders documents by kind (Kinds order) then name.
func Sort(docs []Document) {
	sort.SliceStable(docs, func(i, j int) bool {
		ki, kj := slices.Index(Kinds, docs[i].Kind), slices.Index(Kinds, docs[j].Kind)
		if ki != kj {
			return ki < kj
		}
		return docs[i].Name < docs[j].Name
	})
}

// Encode writes docs as a YAML stream: kind and name first, then the
// resource's fields in the order the API gives them. comment, when non-nil, may
// return a comment to put above a document.
func Encode(w io.Writer, docs []Document, comment func(Document) string) error {
	for i, d := range docs {
		n, err := Node(d)
		if err != nil {
			return err
		}
		if comment != nil {
			n.HeadComment = comment(d)
		}
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(n); err != nil {
			return fmt.Errorf("manifest: encode %s: %w", d.Ref(), err)
		}
		if err := enc.Close(); err != nil {
			return fmt.Errorf("manifest: encode %s: %w", d.Ref(), err)
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

// Node is d as a YAML mapping with kind and name first, keeping the JSON's
// key order (JSON is YAML: decoding it into a node keeps the order).
func Node(d Document) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(d.Resource, &doc); err != nil || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: %s is not a JSON object", ErrFormat, d.Ref())
	}
	m := doc.Content[0]
	plain(m)
	head := []*yaml.Node{{Kind: yaml.ScalarNode, Value: "kind"}, {Kind: yaml.ScalarNode, Value: string(d.Kind)}}
	// The name next, then the rest in the API's order.
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == NameField(d.Kind) {
			head = append(head, m.Content[i], m.Content[i+1])
			m.Content = slices.Delete(m.Content, i, i+2)
			break
		}
	}
	m.Content = append(head, m.Content...)
	return m, nil
}

// plain turns JSON's flow style into block style, leaving strings quoted
// only where YAML needs it; multi-line strings are literal blocks when
// that reads back exactly, double-quoted otherwise.
func plain(n *yaml.Node) {
	n.Style = 0
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && strings.ContainsAny(n.Value, "\n\r") {
		n.Style = yaml.DoubleQuotedStyle
		if literal(n.Value) {
			n.Style = yaml.LiteralStyle
		}
	}
	for _, c := range n.Content {
		plain(c)
	}
}

// literal reports whether a multi-line string (a PEM block) reads back
// unchanged from a literal block; other strings keep YAML's quoting.
func literal(v string) bool {
	if !strings.Contains(v, "\n") || strings.ContainsAny(v, "\r\t") || strings.HasPrefix(v, "\n") || strings.HasPrefix(v, " ") {
		return false
	}
	for _, l := range strings.Split(v, "\n") {
		if strings.HasSuffix(l, " ") {
			return false
		}
	}
	return true
}

// YAML renders one resource (no kind line) for display, e.g. in a diff.
func YAML(resource json.RawMessage) (string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(resource, &doc); err != nil || len(doc.Content) != 1 {
		return "", fmt.Errorf("%w: not JSON", ErrFormat)
	}
	plain(doc.Content[0])
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc.Content[0]); err != nil {
		return "", err
	}
	_ = enc.Close()
	return buf.String(), nil
}

// WriteDir writes docs into dir as one file per kind, <kind>.yaml, each in
// name order; kinds without documents get no file. It returns the files.
func WriteDir(dir string, docs []Document, comment func(Document) string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	docs = slices.Clone(docs)
	Sort(docs)
	var files []string
	for _, k := range Kinds {
		var of []Document
		for _, d := range docs {
			if d.Kind == k {
				of = append(of, d)
			}
		}
		if len(of) == 0 {
			continue
		}
		var buf bytes.Buffer
		if err := Encode(&buf, of, comment); err != nil {
			return nil, err
		}
		f := filepath.Join(dir, string(k)+".yaml")
		if err := os.WriteFile(f, buf.Bytes(), 0o644); err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

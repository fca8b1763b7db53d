package compile

import (
	"bytes"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
)

// checkEncoded checks that snap.Encoded() serves what snap does: the same
// versions, the same names, and resources go-control-plane marshals to the
// bytes of the compiled messages (whose hash is the delta version).
func checkEncoded(t *testing.T, what string, snap *Snapshot) {
	t.Helper()
	enc := snap.Encoded()
	if enc != snap.Encoded() {
		t.Fatalf("%s: Encoded differs between calls", what)
	}
	for _, typeURL := range slices.Concat(TypeURLs, []string{"type.googleapis.com/unknown.Type"}) {
		if enc.GetVersion(typeURL) != snap.GetVersion(typeURL) {
			t.Fatalf("%s %s: version %q, want %q", what, typeURL, enc.GetVersion(typeURL), snap.GetVersion(typeURL))
		}
		items, got := snap.GetResourcesAndTTL(typeURL), enc.GetResourcesAndTTL(typeURL)
		if len(items) != len(got) || len(enc.GetResources(typeURL)) != len(items) {
			t.Fatalf("%s %s: %d encoded resources, want %d", what, typeURL, len(got), len(items))
		}
		versions := enc.GetVersionMap(typeURL)
		for name, r := range items {
			e, ok := got[name]
			if !ok {
				t.Fatalf("%s %s: %q not encoded", what, typeURL, name)
			}
			if _, ok := e.Resource.(*encoded); !ok {
				t.Fatalf("%s %s %q: the cache is given %T", what, typeURL, name, e.Resource)
			}
			if n := cache.GetResourceName(e.Resource); n != name {
				t.Fatalf("%s %s: %q encoded as %q", what, typeURL, name, n)
			}
			want, err := cache.MarshalResource(r.Resource)
			if err != nil {
				t.Fatal(err)
			}
			b, err := cache.MarshalResource(e.Resource)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, want) {
				t.Fatalf("%s %s %q: encoded bytes differ from the compiled message's", what, typeURL, name)
			}
			if cache.HashResource(b) != versions[name] {
				t.Fatalf("%s %s %q: encoding hashes to %s, version map says %s", what, typeURL, name, cache.HashResource(b), versions[name])
			}
		}
	}
}

// Every golden case's snapshot and views, and an incremental compile that
// reuses (and so does not encode) API-key shards.
func TestEncodedServesTheCompiledBytes(t *testing.T) {
	files, err := filepath.Glob("testdata/in/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, f := range files {
		cfg, opts := loadCase(t, f)
		snap, err := Compile(cfg, opts)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		checkEncoded(t, f, snap)
		for v := range numViews {
			checkEncoded(t, f, snap.View(v).(*Snapshot))
		}
	}

	cfg, opts := withKeys(t, 300)
	c := NewCompiler(opts)
	if _, err := c.Compile(cfg); err != nil {
		t.Fatal(err)
	}
	cfg = next(cfg)
	snap, err := c.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkEncoded(t, "reused shards", snap.View(ViewExtAuthz).(*Snapshot))
}

// Views share the full snapshot's encoded resources: each is encoded once
// per snapshot whichever views serve it.
func TestEncodedSharedByViews(t *testing.T) {
	cfg, opts := withKeys(t, 10)
	snap, err := Compile(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	full := snap.Encoded()
	for v := range numViews {
		view := snap.View(v).(*Snapshot).Encoded()
		for _, typeURL := range TypeURLs {
			for name, r := range view.GetResourcesAndTTL(typeURL) {
				if full.GetResourcesAndTTL(typeURL)[name].Resource != r.Resource {
					t.Fatalf("view %d %s %q: not the snapshot's encoded resource", v, typeURL, name)
				}
			}
		}
	}
}

// Resources encoded on first use (reused shards) may be marshalled by many
// streams at once (run with -race).
func TestEncodedConcurrentFirstUse(t *testing.T) {
	cfg, opts := withKeys(t, 200)
	snap, err := Compile(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	shards := snap.Encoded().GetResourcesAndTTL(ApiKeyShardType)
	if len(shards) == 0 {
		t.Fatal("no shards")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name, r := range shards {
				b, err := cache.MarshalResource(r.Resource)
				if err != nil || cache.HashResource(b) != snap.GetVersionMap(ApiKeyShardType)[name] {
					t.Errorf("shard %q: %v", name, err)
				}
			}
		}()
	}
	wg.Wait()
}

// Marshalling an encoded resource hands out its encoding without copying
// it, and nothing a caller does with the result reaches the shared bytes.
func TestEncodedMarshalSharesTheEncoding(t *testing.T) {
	snap, err := NewCompiler(Options{}).Compile(scaleRoutes(100))
	if err != nil {
		t.Fatal(err)
	}
	e := snap.Encoded().GetResources(RouteType)[RouteConfigName]
	b1, err := cache.MarshalResource(e)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := cache.MarshalResource(e)
	if err != nil {
		t.Fatal(err)
	}
	if len(b1) == 0 || &b1[0] != &b2[0] {
		t.Fatal("each marshal copied the encoding")
	}
	want := slices.Clone(b1)
	grown := append(b1, 0xff) // no spare capacity: a copy
	grown[0] ^= 0xff
	if !bytes.Equal(b2, want) {
		t.Fatal("appending to a marshalled encoding changed the shared bytes")
	}
	if n := proto.Size(e); n != len(want) {
		t.Fatalf("proto.Size %d, encoding %d bytes", n, len(want))
	}
	out, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend([]byte("prefix"), e)
	if err != nil || !bytes.Equal(out, append([]byte("prefix"), want...)) {
		t.Fatalf("MarshalAppend: %v", err)
	}
	// What a stream sends: the Any go-control-plane builds, marshalled by
	// gRPC, decodes to the compiled route configuration.
	var rc routev3.RouteConfiguration
	if err := proto.Unmarshal(b1, &rc); err != nil || !proto.Equal(&rc, snap.GetResources(RouteType)[RouteConfigName]) {
		t.Fatalf("decoded %v", err)
	}
}

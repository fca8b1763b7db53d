package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode"
	"github.com/portico-io/portico/cachenode/client"
	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/internal/kvtest"
	"github.com/portico-io/portico/cachenode/topology"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlstest"
	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/internal/testdeps"
)

func TestTopologyGetSet(t *testing.T) {
	g := kvtest.Start(t, "cache")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cachectl := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		full := append([]string{"--kv-addrs", strings.Join(g.HTTPAddrs, ","), "--cluster", "prod", "--insecure-plaintext"}, args...)
		if code := run(ctx, full, &out, &errb); code != want {
			t.Fatalf("cachectl %s = %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	const two = `nodes:
  - {id: a, host: 127.0.0.1, port: 7000, slots: ["0-8191"]}
  - {id: b, host: 127.0.0.1, port: 7001, slots: ["8192-16383"]}
`
	if out := cachectl(1, "topology", "get"); !strings.Contains(out, "no topology published") {
		t.Fatalf("get of an empty store: %s", out)
	}
	cachectl(2, "topology", "set")
	cachectl(2, "topology", "frobnicate")
	if out := cachectl(1, "topology", "set", "--file", file("bad.yaml", `nodes: [{id: a, host: h, port: 1, slots: ["0-9"]}, {id: b, host: h, port: 2, slots: ["9"]}]`)); !strings.Contains(out, "assigned to both") {
		t.Fatalf("overlapping map: %s", out)
	}
	if out := cachectl(1, "topology", "set", "--file", file("me.yaml", "myself: a\n"+two)); !strings.Contains(out, "myself") {
		t.Fatalf("a map with myself: %s", out)
	}
	// No epoch in the file: the stored one + 1 (1 for the first).
	if out := cachectl(0, "topology", "set", "--file", file("two.yaml", two)); !strings.Contains(out, "epoch 1 at revision") {
		t.Fatalf("first set: %s", out)
	}
	c := &topology.Client{Addrs: g.HTTPAddrs, Cluster: "prod"}
	t1, err := c.Load(ctx)
	if err != nil || t1.Spec.Epoch != 1 {
		t.Fatalf("stored: %+v %v", t1, err)
	}
	out := cachectl(0, "topology", "get")
	if !strings.Contains(out, "revision "+itoa(t1.Revision)) || !strings.Contains(out, "epoch: 1") || !strings.Contains(out, "8192-16383") {
		t.Fatalf("get: %s", out)
	}
	// get's output is a valid input (epoch 1 must rise: refused as is).
	if out := cachectl(1, "topology", "set", "--file", file("got.yaml", out)); !strings.Contains(out, "epoch not above") {
		t.Fatalf("set of the same epoch: %s", out)
	}
	moved := strings.Replace(strings.Replace(two, "0-8191", "0-100", 1), "8192-16383", "101-16383", 1)
	if out := cachectl(0, "topology", "set", "--file", file("moved.yaml", moved), "--revision", itoa(t1.Revision)); !strings.Contains(out, "epoch 2 at revision") {
		t.Fatalf("set on the read revision: %s", out)
	}
	// Another operator still holding t1's revision: a conflict, nothing changed.
	if out := cachectl(1, "topology", "set", "--file", file("two.yaml", two), "--revision", itoa(t1.Revision)); !strings.Contains(out, "revision conflict") {
		t.Fatalf("stale revision: %s", out)
	}
	if t2, err := c.Load(ctx); err != nil || t2.Spec.Epoch != 2 || t2.Spec.Nodes[0].Slots[0] != "0-100" {
		t.Fatalf("stored after the conflict: %+v %v", t2, err)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func TestTopologyInit(t *testing.T) {
	g := kvtest.Start(t, "cache")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cachectl := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		full := append([]string{"--kv-addrs", strings.Join(g.HTTPAddrs, ","), "--cluster", "init", "--insecure-plaintext"}, args...)
		if code := run(ctx, full, &out, &errb); code != want {
			t.Fatalf("cachectl %s = %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	nodes := []string{"--node", "a=10.0.0.1:7000", "--node", "b=10.0.0.2:7000@17100", "--node", "c=10.0.0.3:7000", "--node", "d=10.0.0.4:7000"}
	cachectl(2, "topology", "init", "--node", "a=nohost")
	if out := cachectl(2, append([]string{"topology", "init", "--replicas", "2"}, nodes...)...); !strings.Contains(out, "cannot be primaries") {
		t.Fatalf("4 nodes, 2 replicas each: %s", out)
	}
	if out := cachectl(0, append([]string{"topology", "init", "--replicas", "1"}, nodes...)...); !strings.Contains(out, "published the first map") {
		t.Fatalf("init: %s", out)
	}
	// Again (another installer): left as it is.
	if out := cachectl(0, append([]string{"topology", "init"}, nodes[:2]...)...); !strings.Contains(out, "already has a map") {
		t.Fatalf("second init: %s", out)
	}
	cur, err := (&topology.Client{Addrs: g.HTTPAddrs, Cluster: "init"}).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cur.Spec.Map("a")
	if err != nil || m.Size() != 2 || m.Node("c").ReplicaOf != m.Index(m.Node("a")) || m.Node("b").BusPort != 17100 || m.Node("a").BusPort != 17000 {
		t.Fatalf("stored: %v %+v", err, cur.Spec)
	}
}

// TestSamplesAndWarm: a one-node cluster serves traffic; cachectl samples
// saves its key samples; the node's data is dropped (a cold start);
// cachectl warm reloads the sampled keys from an HTTP origin. Everyone has
// a certificate of one CA, as in make run: the node serves RESP over TLS
// only and cachectl calls it (and kvnode, when kvnode serves TLS) with an
// operator certificate.
func TestSamplesAndWarm(t *testing.T) {
	ca := tlstest.New(t)
	g := kvtest.StartWith(t, kvtest.Options{Keyspaces: []string{"cache"}, PKI: ca})
	operator := ca.Files(t, identity.Operator, "operator")
	appTLS := ca.ClientTLS(nil) // an application without a certificate
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	nsFile := filepath.Join(dir, "ns.yaml")
	if err := os.WriteFile(nsFile, []byte("namespaces:\n  app: {secret: s, hotKeySampleEvery: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	p, _ := strconv.Atoi(port)
	if _, err := (&topology.Client{Addrs: g.URLs, Cluster: "warm", TLS: g.TLS}).Publish(ctx, cluster.Spec{Epoch: 1,
		Nodes: []cluster.NodeSpec{{ID: "n0", Host: "127.0.0.1", Port: p, BusPort: mustPort(t), Slots: []string{"0-16383"}}}}, 0); err != nil {
		t.Fatal(err)
	}
	ready := make(chan cachenode.Addrs, 1)
	nctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- cachenode.Run(nctx, cachenode.Config{NodeID: "n0", RESPAddr: "127.0.0.1:" + port, HTTPAddr: "127.0.0.1:0",
			NamespacesFile: nsFile, ClusterKVAddrs: g.URLs, ClusterName: "warm", Ready: ready, TLS: ca.Files(t, identity.CacheNode, "n0")})
	}()
	defer func() { stop(); <-done }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	app := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, Username: "app", Password: "s", TLSConfig: appTLS})
	defer app.Close()
	for i := range 20 {
		for range 20 - i {
			app.Get(ctx, "item:"+strconv.Itoa(i))
		}
	}
	var out, errb bytes.Buffer
	file := filepath.Join(dir, "samples.ndjson")
	// Plaintext calls get nowhere: the node speaks TLS only.
	plain := []string{"--kv-addrs", strings.Join(g.URLs, ","), "--cluster", "warm", "--node-user", "app", "--node-password", "s", "--insecure-plaintext"}
	if code := run(ctx, append(plain, "samples", "--out", file), &out, &errb); code != 1 {
		t.Fatalf("samples in plaintext from a TLS node: %d %s %s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	base := []string{"--kv-addrs", strings.Join(g.URLs, ","), "--cluster", "warm", "--node-user", "app", "--node-password", "s",
		"--tls-cert-file", operator.CertFile, "--tls-key-file", operator.KeyFile, "--tls-ca-file", operator.CAFile}
	if code := run(ctx, append(base, "samples", "--out", file), &out, &errb); code != 0 || !strings.Contains(out.String(), "210 samples from 1 nodes") {
		t.Fatalf("samples: %d %s %s", code, out.String(), errb.String())
	}
	if err := app.FlushDB(ctx).Err(); err != nil { // the cold start
		t.Fatal(err)
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("v-" + strings.TrimPrefix(r.URL.Path, "/")))
	}))
	defer origin.Close()
	out.Reset()
	if code := run(ctx, append(base, "warm", "--samples", file, "--origin", origin.URL+"/{key}", "--namespace", "app", "--top", "10", "--rate", "1000"), &out, &errb); code != 0 {
		t.Fatalf("warm: %d %s %s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "warmed: 10/10 keys: 10 loaded") {
		t.Fatalf("warm output: %s", out.String())
	}
	if v := app.Get(ctx, "item:0").Val(); v != "v-item:0" {
		t.Fatalf("item:0 = %q", v)
	}
	if n := app.DBSize(ctx).Val(); n != 10 {
		t.Fatalf("%d keys warmed, want the top 10", n)
	}
	if app.Exists(ctx, "item:19").Val() != 0 {
		t.Fatal("a key outside the top 10 was warmed")
	}
	// In the client library's format: a Get through cachenode/client finds
	// the warmed values without calling its loader.
	if err := app.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run(ctx, append(base, "warm", "--samples", file, "--origin", origin.URL+"/{key}", "--namespace", "app", "--top", "5", "--rate", "1000", "--format", "client"), &out, &errb); code != 0 || !strings.Contains(out.String(), "warmed: 5/5 keys: 5 loaded") {
		t.Fatalf("warm --format client: %d %s %s", code, out.String(), errb.String())
	}
	cl, err := client.New(client.Options{Client: app, NoReplicaRetry: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	v, err := cl.Get(ctx, "item:0", func(context.Context) ([]byte, int64, error) {
		t.Error("the loader ran for a warmed key")
		return nil, 0, nil
	})
	if err != nil || string(v) != "v-item:0" {
		t.Fatalf("client Get of a warmed key = %q, %v", v, err)
	}
}

func mustPort(t *testing.T) int {
	p, _ := strconv.Atoi(freePort(t))
	return p
}

func freePort(t *testing.T) string { return strconv.Itoa(testdeps.FreePort(t)) }

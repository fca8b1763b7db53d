package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/authz/authztest"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
	"github.com/portico-io/portico/internal/xdstest"
	"github.com/portico-io/portico/kvnode"
	"github.com/portico-io/portico/kvnode/api"
	"github.com/portico-io/portico/kvnode/cp"
	"github.com/portico-io/portico/kvnode/ring"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// tokens hold one API token per role; every test node accepts them.
var tokens = authztest.NewTokens()

// cluster is kvnodes in this process on loopback, every port TLS with
// kvnode certificates of one throwaway CA, as kvnode's own tests start
// them (real gRPC, Raft and pebble).
type cluster struct {
	t     *testing.T
	pki   *tlstest.PKI
	mu    sync.Mutex
	nodes map[string]*kvnode.Node
	cfgs  map[string]kvnode.Config
	// client is an operator (certificate) client.
	client *http.Client
}

// newCluster starts size nodes named prefix0… that found one ring; with
// withCP they are also a 3-voter Raft group serving keyspace locks.
func newCluster(t *testing.T, pki *tlstest.PKI, prefix string, size int, withCP bool) *cluster {
	t.Helper()
	c := &cluster{t: t, pki: pki, nodes: map[string]*kvnode.Node{}, cfgs: map[string]kvnode.Config{}}
	op, err := tls.LoadX509KeyPair(pki.Files(t, identity.Operator, "test-operator").CertFile, pki.Files(t, identity.Operator, "test-operator").KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	c.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: pki.ClientTLS([]tls.Certificate{op})}}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, n := range c.nodes {
			_ = n.Stop()
		}
	})
	addrs := testdeps.FreeAddrs(t, 3*size)
	var seeds []string
	var peers []cp.Peer
	for i := range size {
		seeds = append(seeds, addrs[3*i])
		peers = append(peers, cp.Peer{ID: fmt.Sprintf("%s%d", prefix, i), Addr: addrs[3*i+2]})
	}
	for i := range size {
		cfg := c.config(fmt.Sprintf("%s%d", prefix, i))
		cfg.GRPCAddr, cfg.HTTPAddr = addrs[3*i], addrs[3*i+1]
		cfg.Seeds = slices.Delete(slices.Clone(seeds), i, i+1)
		if withCP {
			cfg.CPKeyspaces = []string{"locks"}
			cfg.CP = cp.Config{BindAddr: addrs[3*i+2], Bootstrap: true, Peers: peers}
		}
		c.start(cfg)
	}
	for _, id := range c.ids() {
		c.waitNormal(id)
	}
	if withCP {
		c.waitLeader()
	}
	return c
}

// waitLeader waits until a node leads the Raft group and every running
// node knows its HTTP address (so followers forward).
func (c *cluster) waitLeader() {
	c.t.Helper()
	xdstest.Eventually(c.t, 30*time.Second, "a raft leader every node knows", func() bool {
		leader := ""
		for _, id := range c.ids() {
			if g := c.node(id).CP(); g != nil && g.IsLeader() {
				leader = id
			}
		}
		if leader == "" {
			return false
		}
		for _, id := range c.ids() {
			g := c.node(id).CP()
			if g == nil {
				continue
			}
			if l := g.Leader(); l.LeaderID != leader || l.LeaderHTTPAddr != c.node(leader).HTTPAddr() {
				return false
			}
		}
		return true
	})
}

func (c *cluster) config(id string) kvnode.Config {
	return kvnode.Config{
		NodeID: id, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: c.t.TempDir(),
		Replication: 3, GossipInterval: 20 * time.Millisecond, HintInterval: 20 * time.Millisecond,
		PhiThreshold: 20, WriteTimeout: 3 * time.Second, ReadTimeout: 3 * time.Second, StartupWait: 5 * time.Second,
		RepairInterval: time.Hour, RepairDepth: 5, NoSync: true,
		TLS: c.pki.Files(c.t, identity.KVNode, id), Auth: kvnode.AuthConfig{Tokens: tokens},
	}
}

func (c *cluster) start(cfg kvnode.Config) *kvnode.Node {
	c.t.Helper()
	n, err := kvnode.New(cfg)
	if err != nil {
		c.t.Fatalf("new %s: %v", cfg.NodeID, err)
	}
	if err := n.Start(c.t.Context()); err != nil {
		c.t.Fatalf("start %s: %v", cfg.NodeID, err)
	}
	cfg.GRPCAddr, cfg.HTTPAddr = n.GRPCAddr(), n.HTTPAddr()
	c.mu.Lock()
	c.nodes[cfg.NodeID], c.cfgs[cfg.NodeID] = n, cfg
	c.mu.Unlock()
	return n
}

// add starts a new node seeded with the cluster's nodes; tweak (when not
// nil) changes its config first.
func (c *cluster) add(id, joinMode string, tweak func(*kvnode.Config)) *kvnode.Node {
	c.t.Helper()
	cfg := c.config(id)
	if tweak != nil {
		tweak(&cfg)
	}
	for _, o := range c.ids() {
		if n := c.node(o); n != nil {
			cfg.Seeds = append(cfg.Seeds, n.GRPCAddr())
		}
	}
	cfg.JoinMode = joinMode
	return c.start(cfg)
}

func (c *cluster) kill(id string) {
	c.t.Helper()
	if err := c.node(id).Stop(); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	delete(c.nodes, id)
	c.mu.Unlock()
}

func (c *cluster) node(id string) *kvnode.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// ids are the running nodes, sorted.
func (c *cluster) ids() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id := range c.nodes {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func (c *cluster) addrs(ids ...string) string {
	var out []string
	for _, id := range ids {
		out = append(out, c.node(id).HTTPAddr())
	}
	return join(out)
}

func join(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(x)
	}
	return b.String()
}

func (c *cluster) waitNormal(id string) {
	c.t.Helper()
	xdstest.Eventually(c.t, 60*time.Second, id+" NORMAL on every node", func() bool {
		for _, o := range c.ids() {
			m, ok := c.node(o).Membership().Member(id)
			if !ok || m.State != kvv1.MemberState_MEMBER_STATE_NORMAL {
				return false
			}
		}
		return true
	})
}

func (c *cluster) waitAlive(id string, up bool) {
	c.t.Helper()
	xdstest.Eventually(c.t, 30*time.Second, fmt.Sprintf("%s alive=%v everywhere", id, up), func() bool {
		for _, o := range c.ids() {
			if o != id && c.node(o).Membership().Alive(id) != up {
				return false
			}
		}
		return true
	})
}

type result struct {
	status int
	header http.Header
	body   []byte
}

// do calls node id's API with hc (the operator client when nil).
func (c *cluster) do(hc *http.Client, method, id, path string, body []byte) (result, error) {
	if hc == nil {
		hc = c.client
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, "https://"+c.node(id).HTTPAddr()+path, bytes.NewReader(body))
	if err != nil {
		return result{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, b}, err
}

func (c *cluster) must(method, id, path string, body []byte, want int) result {
	c.t.Helper()
	for attempt := 1; ; attempt++ {
		r, err := c.do(nil, method, id, path, body)
		if err != nil {
			c.t.Fatalf("%s %s on %s: %v", method, path, id, err)
		}
		// A consensus-tier 503 (an election on the loaded machine; nothing
		// written) is retried as a client would.
		if r.status == http.StatusServiceUnavailable && want != r.status && attempt < 5 {
			c.waitLeader()
			continue
		}
		if r.status != want {
			c.t.Fatalf("%s %s on %s: %d, want %d: %s", method, path, id, r.status, want, r.body)
		}
		return r
	}
}

// replicas of key in node via's current ring.
func (c *cluster) replicas(via, key string) []string {
	cur, _ := c.node(via).Membership().Rings()
	return cur.Preference(ring.Token([]byte(key)))
}

// acks records acknowledged writes of concurrent writers (distinct keys;
// every 5th is deleted after its put).
type acks struct {
	mu      sync.Mutex
	values  map[string]string
	deleted map[string]bool
	// maybe: a delete whose outcome is unknown (timeout, 504).
	maybe map[string]bool
	n     int
}

func newAcks() *acks {
	return &acks{values: map[string]string{}, deleted: map[string]bool{}, maybe: map[string]bool{}}
}

func (a *acks) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// snapshot copies what was acknowledged so far.
func (a *acks) snapshot() *acks {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := newAcks()
	for k, v := range a.values {
		s.values[k] = v
	}
	for k := range a.deleted {
		s.deleted[k] = true
	}
	for k := range a.maybe {
		s.maybe[k] = true
	}
	s.n = a.n
	return s
}

// writers run w clients putting distinct keys at QUORUM through the nodes
// nodes() names, until the returned stop is called (which waits for them).
func (c *cluster) writers(w int, prefix string, log *acks, nodes func() []string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 23))
			hc := &http.Client{Timeout: 2 * time.Second, Transport: bearerTransport{c.client.Transport, tokens.Token(authz.Editor)}}
			for j := 0; ; j++ {
				select {
				case <-done:
					return
				default:
				}
				ids := nodes()
				id := ids[r.IntN(len(ids))]
				key, val := fmt.Sprintf("%s%d:%d", prefix, i, j), fmt.Sprintf("v%d-%d", i, j)
				res, err := c.do(hc, "PUT", id, "/v1/kv/"+key+"?consistency=QUORUM", []byte(val))
				if err != nil || res.status != http.StatusOK {
					continue
				}
				log.mu.Lock()
				log.values[key] = val
				log.n++
				log.mu.Unlock()
				if j%5 != 0 {
					continue
				}
				// From here until the answer the key may read either way
				// (a snapshot of the log taken meanwhile must know it).
				log.mu.Lock()
				log.maybe[key] = true
				log.mu.Unlock()
				res, err = c.do(hc, "DELETE", id, "/v1/kv/"+key+"?consistency=QUORUM", nil)
				log.mu.Lock()
				switch {
				case err == nil && res.status == http.StatusNoContent:
					log.deleted[key] = true
				case err == nil && (res.status == http.StatusServiceUnavailable || res.status < 500):
					delete(log.maybe, key) // refused: nothing was written
				}
				log.mu.Unlock()
			}
		}()
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// waitAcks waits until n more writes were acknowledged.
func (a *acks) waitAcks(t *testing.T, n int) {
	t.Helper()
	target := a.count() + n
	xdstest.Eventually(t, 60*time.Second, fmt.Sprintf("%d acknowledged writes", target), func() bool { return a.count() >= target })
}

// verify reads every acknowledged key at QUORUM through via (batches of
// 100 keys): each put reads back, each acknowledged delete stays deleted.
func (c *cluster) verify(log *acks, via []string) {
	c.t.Helper()
	log.mu.Lock()
	defer log.mu.Unlock()
	keys := make([]string, 0, len(log.values))
	for k := range log.values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i := 0; i < len(keys); i += 100 {
		batch := keys[i:min(i+100, len(keys))]
		body, _ := json.Marshal(api.BatchGetRequest{Keys: batch, Consistency: "QUORUM"})
		r := c.must("POST", via[(i/100)%len(via)], "/v1/kv:batchGet", body, http.StatusOK)
		var res struct {
			Items []api.BatchItem `json:"items"`
		}
		if err := json.Unmarshal(r.body, &res); err != nil || len(res.Items) != len(batch) {
			c.t.Fatalf("batch get: %v %s", err, r.body)
		}
		for _, it := range res.Items {
			k, v := it.Key, log.values[it.Key]
			switch {
			case it.Error != nil:
				c.t.Fatalf("read %s: %+v", k, it.Error)
			case log.deleted[k]:
				if it.Found {
					c.t.Fatalf("deleted %s came back: %+v", k, it.Siblings)
				}
			case log.maybe[k] && !it.Found:
			case !it.Found || len(it.Siblings) != 1 || string(it.Siblings[0].Value) != v:
				c.t.Fatalf("acknowledged %s=%s read back as %+v", k, v, it)
			}
		}
	}
}

type bearerTransport struct {
	base http.RoundTripper
	tok  string
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return b.base.RoundTrip(r)
}

// kvctl runs the command with the operator certificate against addrs.
func (c *cluster) kvctl(want int, addrs string, args ...string) string {
	c.t.Helper()
	op := c.pki.Files(c.t, identity.Operator, "test-operator")
	full := append([]string{"--addrs", addrs, "--tls-cert-file", op.CertFile, "--tls-key-file", op.KeyFile, "--tls-ca-file", op.CAFile, "--timeout", "2m"}, args...)
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(c.t.Context(), 3*time.Minute)
	defer cancel()
	if code := run(ctx, full, &out, &errb); code != want {
		c.t.Fatalf("kvctl %v = %d, want %d\nstdout: %s\nstderr: %s", args, code, want, out.String(), errb.String())
	}
	return out.String() + errb.String()
}

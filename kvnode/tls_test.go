package kvnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/internal/tlstest"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// A ring on mutual TLS: the nodes find each other and replicate (Gossip and
// Apply between kvnode identities), while a caller without a kvnode
// certificate is refused every internode call, and a forged Gossip adds no
// member.
func TestInternodeRequiresKVNodeIdentity(t *testing.T) {
	p := tlstest.New(t)
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.TLS, cfg.InsecurePlaintext = p.Files(t, identity.KVNode, cfg.NodeID), false
	})
	// Replication to every node crosses the internode port on mTLS.
	c.mustDo("PUT", "n0", "/v1/kv/tls:1?consistency=ALL", []byte("v"), nil, http.StatusOK)
	for _, id := range c.ids() {
		if v, ok := c.localValue(id, "tls:1"); !ok || v != "v" {
			t.Fatalf("%s holds %q, %v", id, v, ok)
		}
	}

	members := func() []string {
		var ids []string
		for _, m := range c.node("n0").Membership().Snapshot() {
			ids = append(ids, m.GetId())
		}
		slices.Sort(ids)
		return ids
	}
	before := members()
	forged := &kvv1.GossipRequest{From: "evil", Members: []*kvv1.Member{{
		Id: "evil", Addr: "127.0.0.1:1", Generation: 1, Heartbeat: 1, Version: 1,
		State: kvv1.MemberState_MEMBER_STATE_NORMAL, Tokens: []uint64{1, 1 << 62, 1 << 63},
	}}}
	for _, tc := range p.Cases(t, identity.KVNode, identity.CacheNode) {
		t.Run(tc.Name, func(t *testing.T) {
			cc, err := grpc.NewClient(c.node("n0").GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc.Client)))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			client := kvv1.NewInternodeClient(cc)
			if tc.Allowed {
				if _, err := client.Gossip(ctx, &kvv1.GossipRequest{From: "n9"}); err != nil {
					t.Fatalf("a kvnode identity was refused: %v", err)
				}
				return
			}
			if _, err := client.Gossip(ctx, forged); err == nil {
				t.Fatal("Gossip served")
			}
			if _, err := client.Apply(ctx, &kvv1.ApplyRequest{}); err == nil {
				t.Fatal("Apply served")
			}
			if _, err := client.Scan(ctx, &kvv1.ScanRequest{}); err == nil {
				t.Fatal("Scan served")
			}
		})
	}
	if after := members(); !slices.Equal(before, after) {
		t.Fatalf("ring members changed: %v -> %v", before, after)
	}
}

// The Raft tier on mutual TLS: a leader is elected and writes commit across
// the group, and the Raft port refuses a peer without a kvnode certificate.
func TestRaftRequiresKVNodeIdentity(t *testing.T) {
	p := tlstest.New(t)
	c := newCPClusterWith(t, func(cfg *Config) {
		cfg.TLS, cfg.InsecurePlaintext = p.Files(t, identity.KVNode, cfg.NodeID), false
	}, "locks")
	follower := "n0"
	if c.cpLeader() == follower {
		follower = "n1"
	}
	c.mustDo("PUT", follower, "/v1/cp/locks/owner", []byte("me"), nil, http.StatusOK)
	if r := c.mustDo("GET", "n2", "/v1/cp/locks/owner", nil, nil, http.StatusOK); string(r.body) != "me" {
		t.Fatalf("read %q", r.body)
	}

	c.mu.Lock()
	raftAddr := c.cfgs["n0"].CP.BindAddr
	c.mu.Unlock()
	for _, tc := range p.Cases(t, identity.KVNode, identity.Operator) {
		t.Run(tc.Name, func(t *testing.T) {
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", raftAddr, tc.Client)
			if err == nil {
				// TLS 1.3: the server's verdict on the client certificate
				// arrives with the first read.
				_ = conn.SetReadDeadline(time.Now().Add(time.Second))
				_, err = conn.Read(make([]byte, 1))
				conn.Close()
			}
			refused := err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
			if tc.Allowed == refused {
				t.Fatalf("allowed=%v, handshake/read: %v", tc.Allowed, err)
			}
		})
	}
}

// Raft replication goes on while every node's certificate is rewritten:
// no write fails, and new Raft handshakes present the new certificates.
func TestRaftSurvivesCertificateRotation(t *testing.T) {
	p := tlstest.New(t)
	files := map[string]tlsfiles.Config{}
	var mu sync.Mutex
	c := newCPClusterWith(t, func(cfg *Config) {
		tc := p.Files(t, identity.KVNode, cfg.NodeID)
		tc.Interval = 50 * time.Millisecond
		mu.Lock()
		files[cfg.NodeID] = tc
		mu.Unlock()
		cfg.TLS, cfg.InsecurePlaintext = tc, false
	}, "locks")
	leader := c.cpLeader()

	var writes, failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r, err := c.do("PUT", leader, fmt.Sprintf("/v1/cp/locks/k%d", i%50), []byte("v"), nil)
			writes.Add(1)
			if err != nil || r.status != http.StatusOK {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %s %v", r.status, r.body, err))
			}
		}
	}()
	c.waitUntil("writes to flow", 10*time.Second, func() bool { return writes.Load() > 20 })

	serial := func(addr string) string {
		cfg := p.ClientTLS(nil)
		cfg.Certificates = []tls.Certificate{mustPair(t, files["n0"])}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			return "dial: " + err.Error()
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	for _, id := range c.ids() {
		p.Reissue(t, files[id], identity.KVNode, id)
	}
	for _, id := range c.ids() {
		want := mustPair(t, files[id]).Leaf.SerialNumber.String()
		c.mu.Lock()
		addr := c.cfgs[id].CP.BindAddr
		c.mu.Unlock()
		c.waitUntil(id+"'s Raft port to present its new certificate", 10*time.Second, func() bool { return serial(addr) == want })
	}
	after := writes.Load()
	c.waitUntil("writes to go on", 10*time.Second, func() bool { return writes.Load() > after+20 })
	close(stop)
	<-done
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of %d writes failed across the rotation; first: %v", n, writes.Load(), firstErr.Load())
	}
}

func mustPair(t *testing.T, c tlsfiles.Config) tls.Certificate {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

package kvnode

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/portico-io/portico/internal/identity"
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

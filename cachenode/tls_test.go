package cachenode_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode"
	"github.com/portico-io/portico/cachenode/bus"
	"github.com/portico-io/portico/internal/identity"
)

// The cluster bus streams the whole dataset (SYNC) and takes slot imports:
// over mutual TLS it serves cachenode identities only, so no certificate,
// another CA's, an expired one or another role's gets a single reply.
func TestBusRequiresCacheNodeIdentity(t *testing.T) {
	port, busPort := freePort(t), freePort(t)
	id := fmt.Sprintf("%040x", 0xb0)
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	doc := fmt.Sprintf("epoch: 1\nnodes:\n  - id: %s\n    host: 127.0.0.1\n    port: %s\n    bus_port: %s\n    slots: [\"0-16383\"]\n", id, port, busPort)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	startNode(t, withConfig(func(c *cachenode.Config) {
		c.RESPAddr, c.NodeID, c.ClusterConfig = "127.0.0.1:"+port, id, path
	}))
	addr := "127.0.0.1:" + busPort
	for _, tc := range busCA(t).Cases(t, identity.CacheNode, identity.KVNode) {
		t.Run(tc.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			c, err := bus.Peer{TLS: tc.Client}.Dial(ctx, addr)
			if err == nil {
				_, err = c.Do(ctx, []byte("SYNC"), []byte("?"), []byte(strconv.Itoa(-1)))
				c.Close()
			}
			if tc.Allowed {
				// A cachenode gets the bus's answer (here: no replication
				// stream for a node that is not its replica), not a TLS error.
				if err != nil && !isReply(err) {
					t.Fatalf("a cachenode identity was refused: %v", err)
				}
				return
			}
			if err == nil || isReply(err) {
				t.Fatalf("the bus answered: %v", err)
			}
		})
	}
	// Plaintext is refused at the handshake too.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := (bus.Peer{}).Dial(ctx, addr); err == nil {
		_, err = c.Do(ctx, []byte("PING"))
		c.Close()
		if err == nil || isReply(err) {
			t.Fatalf("a plaintext caller got an answer: %v", err)
		}
	}
}

func isReply(err error) bool {
	var re *bus.ReplyError
	return errors.As(err, &re)
}

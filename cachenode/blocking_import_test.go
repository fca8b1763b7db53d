package cachenode_test

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/internal/xdstest"
)

// TestBlockingServedByImport: a client that blocked with ASKING on the
// node a slot is importing into is served when the slot's mover brings
// the key it waits for, as Redis's RESTORE on a MIGRATE target serves
// it. Before, the imported data sat there and the client waited out its
// timeout (the import path wrote the keyspace without telling the
// blocking queues). Both a list and a sorted-set waiter.
func TestBlockingServedByImport(t *testing.T) {
	tc := startCluster(t)
	ports := make([]string, 3)
	for i, a := range tc.addrs {
		_, ports[i], _ = net.SplitHostPort(a)
	}
	var lk, zk string // two keys of one slot owned by node 0
	for i := 0; lk == ""; i++ {
		if k := "imp" + strconv.Itoa(i); owner(k) == 0 {
			lk, zk = "{"+k+"}l", "{"+k+"}z"
		}
	}
	slot := slotOfKey(lk)
	c0 := redis.NewClient(&redis.Options{Addr: tc.addrs[0], MaxRetries: -1})
	defer c0.Close()
	c1 := redis.NewClient(&redis.Options{Addr: tc.addrs[1], MaxRetries: -1})
	defer c1.Close()
	publish := func(epoch int, state string) {
		body := clusterYAML(epoch, ports, clusterRanges) +
			fmt.Sprintf("migrations:\n  - {slot: %d, from: %s, to: %s, state: %s}\n", slot, nodeID(0), nodeID(1), state)
		writeAtomic(t, tc.config, body)
		for _, a := range tc.addrs {
			rc := dialRaw(t, a)
			xdstest.Eventually(t, 10*time.Second, a+" on epoch "+strconv.Itoa(epoch), func() bool {
				return containsStr(rc.do(t, "CLUSTER", "INFO"), "cluster_current_epoch:"+strconv.Itoa(epoch)+"\r\n")
			})
		}
	}
	// Epoch 2: the slot is importing into node 1; node 0 still owns it.
	publish(2, "importing")
	lw, zw := dialRaw(t, tc.addrs[1]), dialRaw(t, tc.addrs[1])
	for _, w := range []struct {
		rc   *rawConn
		args []string
	}{{lw, []string{"BLPOP", lk, "0"}}, {zw, []string{"BZPOPMIN", zk, "0"}}} {
		if got := w.rc.do(t, "ASKING"); got != "+OK\r\n" {
			t.Fatalf("ASKING = %q", got)
		}
		w.rc.send(t, w.args...)
	}
	waitBlockedClients(t, c1, 2)
	// The data appears on the owner, and the slot starts migrating: node
	// 0's mover copies both keys to node 1.
	if err := c0.RPush(ctx(t), lk, "pushed-on-source").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c0.ZAdd(ctx(t), zk, redis.Z{Score: 1.5, Member: "m"}).Err(); err != nil {
		t.Fatal(err)
	}
	publish(3, "migrating")
	if got := lw.read(t, 10*time.Second); got != bulkPair(lk, "pushed-on-source") {
		t.Fatalf("list waiter got %q", got)
	}
	if got, want := zw.read(t, 10*time.Second), fmt.Sprintf("*3\r\n$%d\r\n%s\r\n$1\r\nm\r\n$3\r\n1.5\r\n", len(zk), zk); got != want {
		t.Fatalf("sorted-set waiter got %q, want %q", got, want)
	}
	waitBlockedClients(t, c1, 0)
}

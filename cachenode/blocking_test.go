package cachenode_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/internal/eventually"
)

// Blocking list commands end to end, through the server's wait: FIFO
// wake-up order, concurrent pushers and poppers, exact timeouts, pushes
// that serve several waiters (and a BLMOVE chain), clients that close
// while blocked, pipelines behind a blocked command, the TLS path, and in
// cluster mode -MOVED when the slot moves and -UNBLOCKED when the node
// becomes a replica. Nothing sleeps: waits poll INFO's blocked_clients (as
// Redis's own tests do) or read replies, under deadlines.

// blockedClients reads INFO clients' blocked_clients.
func blockedClients(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(ctx(t), "clients").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "blocked_clients:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatalf("no blocked_clients in %q", info)
	return 0
}

func waitBlockedClients(t *testing.T, c *redis.Client, n int) {
	t.Helper()
	eventually.True(t, 10*time.Second, fmt.Sprintf("%d blocked clients", n), func() bool { return blockedClients(t, c) == n })
}

// sendRaw writes one command in RESP on rc without reading.
func (rc *rawConn) send(t *testing.T, args ...string) {
	t.Helper()
	if _, err := rc.c.Write([]byte(respCommand(args...))); err != nil {
		t.Fatal(err)
	}
}

func respCommand(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// read reads one whole raw reply within d.
func (rc *rawConn) read(t *testing.T, d time.Duration) string {
	t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(d))
	var out strings.Builder
	if err := readReply(rc.r, &out); err != nil {
		t.Fatalf("reading a reply: %v (got %q)", err, out.String())
	}
	return out.String()
}

func bulkPair(k, v string) string {
	return fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(k), k, len(v), v)
}

func TestBlockingFIFOAndMultiServe(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	// Five clients block on the same key, one after the other.
	conns := make([]*rawConn, 5)
	for i := range conns {
		conns[i] = dialRaw(t, n.addrs.RESP)
		conns[i].send(t, "BLPOP", "q", "other", "0")
		waitBlockedClients(t, c, i+1)
	}
	// One push of three elements serves the three oldest, in order.
	if got := c.RPush(ctx(t), "q", "e0", "e1", "e2").Val(); got != 3 {
		t.Fatalf("RPUSH = %d (the reply counts the list before the waiters are served)", got)
	}
	for i := range 3 {
		if got, want := conns[i].read(t, 5*time.Second), bulkPair("q", fmt.Sprintf("e%d", i)); got != want {
			t.Fatalf("client %d got %q, want %q", i, got, want)
		}
	}
	if got := c.Exists(ctx(t), "q").Val(); got != 0 {
		t.Fatalf("EXISTS q = %d after serving every element", got)
	}
	waitBlockedClients(t, c, 2)
	// A push to the other key of a multi-key BLPOP serves the next one.
	c.LPush(ctx(t), "other", "o")
	if got := conns[3].read(t, 5*time.Second); got != bulkPair("other", "o") {
		t.Fatalf("client 3 got %q", got)
	}
	// A BLMOVE served by a push feeds the BLPOP waiting on its destination.
	chain := dialRaw(t, n.addrs.RESP)
	chain.send(t, "BLMOVE", "src", "q", "RIGHT", "LEFT", "0")
	waitBlockedClients(t, c, 2)
	c.RPush(ctx(t), "src", "moved")
	if got := chain.read(t, 5*time.Second); got != "$5\r\nmoved\r\n" {
		t.Fatalf("BLMOVE got %q", got)
	}
	if got := conns[4].read(t, 5*time.Second); got != bulkPair("q", "moved") {
		t.Fatalf("client 4 got %q (BLMOVE's push must wake it)", got)
	}
	waitBlockedClients(t, c, 0)
	if got := c.Exists(ctx(t), "src", "q").Val(); got != 0 {
		t.Fatalf("EXISTS src q = %d", got)
	}
}

// TestBlockingConcurrentPushers: pushers and poppers race; every element
// is popped exactly once and nothing is left.
func TestBlockingConcurrentPushers(t *testing.T) {
	n := startNode(t)
	c := n.client(t, func(o *redis.Options) { o.PoolSize = 32 })
	const pushers, poppers, each = 4, 6, 250
	total := pushers * each
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	popped := make(chan struct{}, total)
	errs := make(chan error, pushers+poppers)
	done := make(chan struct{})
	for p := range poppers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys := []string{"cq1", "cq2"}
			for {
				select {
				case <-done:
					return
				default:
				}
				var v []string
				var err error
				if p%2 == 0 {
					v, err = c.BLPop(ctx(t), 200*time.Millisecond, keys...).Result()
				} else {
					var kv *redis.KeyValuesCmd = c.BLMPop(ctx(t), 200*time.Millisecond, "left", 3, keys...)
					var k string
					var vals []string
					k, vals, err = kv.Result()
					v = append([]string{k}, vals...)
				}
				if errors.Is(err, redis.Nil) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, x := range v[1:] {
					got[x]++
					popped <- struct{}{}
				}
				mu.Unlock()
			}
		}()
	}
	for p := range pushers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				k := []string{"cq1", "cq2"}[i%2]
				var err error
				if i%3 == 0 {
					err = c.RPush(ctx(t), k, fmt.Sprintf("p%d-%d", p, i)).Err()
				} else {
					err = c.LPush(ctx(t), k, fmt.Sprintf("p%d-%d", p, i)).Err()
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	deadline := time.After(20 * time.Second)
	for range total {
		select {
		case <-popped:
		case err := <-errs:
			t.Fatal(err)
		case <-deadline:
			t.Fatalf("only %d of %d elements popped", len(got), total)
		}
	}
	close(done)
	wg.Wait()
	if len(got) != total {
		t.Fatalf("%d distinct elements popped, want %d", len(got), total)
	}
	for v, k := range got {
		if k != 1 {
			t.Fatalf("%s popped %d times", v, k)
		}
	}
	if n := c.Exists(ctx(t), "cq1", "cq2").Val(); n != 0 {
		t.Fatalf("%d lists left", n)
	}
}

// TestBlockingTimeouts: a timeout ends the wait when it is due, not
// before and not much after (fractions are milliseconds); 0 waits on.
func TestBlockingTimeouts(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	forever := dialRaw(t, n.addrs.RESP)
	forever.send(t, "BRPOP", "never", "0")
	waitBlockedClients(t, c, 1)
	const tolerance = 250 * time.Millisecond
	for _, tc := range []struct {
		args []string
		want time.Duration
		null string
	}{
		{[]string{"BLPOP", "t1", "0.15"}, 150 * time.Millisecond, "*-1\r\n"},
		{[]string{"BLMOVE", "t1", "t2", "LEFT", "LEFT", "0.3"}, 300 * time.Millisecond, "*-1\r\n"},
		{[]string{"BLMPOP", "0.05", "2", "t1", "t2", "RIGHT"}, 50 * time.Millisecond, "*-1\r\n"},
		{[]string{"BRPOPLPUSH", "t1", "t2", "0.2"}, 200 * time.Millisecond, "*-1\r\n"},
		{[]string{"BZPOPMIN", "t1", "t2", "0.1"}, 100 * time.Millisecond, "*-1\r\n"},
		{[]string{"BZMPOP", "0.05", "1", "t1", "MAX", "COUNT", "2"}, 50 * time.Millisecond, "*-1\r\n"},
	} {
		rc := dialRaw(t, n.addrs.RESP)
		start := time.Now()
		rc.send(t, tc.args...)
		got := rc.read(t, 5*time.Second)
		took := time.Since(start)
		if got != tc.null {
			t.Fatalf("%v = %q, want %q", tc.args, got, tc.null)
		}
		if took < tc.want || took > tc.want+tolerance {
			t.Fatalf("%v timed out after %v, want %v (+%v)", tc.args, took, tc.want, tolerance)
		}
	}
	// RESP3's null.
	rc := dialRaw(t, n.addrs.RESP)
	rc.do(t, "HELLO", "3")
	rc.send(t, "BLPOP", "t1", "0.01")
	if got := rc.read(t, 5*time.Second); got != "_\r\n" {
		t.Fatalf("RESP3 timeout = %q", got)
	}
	// The client with timeout 0 is still waiting after all of that.
	if got := blockedClients(t, c); got != 1 {
		t.Fatalf("blocked_clients = %d, want the timeout-0 client", got)
	}
	c.RPush(ctx(t), "never", "x")
	if got := forever.read(t, 5*time.Second); got != bulkPair("never", "x") {
		t.Fatalf("timeout-0 client got %q", got)
	}
}

// TestBlockingClientClosed: a blocked client that goes away leaves the
// queue, and a later push is not consumed by it; a blocked client's
// pipeline runs after it is served, in order.
func TestBlockingClientClosed(t *testing.T) {
	for _, tls := range []bool{false, true} {
		t.Run(map[bool]string{false: "plaintext", true: "tls"}[tls], func(t *testing.T) {
			var n *node
			if tls {
				n = startNode(t, withTLS())
			} else {
				n = startNode(t)
			}
			c := n.client(t)
			dial := func() net.Conn {
				if !tls {
					return dialRaw(t, n.addrs.RESP).c
				}
				return dialTLS(t, n)
			}
			gone := dial()
			if _, err := gone.Write([]byte(respCommand("BLPOP", "k", "0"))); err != nil {
				t.Fatal(err)
			}
			waitBlockedClients(t, c, 1)
			gone.Close()
			waitBlockedClients(t, c, 0)
			c.RPush(ctx(t), "k", "kept")
			if got := c.LLen(ctx(t), "k").Val(); got != 1 {
				t.Fatalf("LLEN k = %d: the closed client took the element", got)
			}
			c.Del(ctx(t), "k")

			// BLPOP, then two more commands in the same write: they wait.
			pc := dial()
			defer pc.Close()
			pipe := respCommand("BLPOP", "k", "0") + respCommand("SET", "after", "1") + respCommand("GET", "after")
			if _, err := pc.Write([]byte(pipe)); err != nil {
				t.Fatal(err)
			}
			waitBlockedClients(t, c, 1)
			if got := c.Exists(ctx(t), "after").Val(); got != 0 {
				t.Fatal("a command behind a blocked BLPOP ran before it was served")
			}
			c.RPush(ctx(t), "k", "v")
			r := &rawConn{c: pc, r: newReader(pc)}
			for _, want := range []string{bulkPair("k", "v"), "+OK\r\n", "$1\r\n1\r\n"} {
				if got := r.read(t, 5*time.Second); got != want {
					t.Fatalf("pipeline reply %q, want %q", got, want)
				}
			}
		})
	}
}

// TestBlockingInsideMultiDoesNotBlock and pushes in a transaction: a
// blocking command queued in MULTI answers at once; the clients blocked on
// a key a transaction pushed to are served after EXEC, with what the
// transaction left.
func TestBlockingWithTransactions(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	rc := dialRaw(t, n.addrs.RESP)
	rc.do(t, "MULTI")
	rc.do(t, "BLPOP", "mk", "0")
	rc.do(t, "BLMOVE", "mk", "mk2", "LEFT", "LEFT", "0")
	if got := rc.do(t, "EXEC"); got != "*2\r\n*-1\r\n$-1\r\n" {
		t.Fatalf("EXEC of blocking commands = %q", got)
	}
	waiter := dialRaw(t, n.addrs.RESP)
	waiter.send(t, "BLPOP", "mk", "0")
	waitBlockedClients(t, c, 1)
	rc.do(t, "MULTI")
	rc.do(t, "RPUSH", "mk", "a", "b")
	rc.do(t, "LPOP", "mk")
	if got := rc.do(t, "EXEC"); got != "*2\r\n:2\r\n$1\r\na\r\n" {
		t.Fatalf("EXEC = %q", got)
	}
	if got := waiter.read(t, 5*time.Second); got != bulkPair("mk", "b") {
		t.Fatalf("waiter got %q after EXEC", got)
	}
}

// TestBlockingClusterUnblock: in cluster mode a blocked client gets
// -MOVED once its slot moves to another node, and -UNBLOCKED (and its
// connection closes) once its node becomes a replica.
func TestBlockingClusterUnblock(t *testing.T) {
	tc := startCluster(t)
	ports := make([]string, 3)
	for i, a := range tc.addrs {
		_, ports[i], _ = net.SplitHostPort(a)
	}
	key := func(node int) string {
		for i := 0; ; i++ {
			if k := "bk" + strconv.Itoa(i); owner(k) == node {
				return k
			}
		}
	}
	k1, k2 := key(1), key(2)
	c1 := redis.NewClient(&redis.Options{Addr: tc.addrs[1], Protocol: 3, MaxRetries: -1})
	defer c1.Close()
	c2 := redis.NewClient(&redis.Options{Addr: tc.addrs[2], Protocol: 3, MaxRetries: -1})
	defer c2.Close()
	// CROSSSLOT before anything blocks.
	for _, args := range [][]string{{"BLMPOP", "0", "2", k1, k2, "LEFT"}, {"BZMPOP", "0", "2", k1, k2, "MIN"}, {"BZPOPMIN", k1, k2, "0"}, {"ZMPOP", "2", k1, k2, "MAX"}} {
		if got := dialRaw(t, tc.addrs[1]).do(t, args...); !strings.HasPrefix(got, "-CROSSSLOT") {
			t.Fatalf("%v across slots = %q", args, got)
		}
	}
	moved := dialRaw(t, tc.addrs[1])
	moved.send(t, "BLPOP", k1, "0")
	movedZ := dialRaw(t, tc.addrs[1])
	movedZ.send(t, "BZPOPMAX", k1, "0")
	demoted := dialRaw(t, tc.addrs[2])
	demoted.send(t, "BRPOP", k2, "0")
	waitBlockedClients(t, c1, 2)
	waitBlockedClients(t, c2, 1)
	// Epoch 2: node 0 takes node 1's slots; node 2 becomes node 0's replica
	// (its slots go to node 0 as well).
	var b strings.Builder
	fmt.Fprintf(&b, "epoch: 2\nnodes:\n")
	fmt.Fprintf(&b, "  - id: %s\n    host: 127.0.0.1\n    port: %s\n    bus_port: %d\n    slots: [\"0-16383\"]\n", nodeID(0), ports[0], busPort(ports[0]))
	fmt.Fprintf(&b, "  - id: %s\n    host: 127.0.0.1\n    port: %s\n    bus_port: %d\n", nodeID(1), ports[1], busPort(ports[1]))
	fmt.Fprintf(&b, "  - id: %s\n    host: 127.0.0.1\n    port: %s\n    bus_port: %d\n    replica_of: %s\n", nodeID(2), ports[2], busPort(ports[2]), nodeID(0))
	writeAtomic(t, tc.config, b.String())
	want := fmt.Sprintf("-MOVED %d %s\r\n", slotOfKey(k1), tc.addrs[0])
	if got := moved.read(t, 10*time.Second); got != want {
		t.Fatalf("blocked client after its slot moved: %q, want %q", got, want)
	}
	if got := movedZ.read(t, 10*time.Second); got != want {
		t.Fatalf("BZPOPMAX client after its slot moved: %q, want %q", got, want)
	}
	if got := demoted.read(t, 10*time.Second); got != "-UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)\r\n" {
		t.Fatalf("blocked client after its node became a replica: %q", got)
	}
	demoted.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := demoted.r.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the UNBLOCKED connection stays open (%v)", err)
	}
}

// dialTLS opens a raw TLS connection to a node started withTLS.
func dialTLS(t *testing.T, n *node) net.Conn {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", n.addrs.RESP, n.tls)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

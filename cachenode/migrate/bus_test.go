package migrate

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/bus"
	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/resp"
)

// TestMoveOverBus moves a slot through the real bus port, with a secret:
// every kind of value and its TTL arrive, and a wrong secret moves nothing.
func TestMoveOverBus(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &bus.Server{Secret: "s3cret"}
	srv.Handle(ImportCommand, ImportHandler(b.state, b.reg, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Serve(ctx, lis)
	exec := func(n *node, args string) string {
		var w resp.Writer
		var a [][]byte
		for _, f := range strings.Fields(args) {
			a = append(a, []byte(f))
		}
		n.eng.Exec(n.eng.NewSession("t"), a, &w)
		return string(w.Buf)
	}
	for _, c := range []string{"SET {bar}s v EX 3600", "SET {bar}p v", "HSET {bar}h f v", "SADD {bar}set m", "RPUSH {bar}l a b", "ZADD {bar}z 1 a 2.5 b -inf c"} {
		if r := exec(a, c); r[0] == '-' {
			t.Fatalf("%s: %s", c, r)
		}
	}
	a.install(t, 2, cluster.Importing)
	b.install(t, 2, cluster.Importing)
	b.install(t, 3, cluster.Migrating)
	a.install(t, 3, cluster.Migrating)
	addr := lis.Addr().String()
	send := func(secret string) Sender {
		s := &BusSender{Bus: bus.Peer{Secret: secret}}
		return func(ctx context.Context, _ string, batch []byte) error { return s.Send(ctx, addr, batch) }
	}
	run := func(s Sender) *Mover {
		mv, err := New(Config{State: a.state, Registry: a.reg, Send: s, Poll: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		mctx, mcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer mcancel()
		mv.Run(mctx)
		return mv
	}
	if st := run(send("wrong")).Status(); len(st) != 1 || st[0].Done || st[0].Moved != 0 || st[0].Err == "" {
		t.Fatalf("wrong secret: %+v", st)
	}
	if n := exec(a, "DBSIZE"); n != ":6\r\n" {
		t.Fatalf("source after a refused move: %s", n)
	}
	if st := run(send("s3cret")).Status(); len(st) != 1 || !st[0].Done || st[0].Moved != 6 {
		t.Fatalf("move: %+v", st)
	}
	b.install(t, 4, cluster.Handoff)
	if r := exec(b, "PTTL {bar}s"); !strings.HasPrefix(r, ":") || r == ":-2\r\n" || r == ":-1\r\n" {
		t.Fatalf("TTL'd string on the target: PTTL %q", r)
	}
	if ttl, _ := strconv.Atoi(strings.TrimSpace(exec(b, "PTTL {bar}s")[1:])); ttl < 3590000 {
		t.Fatalf("TTL %d", ttl)
	}
	for c, want := range map[string]string{"GET {bar}p": "$1\r\nv\r\n", "HGET {bar}h f": "$1\r\nv\r\n", "SISMEMBER {bar}set m": ":1\r\n", "LLEN {bar}l": ":2\r\n", "PTTL {bar}p": ":-1\r\n",
		"ZRANGE {bar}z 0 -1 WITHSCORES": "*6\r\n$1\r\nc\r\n$4\r\n-inf\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$3\r\n2.5\r\n"} {
		if r := exec(b, c); r != want {
			t.Errorf("%s on the target = %q, want %q", c, r, want)
		}
	}
}

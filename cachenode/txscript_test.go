package cachenode_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode"
	"github.com/portico-io/portico/internal/eventually"
)

// TestTransactionsAreAtomic: transactions that move units between two
// keys, and optimistic (WATCH) increments, under concurrent writers and
// readers. No reader sees a half-applied transaction, and no increment is
// lost: every EXEC that ran, and every plain INCR, is in the total.
func TestTransactionsAreAtomic(t *testing.T) {
	n := startNode(t)
	c := n.client(t, func(o *redis.Options) { o.PoolSize = 16 })
	cx := ctx(t)
	if err := c.MSet(cx, "a", 1000, "b", 0, "counter", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var moved, execs, incrs, torn atomic.Int64
	stop := make(chan struct{})
	for i := 0; i < 4; i++ { // movers: a-1, b+1 in one transaction
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				_, err := c.TxPipelined(cx, func(p redis.Pipeliner) error {
					p.DecrBy(cx, "a", 1)
					p.IncrBy(cx, "b", 1)
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
				moved.Add(1)
			}
		}()
	}
	for i := 0; i < 4; i++ { // optimistic increments with WATCH, retried on abort
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				for {
					err := c.Watch(cx, func(tx *redis.Tx) error {
						v, err := tx.Get(cx, "counter").Int()
						if err != nil {
							return err
						}
						_, err = tx.TxPipelined(cx, func(p redis.Pipeliner) error {
							p.Set(cx, "counter", v+1, 0)
							return nil
						})
						return err
					}, "counter")
					if errors.Is(err, redis.TxFailedErr) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					execs.Add(1)
					break
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // a plain writer of the watched key
		defer wg.Done()
		for j := 0; j < 100; j++ {
			if err := c.Incr(cx, "counter").Err(); err != nil {
				t.Error(err)
				return
			}
			incrs.Add(1)
		}
	}()
	readers := sync.WaitGroup{}
	for i := 0; i < 2; i++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				vs, err := c.MGet(cx, "a", "b").Result()
				if err != nil {
					t.Error(err)
					return
				}
				a, _ := strconv.Atoi(vs[0].(string))
				b, _ := strconv.Atoi(vs[1].(string))
				if a+b != 1000 {
					torn.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	if torn.Load() != 0 {
		t.Errorf("%d reads saw a half-applied transaction", torn.Load())
	}
	b, _ := c.Get(cx, "b").Int()
	if int64(b) != moved.Load() {
		t.Errorf("b = %d, want %d", b, moved.Load())
	}
	got, _ := c.Get(cx, "counter").Int()
	if want := execs.Load() + incrs.Load(); int64(got) != want {
		t.Errorf("counter = %d, want %d EXECs + %d INCRs = %d", got, execs.Load(), incrs.Load(), want)
	}
}

// TestWatchAbortsOnAnyChange: a watched key changed by another client, by
// its TTL running out, or by eviction makes EXEC answer nil and run
// nothing; an unchanged one lets it run.
func TestWatchAbortsOnAnyChange(t *testing.T) {
	n := startNode(t, withNamespaces(t, "namespaces:\n  small:\n    secret: s\n    maxmemory: 64kb\n    policy: allkeys-lru\n"))
	cx := ctx(t)
	one := func(mod ...func(*redis.Options)) *redis.Conn {
		c := n.client(t, mod...)
		conn := c.Conn()
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	exec := func(conn *redis.Conn, key string) error {
		_, err := conn.TxPipelined(cx, func(p redis.Pipeliner) error {
			p.Set(cx, key+":done", "1", 0)
			return nil
		})
		return err
	}
	watcher, other := one(), one()

	t.Run("unchanged", func(t *testing.T) {
		_ = other.Set(cx, "k", "v", 0)
		if err := watcher.Do(cx, "WATCH", "k").Err(); err != nil {
			t.Fatal(err)
		}
		if err := exec(watcher, "k"); err != nil {
			t.Fatalf("EXEC = %v, want it to run", err)
		}
	})
	t.Run("another client", func(t *testing.T) {
		_ = other.Set(cx, "k", "v", 0)
		_ = watcher.Do(cx, "WATCH", "k")
		_ = other.Set(cx, "k", "v2", 0)
		if err := exec(watcher, "other"); !errors.Is(err, redis.TxFailedErr) {
			t.Fatalf("EXEC = %v, want nil (aborted)", err)
		}
		if other.Exists(cx, "other:done").Val() != 0 {
			t.Fatal("an aborted EXEC ran")
		}
	})
	t.Run("expiry", func(t *testing.T) {
		_ = other.Set(cx, "k", "v", 10*time.Second)
		_ = watcher.Do(cx, "WATCH", "k")
		n.clock.Advance(11 * time.Second)
		if err := exec(watcher, "expiry"); !errors.Is(err, redis.TxFailedErr) {
			t.Fatalf("EXEC = %v, want nil (the watched key expired)", err)
		}
	})
	t.Run("already expired when watched", func(t *testing.T) {
		_ = other.Set(cx, "k", "v", 10*time.Second)
		n.clock.Advance(11 * time.Second)
		_ = watcher.Do(cx, "WATCH", "k")
		if err := exec(watcher, "dead"); err != nil {
			t.Fatalf("EXEC = %v: a key already expired when watched did not change", err)
		}
	})
	t.Run("eviction", func(t *testing.T) {
		auth := func(o *redis.Options) { o.Username, o.Password = "small", "s" }
		w, o := one(auth), one(auth)
		if err := o.Set(cx, "victim", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := w.Do(cx, "WATCH", "victim").Err(); err != nil {
			t.Fatal(err)
		}
		val := strings.Repeat("x", 1000)
		for i := 0; o.Exists(cx, "victim").Val() == 1; i++ {
			if i > 10000 {
				t.Fatal("the watched key was never evicted")
			}
			if err := o.Set(cx, fmt.Sprintf("fill:%d", i), val, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := exec(w, "evicted"); !errors.Is(err, redis.TxFailedErr) {
			t.Fatalf("EXEC = %v, want nil (the watched key was evicted)", err)
		}
	})
	t.Run("flush", func(t *testing.T) {
		_ = other.Set(cx, "k", "v", 0)
		_ = watcher.Do(cx, "WATCH", "k")
		_ = other.FlushDB(cx)
		if err := exec(watcher, "flush"); !errors.Is(err, redis.TxFailedErr) {
			t.Fatalf("EXEC = %v, want nil (flushed)", err)
		}
	})
}

// TestScriptBusyAndKill: a script past the time limit makes the other
// connections of its namespace get BUSY (others namespaces are not held
// up); SCRIPT KILL stops one that has not written, and refuses one that
// has (UNKILLABLE) until it ends by itself.
func TestScriptBusyAndKill(t *testing.T) {
	n := startNode(t, withConfig(func(c *cachenode.Config) { c.ScriptTimeLimit = 50 * time.Millisecond }),
		withNamespaces(t, "namespaces:\n  other:\n    secret: s\n"))
	cx := ctx(t)
	runner := n.client(t, func(o *redis.Options) { o.ReadTimeout = 20 * time.Second })
	admin := n.client(t)
	tenant := n.client(t, func(o *redis.Options) { o.Username, o.Password = "other", "s" })

	done := make(chan error, 1)
	go func() { done <- runner.Eval(cx, "local i = 0 while true do i = i + 1 end", nil).Err() }()
	// Poll with PING, which takes no lock: a command that queued for the
	// script's locks before the time limit waits for the script.
	eventually.True(t, 10*time.Second, "BUSY", func() bool {
		err := admin.Ping(cx).Err()
		return err != nil && strings.HasPrefix(err.Error(), "BUSY ")
	})
	if err := admin.Get(cx, "x").Err(); err == nil || !strings.HasPrefix(err.Error(), "BUSY ") {
		t.Errorf("GET during a busy script = %v, want BUSY", err)
	}
	if err := tenant.Set(cx, "y", "1", 0).Err(); err != nil {
		t.Errorf("another namespace during a busy script: %v", err)
	}
	if err := admin.Do(cx, "SCRIPT", "KILL").Err(); err != nil {
		t.Fatalf("SCRIPT KILL = %v", err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.HasPrefix(err.Error(), "ERR Script killed by user with SCRIPT KILL...") {
			t.Fatalf("killed script = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the killed script did not end")
	}
	if err := admin.Set(cx, "x", "1", 0).Err(); err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	if err := admin.Do(cx, "SCRIPT", "KILL").Err(); err == nil || err.Error() != "NOTBUSY No scripts in execution right now." {
		t.Fatalf("SCRIPT KILL with nothing running = %v", err)
	}
	// pcall cannot catch a kill.
	go func() {
		done <- runner.Eval(cx, "while true do pcall(function() local i = 0 while true do i = i + 1 end end) end", nil).Err()
	}()
	eventually.True(t, 10*time.Second, "BUSY", func() bool {
		err := admin.Do(cx, "SCRIPT", "KILL").Err()
		return err == nil
	})
	if err := <-done; err == nil || !strings.Contains(err.Error(), "Script killed") {
		t.Fatalf("killed script under pcall = %v", err)
	}

	// A script that wrote cannot be killed: it runs to its end (here when
	// the node's clock, which the test moves, passes a second on).
	go func() {
		done <- runner.Eval(cx, `redis.call('SET', KEYS[1], 'w')
local stop = tonumber(redis.call('TIME')[1]) + 1
while tonumber(redis.call('TIME')[1]) <= stop do end
return 'finished'`, []string{"written"}).Err()
	}()
	eventually.True(t, 10*time.Second, "UNKILLABLE", func() bool {
		err := admin.Do(cx, "SCRIPT", "KILL").Err()
		return err != nil && strings.HasPrefix(err.Error(), "UNKILLABLE ")
	})
	n.clock.Advance(2 * time.Second)
	if err := <-done; err != nil {
		t.Fatalf("unkillable script = %v, want it to finish", err)
	}
	if v := admin.Get(cx, "written").Val(); v != "w" {
		t.Fatalf("written = %q", v)
	}
}

// TestScriptErrorsLeaveTheNodeUsable: scripts that raise, return errors or
// break the sandbox's rules do not poison the states later scripts run on.
func TestScriptErrorsLeaveTheNodeUsable(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	cx := ctx(t)
	bad := []string{
		"error('boom')", "return redis.call('INCR', 'notanumber', 'x')", "rawset(_G, 'leak', 1)",
		"table.insert(_G, 'leak')", "string.leak = 1", "setmetatable(_G, nil)", "getmetatable('').__index.upper = nil",
		"local s = string s.len = nil", "return loadstring('return 1')()", "return coroutine.wrap(function() error('x') end)()",
	}
	_ = c.Set(cx, "notanumber", "x", 0)
	for _, s := range bad {
		if err := c.Eval(cx, s, nil).Err(); err == nil {
			t.Errorf("%q ran without error", s)
		}
	}
	for i := 0; i < 20; i++ { // every pooled state is clean
		v, err := c.Eval(cx, "return {type(rawget(_G, 'leak')), #_G, ('x'):upper(), string.len('ab'), type(rawget(string, 'leak')), type(string.upper)}", nil).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(v); got != "[nil 0 X 2 nil function]" {
			t.Fatalf("after bad scripts: %s", got)
		}
	}
}

// TestClusterTransactionsAndScripts: in cluster mode a transaction's and a
// script's keys must be in one slot; a script may not reach a key of
// another slot it did not declare; go-redis's ClusterClient runs
// transactions and EVALSHA across the nodes.
func TestClusterTransactionsAndScripts(t *testing.T) {
	tc := startCluster(t)
	cx := ctx(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: tc.addrs, MaxRedirects: 3})
	t.Cleanup(func() { cc.Close() })
	// Two keys of one slot, and one key of another slot on the same node.
	a, b := "{user1}:a", "{user1}:b"
	other := ""
	for i := 0; other == ""; i++ {
		k := fmt.Sprintf("other%d", i)
		if owner(k) == owner(a) && slotOfKey(k) != slotOfKey(a) {
			other = k
		}
	}
	direct := redis.NewClient(&redis.Options{Addr: tc.addrs[owner(a)], MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { direct.Close() })
	conn := direct.Conn()
	t.Cleanup(func() { conn.Close() })

	// EXEC over two slots: CROSSSLOT, the transaction discarded.
	for _, cmd := range [][]any{{"MULTI"}, {"SET", a, "1"}, {"SET", other, "2"}} {
		if err := conn.Do(cx, cmd...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	if err := conn.Do(cx, "EXEC").Err(); err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT ") {
		t.Fatalf("EXEC over two slots = %v", err)
	}
	if err := conn.Do(cx, "EXEC").Err(); err == nil || err.Error() != "ERR EXEC without MULTI" {
		t.Fatalf("EXEC after CROSSSLOT = %v, want the transaction discarded", err)
	}
	// A key of another node: MOVED while queuing, then EXECABORT.
	foreign := ""
	for i := 0; foreign == ""; i++ {
		if k := fmt.Sprintf("f%d", i); owner(k) != owner(a) {
			foreign = k
		}
	}
	_ = conn.Do(cx, "MULTI")
	if err := conn.Do(cx, "SET", foreign, "1").Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED ") {
		t.Fatalf("queued SET of another node's key = %v", err)
	}
	if err := conn.Do(cx, "EXEC").Err(); err == nil || !strings.HasPrefix(err.Error(), "EXECABORT ") {
		t.Fatalf("EXEC after MOVED = %v", err)
	}
	// Scripts: declared keys of two slots, an undeclared key of another slot.
	if err := conn.Do(cx, "EVAL", "return 1", "2", a, other).Err(); err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT ") {
		t.Fatalf("EVAL over two slots = %v", err)
	}
	err := conn.Do(cx, "EVAL", "redis.call('SET', KEYS[1], 1) return redis.call('SET', ARGV[1], 2)", "1", a, other).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "ERR Script attempted to access keys that do not hash to the same slot") {
		t.Fatalf("undeclared key of another slot = %v", err)
	}
	err = conn.Do(cx, "EVAL", "return redis.call('GET', ARGV[1])", "1", a, foreign).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "ERR Script attempted to access a non local key in a cluster node") {
		t.Fatalf("undeclared key of another node = %v", err)
	}
	if v, err := conn.Do(cx, "EVAL", "redis.call('SET', ARGV[1], 'x') return redis.call('GET', ARGV[1])", "0", "{user1}:c").Text(); err != nil || v != "x" {
		t.Fatalf("a script without declared keys on a local key = %q, %v", v, err)
	}

	// go-redis ClusterClient: transactions per slot, scripts by SHA.
	if _, err := cc.TxPipelined(cx, func(p redis.Pipeliner) error {
		p.Set(cx, a, "10", 0)
		p.IncrBy(cx, b, 5)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sum := redis.NewScript("return tonumber(redis.call('GET', KEYS[1])) + tonumber(redis.call('GET', KEYS[2]))")
	for i := 0; i < 3; i++ {
		keys := []string{fmt.Sprintf("{t%d}:x", i), fmt.Sprintf("{t%d}:y", i)}
		_ = cc.Set(cx, keys[0], 1, 0)
		_ = cc.Set(cx, keys[1], 2, 0)
		if v, err := sum.Run(cx, cc, keys).Int(); err != nil || v != 3 {
			t.Fatalf("EVALSHA on %v = %d, %v", keys, v, err)
		}
	}
	if err := cc.Watch(cx, func(tx *redis.Tx) error {
		_, err := tx.TxPipelined(cx, func(p redis.Pipeliner) error {
			p.Incr(cx, a)
			return nil
		})
		return err
	}, a); err != nil {
		t.Fatalf("WATCH on a cluster: %v", err)
	}
}

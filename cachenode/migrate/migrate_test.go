package migrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/command"
	"github.com/portico-io/portico/cachenode/dump"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/resp"
	"github.com/portico-io/portico/cachenode/slots"
	"github.com/portico-io/portico/internal/eventually"
)

// node is one in-process cache node: registry, slot map, command engine.
type node struct {
	id    string
	reg   *namespace.Registry
	state *cluster.State
	eng   *command.Engine
}

const mapDoc = `
epoch: %d
nodes:
  - {id: a, host: 127.0.0.1, port: 7000, slots: [%s]}
  - {id: b, host: 127.0.0.1, port: 7001, slots: [%s]}
`

func mapFor(t testing.TB, epoch uint64, state, self string) *cluster.Map {
	a, b := `"0-8191"`, `"8192-16383"`
	slot := slots.Of([]byte("{bar}"))
	if state == cluster.Handoff || state == "done" {
		a = fmt.Sprintf(`"0-%d", "%d-8191"`, slot-1, slot+1)
		b = fmt.Sprintf(`"%d", "8192-16383"`, slot)
	}
	doc := fmt.Sprintf(mapDoc, epoch, a, b)
	if state != "" && state != "done" {
		doc += fmt.Sprintf("migrations: [{slot: %d, from: a, to: b, state: %s}]\n", slot, state)
	}
	m, err := cluster.Parse([]byte(doc), self)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newNode(t testing.TB, id string) *node {
	n := &node{id: id, reg: namespace.NewRegistry(namespace.RegistryConfig{Shards: 8})}
	if err := n.reg.Apply([]namespace.Settings{{Name: "default"}, {Name: "tenant"}}); err != nil {
		t.Fatal(err)
	}
	n.state = cluster.NewState(mapFor(t, 1, "", id))
	eng, err := command.New(command.Config{Registry: n.reg, Cluster: n.state})
	if err != nil {
		t.Fatal(err)
	}
	n.eng = eng
	return n
}

func (n *node) install(t testing.TB, epoch uint64, state string) {
	if err := n.state.Swap(mapFor(t, epoch, state, n.id)); err != nil {
		t.Fatal(err)
	}
}

// client follows MOVED and ASK between the two nodes as a cluster client does.
type client struct {
	nodes map[string]*node // by port
	sess  map[string]*command.Session
	mu    sync.Mutex
}

func newClient(a, b *node) *client {
	return &client{nodes: map[string]*node{"7000": a, "7001": b},
		sess: map[string]*command.Session{"7000": a.eng.NewSession("t"), "7001": b.eng.NewSession("t")}}
}

// do runs args starting at node port, following redirects; it returns the
// reply and how many redirects it took. The tests send single-key
// commands, which never get TRYAGAIN: that reply is returned, like any
// other, and fails the caller's check.
func (c *client) do(t testing.TB, port string, args ...string) (string, int) {
	var w resp.Writer
	asking := false
	for hop := 0; hop < 10; hop++ {
		n, s := c.nodes[port], c.sess[port]
		if asking {
			w.Reset()
			n.eng.Exec(s, [][]byte{[]byte("ASKING")}, &w)
		}
		a := make([][]byte, len(args))
		for i, x := range args {
			a[i] = []byte(x)
		}
		w.Reset()
		n.eng.Exec(s, a, &w)
		reply := string(w.Buf)
		switch {
		case strings.HasPrefix(reply, "-MOVED "), strings.HasPrefix(reply, "-ASK "):
			f := strings.Fields(strings.TrimSpace(reply))
			port = f[2][strings.LastIndexByte(f[2], ':')+1:]
			asking = f[0] == "-ASK"
		default:
			return reply, hop
		}
	}
	t.Errorf("%v: redirect loop", args)
	return "", 10
}

// TestMigrationUnderLoad moves a slot holding keys in two namespaces while
// writers keep incrementing counters in it through redirects: no increment
// is lost, no redirect loops, and at the end every key lives only on the
// target with its final value.
func TestMigrationUnderLoad(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	cl := newClient(a, b)
	const keys = 300
	for i := 0; i < keys; i++ {
		if r, _ := cl.do(t, "7000", "SET", "{bar}"+strconv.Itoa(i), "0"); r != "+OK\r\n" {
			t.Fatalf("seed: %q", r)
		}
	}
	// Keys of the other namespace, and a list, with a TTL.
	ta := a.eng.NewSession("t2")
	var w resp.Writer
	ta.NS, _ = a.reg.Get("tenant")
	for _, cmd := range [][]string{{"RPUSH", "{bar}list", "x", "y", "z"}, {"PEXPIRE", "{bar}list", "600000"}, {"SET", "{bar}ttl", "v", "EX", "3600"}} {
		w.Reset()
		args := make([][]byte, len(cmd))
		for i, x := range cmd {
			args[i] = []byte(x)
		}
		a.eng.Exec(ta, args, &w)
	}

	var sentMu sync.Mutex
	sentKeys := map[string]int{}
	send := func(_ context.Context, addr string, batch []byte) error {
		if addr != "127.0.0.1:17001" {
			return fmt.Errorf("sent to %s", addr)
		}
		for rest := batch; len(rest) > 0; {
			r, n, _ := dump.ReadRecord(rest)
			rest = rest[n:]
			sentMu.Lock()
			sentKeys[r.NS+"/"+string(r.Key)]++
			if sentKeys[r.NS+"/"+string(r.Key)] > 1 {
				t.Errorf("sent twice: %s/%q", r.NS, r.Key)
			}
			sentMu.Unlock()
		}
		_, err := Import(b.state, b.reg, batch, time.Now().UnixMilli(), nil)
		return err
	}
	var passMu sync.Mutex
	var passes []Pass
	mv, err := New(Config{State: a.state, Registry: a.reg, Send: send, BatchKeys: 16, KeysPerSecond: 20000, Poll: 5 * time.Millisecond,
		OnPass: func(p Pass) {
			passMu.Lock()
			passes = append(passes, p)
			passMu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go mv.Run(ctx)

	// Writers: each owns some keys and increments them; any wrong reply fails.
	var incrs [keys]atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var redirects, ops atomic.Int64
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			c := newClient(a, b) // a client per goroutine: sessions are not shared
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := (i*4 + g) % keys
				start := "7000"
				if i%3 == 0 {
					start = "7001"
				}
				r, hops := c.do(t, start, "INCR", "{bar}"+strconv.Itoa(k))
				if !strings.HasPrefix(r, ":") {
					t.Errorf("INCR: %q", r)
					return
				}
				redirects.Add(int64(hops))
				incrs[k].Add(1)
				ops.Add(1)
			}
		}(g)
	}
	// traffic waits until the writers have made another 200 increments:
	// every map state, and every moment two nodes disagree on the map,
	// gets traffic however slow the machine.
	traffic := func(on string) {
		t.Helper()
		from := ops.Load()
		eventually.True(t, 20*time.Second, "200 increments "+on, func() bool { return ops.Load() >= from+200 })
	}
	// waitPass waits for a poll of the mover, from now on, for which ok
	// holds.
	waitPass := func(what string, ok func(Pass) bool) {
		t.Helper()
		passMu.Lock()
		from := len(passes)
		passMu.Unlock()
		eventually.True(t, 20*time.Second, "a mover poll "+what, func() bool {
			passMu.Lock()
			defer passMu.Unlock()
			return slices.ContainsFunc(passes[from:], ok)
		})
	}
	traffic("on the first map")
	a.install(t, 2, cluster.Importing)
	traffic("with only the source importing")
	b.install(t, 2, cluster.Importing)
	traffic("with both importing")
	// The target learns of the migration first, as the publisher ensures.
	b.install(t, 3, cluster.Migrating)
	traffic("with only the target migrating")
	a.install(t, 3, cluster.Migrating)
	slot := slots.Of([]byte("{bar}"))
	eventually.True(t, 20*time.Second, "the slot emptied", func() bool {
		st := mv.Status()
		return len(st) == 1 && st[0].Done
	})
	if st := mv.Status()[0]; st.Moved != keys+2 || st.Slot != slot || st.To != "b" {
		t.Fatalf("status %+v", st)
	}
	// Handoff, one node at a time in both orders' worth of traffic, then done.
	a.install(t, 4, cluster.Handoff)
	traffic("with the source handing off")
	b.install(t, 4, cluster.Handoff)
	traffic("with both handing off")
	b.install(t, 5, "done")
	traffic("with the target done")
	a.install(t, 5, "done")
	traffic("on the final map")
	// The mover has seen the final map (and so forgotten the slot, checked
	// below).
	waitPass("on the final map", func(p Pass) bool { return p.Epoch >= 5 })
	close(stop)
	wg.Wait()
	passMu.Lock()
	for _, p := range passes {
		if p.Epoch >= 4 && (len(p.Slots) != 0 || p.Moved != 0) {
			t.Errorf("a mover poll on epoch %d (handoff or done) worked on slots %v, moved %d keys", p.Epoch, p.Slots, p.Moved)
		}
	}
	passMu.Unlock()

	for k := 0; k < keys; k++ {
		want := strconv.FormatInt(incrs[k].Load(), 10)
		r, hops := cl.do(t, "7000", "GET", "{bar}"+strconv.Itoa(k))
		if r != "$"+strconv.Itoa(len(want))+"\r\n"+want+"\r\n" || hops != 1 {
			t.Fatalf("{bar}%d = %q after %d hops, want %s after 1 (MOVED)", k, r, hops, want)
		}
	}
	for _, ns := range a.reg.All() {
		if n := ns.DB.Len(); n != 0 {
			t.Fatalf("source namespace %s keeps %d keys", ns.Name, n)
		}
	}
	tb, _ := b.reg.Get("tenant")
	tx := b.eng.NewSession("t3")
	tx.NS = tb
	for _, c := range []struct{ args, want string }{{"LRANGE {bar}list 0 -1", "*3\r\n$1\r\nx\r\n$1\r\ny\r\n$1\r\nz\r\n"}} {
		w.Reset()
		var args [][]byte
		for _, f := range strings.Fields(c.args) {
			args = append(args, []byte(f))
		}
		b.eng.Exec(tx, args, &w)
		if string(w.Buf) != c.want {
			t.Fatalf("%s on the target = %q", c.args, w.Buf)
		}
	}
	for _, k := range []string{"{bar}list", "{bar}ttl"} {
		w.Reset()
		b.eng.Exec(tx, [][]byte{[]byte("PTTL"), []byte(k)}, &w)
		if ttl, _ := strconv.Atoi(strings.TrimSpace(string(w.Buf[1:]))); ttl <= 0 || ttl > 3600000 {
			t.Fatalf("%s: TTL lost in migration: %q", k, w.Buf)
		}
	}
	if len(mv.Status()) != 0 {
		t.Fatalf("status kept after the migration ended: %+v", mv.Status())
	}
	t.Logf("writers followed %d redirects", redirects.Load())
}

// TestImportRefusesSlotsNotImporting: a batch for a slot the map does not
// move into this node, or a corrupt batch, changes nothing.
func TestImportRefusesSlotsNotImporting(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	def, _ := a.reg.Get("default")
	keys := [][]byte{[]byte("{bar}x"), []byte("{bar}y")}
	var tx keyspace.Txn
	def.DB.Begin(&tx, keys)
	var batch []byte
	for _, k := range keys {
		batch = dump.AppendRecord(batch, dump.OpSet, "default", k, tx.SetString(k, []byte("v"), 0))
	}
	tx.End()
	bdef, _ := b.reg.Get("default")
	if n, err := Import(b.state, b.reg, batch, time.Now().UnixMilli(), nil); !errors.Is(err, ErrNotImporting) || n != 0 || bdef.DB.Len() != 0 {
		t.Fatalf("import without a migration: %d, %v, %d keys", n, err, bdef.DB.Len())
	}
	b.install(t, 2, cluster.Importing)
	if _, err := Import(b.state, b.reg, batch[:len(batch)-3], time.Now().UnixMilli(), nil); err == nil || bdef.DB.Len() != 0 {
		t.Fatalf("truncated batch: %v, %d keys", err, bdef.DB.Len())
	}
	wrongNS := dump.AppendRecord(append([]byte(nil), batch...), dump.OpDel, "nosuch", keys[0], nil)
	if _, err := Import(b.state, b.reg, wrongNS, time.Now().UnixMilli(), nil); err == nil || bdef.DB.Len() != 0 {
		t.Fatalf("unknown namespace: %v, %d keys", err, bdef.DB.Len())
	}
	if n, err := Import(b.state, b.reg, batch, time.Now().UnixMilli(), nil); err != nil || n != 2 || bdef.DB.Len() != 2 {
		t.Fatalf("import while importing: %d, %v, %d keys", n, err, bdef.DB.Len())
	}
	// On the source, a node that is not the target refuses too.
	if _, err := Import(a.state, a.reg, batch, time.Now().UnixMilli(), nil); !errors.Is(err, ErrNotImporting) {
		t.Fatalf("source accepted an import: %v", err)
	}
}

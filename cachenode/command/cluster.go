package command

import (
	"sort"
	"strconv"
	"strings"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/slots"
)

const errClusterDisabled = "ERR This instance has cluster support disabled"

// clusterSubArity: CLUSTER subcommands served and their arity (counting
// CLUSTER and the subcommand), as Redis 7 declares them.
var clusterSubArity = map[string]int{"keyslot": 3, "myid": 2, "info": 2, "slots": 2, "shards": 2, "nodes": 2,
	"countkeysinslot": 3, "getkeysinslot": 4}

// askingSpec is ASKING's entry (the one command that keeps the flag set).
var askingSpec *Spec

func init() {
	reg("cluster", -2, flagLoading|flagStale, 0, 0, 0, "cluster", "3.0.0", nil, "A container for Redis Cluster commands.", cmdCluster)
	reg("readonly", 1, flagFast|flagLoading|flagStale, 0, 0, 0, "cluster", "3.0.0", nil, "Enables read-only queries for a connection to a Redis Cluster replica node.", cmdReadOnly)
	reg("readwrite", 1, flagFast|flagLoading|flagStale, 0, 0, 0, "cluster", "3.0.0", nil, "Enables read-write queries for a connection to a Redis Cluster replica node.", cmdReadWrite)
	reg("asking", 1, flagFast, 0, 0, 0, "cluster", "3.0.0", nil, "Signals that a cluster client is following an -ASK redirect.", cmdAsking)
	askingSpec = table["asking"]
}

func cmdReadOnly(c *Ctx) {
	if c.e.cfg.Cluster == nil {
		c.W.Error(errClusterDisabled)
		return
	}
	c.S.ReadOnly = true
	c.W.OK()
}

func cmdReadWrite(c *Ctx) {
	if c.e.cfg.Cluster == nil {
		c.W.Error(errClusterDisabled)
		return
	}
	c.S.ReadOnly = false
	c.W.OK()
}

func cmdAsking(c *Ctx) {
	if c.e.cfg.Cluster == nil {
		c.W.Error(errClusterDisabled)
		return
	}
	c.S.Asking = true
	c.W.OK()
}

func cmdCluster(c *Ctx) {
	sub := lower(c.Args[1])
	arity, ok := clusterSubArity[sub]
	if !ok {
		c.W.Error("ERR unknown subcommand '" + truncate(c.Args[1], 128) + "'. Try CLUSTER HELP.")
		return
	}
	if len(c.Args) != arity {
		c.W.Error("ERR wrong number of arguments for 'cluster|" + sub + "' command")
		return
	}
	if c.e.cfg.Cluster == nil {
		c.W.Error(errClusterDisabled)
		return
	}
	m := c.e.cfg.Cluster.Load()
	switch sub {
	case "keyslot":
		c.W.Int(int64(slots.Of(c.Args[2])))
	case "myid":
		c.W.BulkString(m.Myself().ID)
	case "info":
		c.W.Verbatim(clusterInfo(m))
	case "nodes":
		c.W.Verbatim(clusterNodes(m))
	case "slots":
		clusterSlots(c, m)
	case "shards":
		clusterShards(c, m)
	case "countkeysinslot":
		slot, ok := parseInt(c.Args[2])
		if !ok {
			c.W.Error(errNotInt)
			return
		}
		if slot < 0 || slot >= slots.N {
			c.W.Error("ERR Invalid slot")
			return
		}
		var n int64
		c.db().ScanSlot(int(slot), func(string, *keyspace.Entry) { n++ })
		c.W.Int(n)
	case "getkeysinslot":
		slot, ok1 := parseInt(c.Args[2])
		count, ok2 := parseInt(c.Args[3])
		if !ok1 || !ok2 {
			c.W.Error(errNotInt)
			return
		}
		if count < 0 || slot < 0 || slot >= slots.N {
			c.W.Error("ERR Invalid slot or number of keys")
			return
		}
		var out []string
		c.db().ScanSlot(int(slot), func(k string, _ *keyspace.Entry) {
			if int64(len(out)) < count {
				out = append(out, k)
			}
		})
		c.W.BulkStrings(out)
	}
}

// clusterInfo is CLUSTER INFO's text, Redis 7's fields. There is no
// cluster bus, so the message counters are 0; the epochs are the map's.
func clusterInfo(m *cluster.Map) string {
	state := "ok"
	if !m.OK() {
		state = "fail"
	}
	var b strings.Builder
	field := func(k, v string) { b.WriteString(k + ":" + v + "\r\n") }
	field("cluster_state", state)
	field("cluster_slots_assigned", strconv.Itoa(m.Assigned))
	field("cluster_slots_ok", strconv.Itoa(m.Assigned))
	field("cluster_slots_pfail", "0")
	field("cluster_slots_fail", "0")
	field("cluster_known_nodes", strconv.Itoa(len(m.Nodes)))
	field("cluster_size", strconv.Itoa(m.Size()))
	epoch := strconv.FormatUint(m.Epoch, 10)
	field("cluster_current_epoch", epoch)
	field("cluster_my_epoch", epoch)
	field("cluster_stats_messages_sent", "0")
	field("cluster_stats_messages_received", "0")
	field("total_cluster_links_buffer_limit_exceeded", "0")
	return b.String()
}

// clusterNodes is CLUSTER NODES's text: one line per node, Redis's format
// "<id> <ip:port@cport> <flags> <master> <ping-sent> <pong-recv>
// <config-epoch> <link-state> <slots>...". cport is the node's bus port;
// failure detection goes through the topology store, so ping times are 0
// and the link is "connected" unless the node is declared failed. This
// node's own line lists its moving slots as Redis does:
// [slot->-<to>] when migrating out, [slot-<-<from>] when importing.
func clusterNodes(m *cluster.Map) string {
	var b strings.Builder
	epoch := strconv.FormatUint(m.Epoch, 10)
	for i := range m.Nodes {
		n := &m.Nodes[i]
		var flags []string
		if i == m.Self {
			flags = append(flags, "myself")
		}
		master := "-"
		if n.IsReplica() {
			flags = append(flags, "slave")
			master = m.Nodes[n.ReplicaOf].ID
		} else {
			flags = append(flags, "master")
		}
		link := "connected"
		if n.Failed {
			flags = append(flags, "fail")
			link = "disconnected"
		}
		b.WriteString(n.ID + " " + n.Addr() + "@" + strconv.Itoa(n.BusPort) + " " + strings.Join(flags, ",") + " " + master + " 0 0 " + epoch + " " + link)
		for _, r := range n.Ranges {
			b.WriteByte(' ')
			b.WriteString(strconv.Itoa(r.Start))
			if r.End != r.Start {
				b.WriteString("-" + strconv.Itoa(r.End))
			}
		}
		if i == m.Self {
			for _, mg := range m.Migrations {
				switch {
				case mg.State == cluster.Migrating && mg.From == i:
					b.WriteString(" [" + strconv.Itoa(mg.Slot) + "->-" + m.Nodes[mg.To].ID + "]")
				case mg.State != cluster.Handoff && mg.To == i:
					b.WriteString(" [" + strconv.Itoa(mg.Slot) + "-<-" + m.Nodes[mg.From].ID + "]")
				}
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// clusterSlots: [[start, end, primary, replicas...], ...] by slot, each
// node as [host, port, id, {}]; failed replicas are left out, as Redis
// does, so clients do not send READONLY reads to them.
func clusterSlots(c *Ctx, m *cluster.Map) {
	type entry struct {
		r cluster.Range
		n *cluster.Node
	}
	var all []entry
	for i := range m.Nodes {
		for _, r := range m.Nodes[i].Ranges {
			all = append(all, entry{r, &m.Nodes[i]})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].r.Start < all[j].r.Start })
	c.W.Array(len(all))
	for _, e := range all {
		var reps []*cluster.Node
		for _, ri := range e.n.Replicas {
			if !m.Nodes[ri].Failed {
				reps = append(reps, &m.Nodes[ri])
			}
		}
		c.W.Array(3 + len(reps))
		c.W.Int(int64(e.r.Start))
		c.W.Int(int64(e.r.End))
		for _, n := range append([]*cluster.Node{e.n}, reps...) {
			c.W.Array(4)
			c.W.BulkString(n.Host)
			c.W.Int(int64(n.Port))
			c.W.BulkString(n.ID)
			c.W.Map(0)
		}
	}
}

// clusterShards: one shard per primary with its replicas. Health is
// "fail" for a node the cluster declared failed, "loading" for this node
// while it loads a full sync, else "online"; replication offsets are
// known for this node only (there is no gossip carrying the others').
func clusterShards(c *Ctx, m *cluster.Map) {
	var primaries []int
	for i := range m.Nodes {
		if !m.Nodes[i].IsReplica() {
			primaries = append(primaries, i)
		}
	}
	c.W.Array(len(primaries))
	for _, pi := range primaries {
		p := &m.Nodes[pi]
		c.W.Map(2)
		c.W.BulkString("slots")
		c.W.Array(2 * len(p.Ranges))
		for _, r := range p.Ranges {
			c.W.Int(int64(r.Start))
			c.W.Int(int64(r.End))
		}
		c.W.BulkString("nodes")
		members := append([]int{pi}, p.Replicas...)
		c.W.Array(len(members))
		for _, ni := range members {
			n := &m.Nodes[ni]
			role := "master"
			if n.IsReplica() {
				role = "replica"
			}
			var offset int64
			health := "online"
			if ni == m.Self && c.e.cfg.Replication != nil {
				var loading bool
				offset, loading = c.e.cfg.Replication()
				if loading {
					health = "loading"
				}
			}
			if n.Failed {
				health = "fail"
			}
			c.W.Map(7)
			c.W.BulkString("id")
			c.W.BulkString(n.ID)
			c.W.BulkString("port")
			c.W.Int(int64(n.Port))
			c.W.BulkString("ip")
			c.W.BulkString(n.Host)
			c.W.BulkString("endpoint")
			c.W.BulkString(n.Host)
			c.W.BulkString("role")
			c.W.BulkString(role)
			c.W.BulkString("replication-offset")
			c.W.Int(offset)
			c.W.BulkString("health")
			c.W.BulkString(health)
		}
	}
}

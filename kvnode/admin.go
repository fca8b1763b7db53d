package kvnode

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/portico-io/portico/kvnode/antientropy"
	"github.com/portico-io/portico/kvnode/api"
	"github.com/portico-io/portico/kvnode/coordinator"
	"github.com/portico-io/portico/kvnode/membership"
	"github.com/portico-io/portico/kvnode/record"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

var _ api.Admin = (*Node)(nil)

func recordDigest(recs []*kvv1.Record) []byte { return record.Digest(recs) }

// gatedEngine holds the ring-change barrier shared for the whole of each
// write (see Node.gate).
type gatedEngine struct {
	*coordinator.Coordinator
	n *Node
}

func (n *Node) engine() api.Engine { return gatedEngine{n.coord, n} }

func (g gatedEngine) Put(ctx context.Context, key, value []byte, o coordinator.WriteOptions) (coordinator.WriteResult, error) {
	g.n.gate.RLock()
	defer g.n.gate.RUnlock()
	return g.Coordinator.Put(ctx, key, value, o)
}

func (g gatedEngine) Delete(ctx context.Context, key []byte, o coordinator.WriteOptions) (coordinator.WriteResult, error) {
	g.n.gate.RLock()
	defer g.n.gate.RUnlock()
	return g.Coordinator.Delete(ctx, key, o)
}

// The admin answers, under the names kvnode exported them by (kvctl
// decodes RingView).
type (
	RingView   = api.RingView
	RingMember = api.RingMember
	MemberView = api.MemberView
)

// Ring implements api.Admin.
func (n *Node) Ring() api.RingView {
	cur, fut := n.mem.Rings()
	own := cur.Ownership()
	v := RingView{Replication: n.cfg.Replication, Ranges: cur.Ranges()}
	for _, m := range n.mem.Snapshot() {
		if len(m.Tokens) == 0 || m.State == kvv1.MemberState_MEMBER_STATE_LEFT {
			continue
		}
		v.Nodes = append(v.Nodes, RingMember{ID: m.Id, Addr: m.Addr, Rack: m.Rack, State: membership.StateName(m.State), Tokens: m.Tokens, Ownership: own[m.Id]})
	}
	if membership.Moving(cur, fut) {
		v.Pending = fut.Ranges()
	}
	return v
}

// Members implements api.Admin.
func (n *Node) Members() api.MemberList {
	pending := n.hints.Pending()
	var out []MemberView
	for _, m := range n.mem.Snapshot() {
		out = append(out, MemberView{
			ID: m.Id, Addr: m.Addr, Rack: m.Rack, State: membership.StateName(m.State), Alive: n.mem.Alive(m.Id),
			Phi: n.mem.Phi(m.Id), Generation: m.Generation, Heartbeat: m.Heartbeat, Hints: pending[m.Id],
		})
	}
	return api.MemberList{Items: out}
}

// Repair implements api.Admin: one full anti-entropy pass now.
func (n *Node) Repair(ctx context.Context) (antientropy.Result, error) {
	return n.rep.RepairAll(ctx), nil
}

// RepairStatus implements api.Admin.
func (n *Node) RepairStatus() api.RepairStatus {
	ranges, lastFull, last := n.rep.Status()
	return api.RepairStatus{Ranges: ranges, LastFullRepair: lastFull, LastPass: last}
}

func (n *Node) registerMetrics() {
	reg := n.cfg.Registry
	gauge := func(name, help string, fn func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "portico_kvnode_" + name, Help: help}, fn))
	}
	counter := func(name, help string, fn func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "portico_kvnode_" + name, Help: help}, fn))
	}
	unix := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return float64(t.UnixNano()) / 1e9
	}
	gauge("hints_pending", "Hints stored on this node awaiting replay.", func() float64 { return float64(n.hints.PendingTotal()) })
	counter("hints_stored_total", "Hints stored for replicas that missed a write.", func() float64 { return float64(n.hints.Stored.Load()) })
	counter("hints_replayed_total", "Hints delivered to their replica.", func() float64 { return float64(n.hints.Replayed.Load()) })
	counter("hints_expired_total", "Hints dropped after the hint window.", func() float64 { return float64(n.hints.Expired.Load()) })
	counter("read_repairs_total", "Replicas fixed by blocking read repair.", func() float64 { return float64(n.coord.ReadRepairs.Load()) })
	counter("speculative_retries_total", "Reads sent to an extra replica past the p99 threshold.", func() float64 { return float64(n.coord.SpeculativeRuns.Load()) })
	gauge("repair_last_full_timestamp_seconds", "When the last anti-entropy pass that repaired every range of this node started.", func() float64 {
		_, full, _ := n.rep.Status()
		return unix(full)
	})
	gauge("repair_oldest_range_timestamp_seconds", "Oldest last-repair time over the ranges this node replicates (0: a range never repaired); must stay within the tombstone grace.", func() float64 {
		return unix(n.rep.OldestRange())
	})
	gauge("repair_ranges", "Ranges this node replicates.", func() float64 { r, _, _ := n.rep.Status(); return float64(len(r)) })
	gauge("repair_last_pass_ranges_failed", "Ranges the last anti-entropy pass could not repair (a replica down or unreachable).", func() float64 {
		_, _, last := n.rep.Status()
		return float64(last.Failed)
	})
	gauge("repair_last_pass_keys_streamed", "Keys pulled plus pushed by the last anti-entropy pass.", func() float64 {
		_, _, last := n.rep.Status()
		return float64(last.Pulled + last.Pushed)
	})
	gauge("ring_ownership_ratio", "Fraction of the key space this node replicates, divided by N (1/nodes when balanced).", func() float64 {
		cur, _ := n.mem.Rings()
		return cur.Ownership()[n.cfg.NodeID]
	})
	gauge("members_alive", "Members this node believes up (itself included).", func() float64 {
		c := 0
		for _, m := range n.mem.Snapshot() {
			if m.State != kvv1.MemberState_MEMBER_STATE_LEFT && n.mem.Alive(m.Id) {
				c++
			}
		}
		return float64(c)
	})
	reg.MustRegister(rangeRepairCollector{n}, collectors.NewGoCollector())
}

// rangeRepairCollector exports the last repair time of each range this
// node replicates. The label is the range's end token: a node replicates
// about N × vnodes ranges (48 by default) whatever the cluster size, so the
// series stay bounded.
type rangeRepairCollector struct{ n *Node }

var rangeRepairDesc = prometheus.NewDesc("portico_kvnode_repair_range_last_repaired_timestamp_seconds",
	"Last time anti-entropy repaired the range ending at this token with every replica (0: never).", []string{"range_end"}, nil)

func (c rangeRepairCollector) Describe(ch chan<- *prometheus.Desc) { ch <- rangeRepairDesc }

func (c rangeRepairCollector) Collect(ch chan<- prometheus.Metric) {
	ranges, _, _ := c.n.rep.Status()
	for _, r := range ranges {
		v := 0.0
		if !r.LastRepaired.IsZero() {
			v = float64(r.LastRepaired.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(rangeRepairDesc, prometheus.GaugeValue, v, strconv.FormatUint(r.End, 10))
	}
}

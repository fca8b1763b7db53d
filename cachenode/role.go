package cachenode

// Role changes of a cluster node: following its primary, and handing its
// slots over when it stops.

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/failover"
	"github.com/portico-io/portico/cachenode/repl"
	"github.com/portico-io/portico/cachenode/reshard"
	"github.com/portico-io/portico/cachenode/topology"
)

// followRole makes the node's replication follow its role in the slot map:
// a replica follows its primary's bus port (a demoted primary drops its
// data in the full resync), and a replica promoted to primary stops
// following and takes a new replication id, so its replicas resync from it.
//
// It also keeps loading true while a full sync is applied, so the node
// answers -LOADING instead of serving a partial copy.
func followRole(ctx context.Context, st *cluster.State, feed *repl.Feed, p *repl.Primary, f *repl.Follower, loading *atomic.Bool, log *slog.Logger) error {
	defer f.Stop()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var epoch uint64
	for {
		loading.Store(f.Status().Syncing)
		if m := st.Load(); m.Epoch != epoch {
			epoch = m.Epoch
			me := m.Myself()
			following := f.Status().Primary
			switch {
			case me.IsReplica():
				if pr := m.Primary(me); following != pr.BusAddr() {
					if following == "" {
						// Demoted (or starting as a replica): this node's own
						// replicas must not see the flush that starts its sync.
						p.Disconnect()
					}
					log.Info("replicating", "primary", pr.ID, "bus", pr.BusAddr(), "epoch", m.Epoch)
					f.Follow(pr.BusAddr())
				}
			case following != "":
				f.Stop()
				id := feed.Promote()
				log.Info("promoted to primary: stopped replicating", "was_following", following, "replid", id, "epoch", m.Epoch)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// handover runs failover.Handover when this node is a primary with a live
// replica. It holds every keyed command (CLUSTERDOWN, which clients retry)
// from before the publication until both the promoted replica and this
// node serve the new map, so no client is bounced between a node on the
// new map and one on the old.
func handover(st *cluster.State, c *topology.Client, nodes reshard.Nodes, id string, feed *repl.Feed, p *repl.Primary, hold *atomic.Bool, log *slog.Logger) {
	me := st.Load().Myself()
	if me.IsReplica() || len(me.Ranges) == 0 || len(me.Replicas) == 0 {
		return
	}
	hold.Store(true)
	defer hold.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := &failover.Handover{Client: c, SelfID: id, Offset: feed.Offset, Logger: log,
		Acked: func() map[string]int64 {
			out := map[string]int64{}
			for _, r := range p.Replicas() {
				if r.Online {
					out[r.Addr] = r.AckOffset
				}
			}
			return out
		}}
	start := time.Now()
	done, err := h.Run(ctx)
	if err != nil {
		log.Warn("no handover on shutdown; the replica will be promoted by failover", "err", err)
		return
	}
	for ctx.Err() == nil {
		e, err := nodes.Epoch(ctx, done.Addr)
		if err == nil && e >= done.Epoch && st.Load().Epoch >= done.Epoch {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	hold.Store(false)
	time.Sleep(200 * time.Millisecond) // let held clients follow MOVED
	log.Info("handover done", "to", done.To, "epoch", done.Epoch, "took", time.Since(start).Round(time.Millisecond))
}

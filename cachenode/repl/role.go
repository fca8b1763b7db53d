package repl

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/portico-io/portico/cachenode/cluster"
)

// Roles makes a cluster node's replication follow its role in the slot
// map: a replica follows its primary's bus port (a demoted primary drops
// its data in the full resync), and a replica promoted to primary stops
// following and takes a new replication id, so its replicas resync from
// it. The map is read every 20 ms and acted on when its epoch changes.
type Roles struct {
	Map      *cluster.State
	Feed     *Feed
	Primary  *Primary
	Follower *Follower
	// Loading is kept true while a full sync is applied, so the node
	// answers -LOADING instead of serving a partial copy.
	Loading *atomic.Bool
	Logger  *slog.Logger
}

// Run follows the map until ctx is done, then stops following.
func (r *Roles) Run(ctx context.Context) error {
	f := r.Follower
	defer f.Stop()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var epoch uint64
	for {
		r.Loading.Store(f.Status().Syncing)
		if m := r.Map.Load(); m.Epoch != epoch {
			epoch = m.Epoch
			r.apply(ctx, m)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// apply starts, moves or stops following for the map m.
func (r *Roles) apply(ctx context.Context, m *cluster.Map) {
	f := r.Follower
	me := m.Myself()
	following := f.Status().Primary
	switch {
	case me.IsReplica():
		if pr := m.Primary(me); following != pr.BusAddr() {
			if following == "" {
				// Demoted (or starting as a replica): this node's own
				// replicas must not see the flush that starts its sync.
				r.Primary.Disconnect()
			}
			r.Logger.Info("replicating", "primary", pr.ID, "bus", pr.BusAddr(), "epoch", m.Epoch)
			f.Follow(ctx, pr.BusAddr())
		}
	case following != "":
		f.Stop()
		id := r.Feed.Promote()
		r.Logger.Info("promoted to primary: stopped replicating", "was_following", following, "replid", id, "epoch", m.Epoch)
	}
}

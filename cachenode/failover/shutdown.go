package failover

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/portico-io/portico/cachenode/cluster"
)

// EpochReader reads the epoch of the map a node serves, by its RESP
// address (reshard.RESP does).
type EpochReader interface {
	Epoch(ctx context.Context, addr string) (uint64, error)
}

// ShutdownHandover is a stopping primary's Handover. It holds every keyed
// command (through Hold; the node answers CLUSTERDOWN, which clients
// retry) from before the publication until both the promoted replica and
// this node serve the new map, so no client is bounced between a node on
// the new map and one on the old.
type ShutdownHandover struct {
	Handover
	// State is the map this node serves.
	State *cluster.State
	Nodes EpochReader
	Hold  *atomic.Bool
}

// Run hands over when this node is a primary owning slots with a replica,
// within 5 s of ctx. A failure is logged, not returned: the replica is then
// promoted by failover.
func (s *ShutdownHandover) Run(ctx context.Context) {
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	me := s.State.Load().Myself()
	if me.IsReplica() || len(me.Ranges) == 0 || len(me.Replicas) == 0 {
		return
	}
	s.Hold.Store(true)
	defer s.Hold.Store(false)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	done, err := s.Handover.Run(ctx)
	if err != nil {
		s.Logger.Warn("no handover on shutdown; the replica will be promoted by failover", "err", err)
		return
	}
	for ctx.Err() == nil {
		e, err := s.Nodes.Epoch(ctx, done.Addr)
		if err == nil && e >= done.Epoch && s.State.Load().Epoch >= done.Epoch {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Hold.Store(false)
	time.Sleep(200 * time.Millisecond) // let held clients follow MOVED
	s.Logger.Info("handover done", "to", done.To, "epoch", done.Epoch, "took", time.Since(start).Round(time.Millisecond))
}

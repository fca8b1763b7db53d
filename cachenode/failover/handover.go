package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/topology"
)

// Promote derives the map that gives old's slots to its replica newID:
// epoch + 1, newID a primary owning old's slots, old replica_of newID
// (flagged failed when it is being failed over, not when it hands over),
// old's other replicas re-pointed to newID, migrations from or to old
// dropped.
func Promote(s cluster.Spec, old, newID string, failed bool) cluster.Spec {
	s = copySpec(s)
	s.Epoch++
	var slots []string
	for _, n := range s.Nodes {
		if n.ID == old {
			slots = n.Slots
		}
	}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		switch {
		case n.ID == newID:
			n.Slots, n.ReplicaOf, n.Failed = slots, "", false
		case n.ID == old:
			n.Slots, n.ReplicaOf, n.Failed = nil, newID, failed
		case n.ReplicaOf == old:
			n.ReplicaOf = newID
		}
	}
	var mig []cluster.MigrationSpec
	for _, mg := range s.Migrations {
		if mg.From != old && mg.To != old {
			mig = append(mig, mg)
		}
	}
	s.Migrations = mig
	return s
}

// Handover is a primary's planned exit (a rolling restart): with its
// writes already stopped by the caller, it waits until a replica has
// acknowledged everything it logged, then publishes the map promoting
// that replica, so the slots change hands in well under a second and lose
// nothing, instead of waiting FailAfter for a failover that may lose the
// last writes. The old primary is listed as the new one's replica (not
// failed): restarted, it resyncs from it.
type Handover struct {
	Client *topology.Client
	SelfID string
	// Offset is this node's replication offset (writes stopped: final).
	Offset func() int64
	// Acked returns, by RESP address (host:port), the offset each
	// connected replica acknowledged.
	Acked func() map[string]int64
	// CatchUp bounds the wait for a replica to acknowledge everything
	// (default 2 s); past it the most caught-up replica is promoted anyway
	// (what a failover would do, minus the wait).
	CatchUp time.Duration
	Logger  *slog.Logger
}

// ErrNoHandover: nothing to hand over (not a primary owning slots, no live
// replica, or a migration involves this node).
var ErrNoHandover = errors.New("failover: no handover")

// Handed is a completed handover.
type Handed struct {
	To    string // the promoted replica's id
	Addr  string // its RESP address
	Epoch uint64 // of the published map
}

// Run hands the slots over.
func (h *Handover) Run(ctx context.Context) (Handed, error) {
	log := h.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	catchUp := h.CatchUp
	if catchUp <= 0 {
		catchUp = 2 * time.Second
	}
	t, err := h.Client.Load(ctx)
	if err != nil {
		return Handed{}, err
	}
	m, err := t.Spec.Map(h.SelfID)
	if err != nil {
		return Handed{}, err
	}
	me := m.Myself()
	if me.IsReplica() || len(me.Ranges) == 0 {
		return Handed{}, fmt.Errorf("%w: not a primary owning slots", ErrNoHandover)
	}
	for _, mg := range m.Migrations {
		if mg.From == m.Self || mg.To == m.Self {
			return Handed{}, fmt.Errorf("%w: slot %d is moving", ErrNoHandover, mg.Slot)
		}
	}
	var cands []*cluster.Node
	for _, ri := range me.Replicas {
		if !m.Nodes[ri].Failed {
			cands = append(cands, &m.Nodes[ri])
		}
	}
	if len(cands) == 0 {
		return Handed{}, fmt.Errorf("%w: no live replica", ErrNoHandover)
	}
	// Wait for a replica to acknowledge every change.
	want := h.Offset()
	deadline := time.Now().Add(catchUp)
	var best *cluster.Node
	var bestAck int64 = -1
	for {
		acked := h.Acked()
		best, bestAck = nil, -1
		for _, c := range cands {
			if a, ok := acked[c.Addr()]; ok && a > bestAck {
				best, bestAck = c, a
			}
		}
		if (best != nil && bestAck >= want) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return Handed{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	if best == nil {
		return Handed{}, fmt.Errorf("%w: no replica connected", ErrNoHandover)
	}
	if bestAck < want {
		log.Warn("handover: no replica acknowledged every write in time; promoting the most caught-up one",
			"replica", best.ID, "acked", bestAck, "offset", want)
	}
	next := Promote(t.Spec, h.SelfID, best.ID, false)
	if _, err := h.Client.Publish(ctx, next, t.Revision); err != nil {
		return Handed{}, fmt.Errorf("failover: handover publication: %w", err)
	}
	log.Info("handed slots over to a replica", "replica", best.ID, "epoch", next.Epoch, "acked", bestAck, "offset", want)
	return Handed{To: best.ID, Addr: best.Addr(), Epoch: next.Epoch}, nil
}

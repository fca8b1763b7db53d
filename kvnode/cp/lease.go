package cp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Lease limits.
const (
	MinLeaseTTLSeconds = 1
	MaxLeaseTTLSeconds = 24 * 60 * 60
	// DefaultLeaseCheckInterval is how often the leader looks for expired
	// leases.
	DefaultLeaseCheckInterval = 100 * time.Millisecond
)

// Leases: the FSM holds each lease's TTL and attached keys; only the
// leader keeps deadlines, in memory. A keepalive (served by the leader, not
// replicated) pushes a deadline to now+TTL; a lease past its deadline is
// revoked through the log, deleting its keys. A new leader starts every
// lease's deadline afresh at now+TTL, so leadership changes extend leases
// and never expire one early.

// GrantLease creates a lease with a TTL in whole seconds and returns its id.
func (g *Group) GrantLease(ctx context.Context, ttlSeconds int64) (uint64, error) {
	if ttlSeconds < MinLeaseTTLSeconds || ttlSeconds > MaxLeaseTTLSeconds {
		return 0, fmt.Errorf("cp: lease TTL %ds out of [%d, %d]", ttlSeconds, MinLeaseTTLSeconds, MaxLeaseTTLSeconds)
	}
	res, err := g.apply(ctx, command{Op: OpLeaseGrant, TTLSeconds: ttlSeconds})
	if err != nil {
		return 0, err
	}
	g.leaseMu.Lock()
	g.deadlines[res.Revision] = g.cfg.Now().Add(time.Duration(ttlSeconds) * time.Second)
	g.leaseMu.Unlock()
	return res.Revision, res.Err
}

// KeepAlive renews a lease on the leader and returns its TTL.
func (g *Group) KeepAlive(ctx context.Context, id uint64) (int64, error) {
	if g.raft.State() != raft.Leader {
		return 0, g.Leader()
	}
	// A lease granted or revoked just before must be visible here.
	if err := g.readBarrier(ctx); err != nil {
		return 0, err
	}
	ttl, ok := g.fsm.leaseTTLs()[id]
	if !ok {
		return 0, ErrLeaseNotFound
	}
	g.leaseMu.Lock()
	g.deadlines[id] = g.cfg.Now().Add(time.Duration(ttl) * time.Second)
	g.leaseMu.Unlock()
	return ttl, nil
}

// RevokeLease deletes a lease and every key attached to it.
func (g *Group) RevokeLease(ctx context.Context, id uint64) error {
	res, err := g.apply(ctx, command{Op: OpLeaseRevoke, LeaseID: id})
	if err != nil {
		return err
	}
	return res.Err
}

// expireLeases runs until Close: on the leader, it revokes leases past
// their deadline.
func (g *Group) expireLeases(ctx context.Context) {
	defer g.wg.Done()
	t := time.NewTicker(g.cfg.LeaseCheckInterval)
	defer t.Stop()
	wasLeader := false
	for {
		select {
		case <-g.done:
			return
		case <-t.C:
		}
		leader := g.raft.State() == raft.Leader
		if leader != wasLeader {
			// Fresh deadlines for every lease on gaining leadership.
			g.leaseMu.Lock()
			clear(g.deadlines)
			g.leaseMu.Unlock()
			wasLeader = leader
		}
		if !leader {
			continue
		}
		now := g.cfg.Now()
		var expired []uint64
		ttls := g.fsm.leaseTTLs()
		g.leaseMu.Lock()
		for id, ttl := range ttls {
			dl, ok := g.deadlines[id]
			if !ok {
				g.deadlines[id] = now.Add(time.Duration(ttl) * time.Second)
			} else if now.After(dl) {
				expired = append(expired, id)
			}
		}
		for id := range g.deadlines {
			if _, ok := ttls[id]; !ok {
				delete(g.deadlines, id)
			}
		}
		g.leaseMu.Unlock()
		for _, id := range expired {
			ctx, cancel := context.WithTimeout(ctx, g.cfg.ApplyTimeout)
			err := g.RevokeLease(ctx, id)
			cancel()
			if err != nil && !errors.Is(err, ErrLeaseNotFound) {
				g.cfg.Logger.Warn("cp: revoking expired lease", "lease", id, "err", err)
			}
		}
	}
}

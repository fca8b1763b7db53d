package cp

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// Member is one server of the group's configuration.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
	// Suffrage is "Voter", "Nonvoter" or "Staging".
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
}

// Members is the latest configuration this node knows (committed or not).
func (g *Group) Members(ctx context.Context) ([]Member, error) {
	f := g.raft.GetConfiguration()
	if err := wait(ctx, f); err != nil {
		return nil, fmt.Errorf("cp: configuration: %w", err)
	}
	_, leader := g.raft.LeaderWithID()
	var out []Member
	for _, s := range f.Configuration().Servers {
		out = append(out, Member{ID: string(s.ID), RaftAddr: string(s.Address), Suffrage: s.Suffrage.String(), Leader: s.ID == leader})
	}
	return out, nil
}

// AddVoter adds (or re-addresses) a voter; only on the leader. The new
// server catches up from the leader's log or snapshot; it must be running
// (started without bootstrap) with that id and Raft address.
func (g *Group) AddVoter(ctx context.Context, id, raftAddr string) error {
	return g.changeMembership(ctx, func() raft.IndexFuture {
		return g.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, g.timeout(ctx))
	})
}

// RemoveServer removes a server from the configuration; only on the
// leader (a leader may remove itself: it steps down once that commits).
func (g *Group) RemoveServer(ctx context.Context, id string) error {
	return g.changeMembership(ctx, func() raft.IndexFuture {
		return g.raft.RemoveServer(raft.ServerID(id), 0, g.timeout(ctx))
	})
}

func (g *Group) changeMembership(ctx context.Context, change func() raft.IndexFuture) error {
	if g.raft.State() != raft.Leader {
		return g.Leader()
	}
	if err := wait(ctx, change()); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return g.Leader()
		}
		return fmt.Errorf("%w: membership change: %w", ErrUnknownOutcome, err)
	}
	return nil
}

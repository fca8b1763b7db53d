package cp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"

	"github.com/hashicorp/raft"
)

// Backup and restore of the group's state, as etcd's snapshot save and
// restore. A backup is the state machine's Raft snapshot (the bytes the
// file snapshot store keeps and InstallSnapshot ships), so restoring it is
// raft.Restore: the leader installs it as a new snapshot past its last
// index, and followers (and later joiners) receive it by snapshot install.

// SaveSnapshot writes a snapshot of the state to w and returns the
// revision it covers. It runs on the leader after a linearizable read
// barrier (see linearize), so the snapshot holds every write acknowledged
// before the call; a follower returns *NotLeaderError (the HTTP layer
// forwards).
func (g *Group) SaveSnapshot(ctx context.Context, w io.Writer) (uint64, error) {
	if err := g.linearize(ctx); err != nil {
		return 0, err
	}
	s, err := g.fsm.Snapshot()
	if err != nil {
		return 0, fmt.Errorf("cp: snapshot: %w", err)
	}
	snap := s.(*fsmSnapshot)
	if err := snap.Persist(&writerSink{w: w}); err != nil {
		return 0, err
	}
	return snap.state.Applied, nil
}

// RestoreSnapshot replaces the group's state with a snapshot that
// SaveSnapshot wrote, possibly in another cluster: every key with its
// revision and lease, and the API tokens. It runs on the leader (a
// follower returns *NotLeaderError) and returns once a quorum holds the
// restored state. The snapshot is decoded in full first, so a damaged one
// is refused (ErrBadSnapshot) before Raft sees it: Raft cannot back out of
// a restore its state machine fails. Two fields are this cluster's, not
// the snapshot's: the nodes' HTTP addresses (followers forward by them),
// and the applied index, raised to this group's last index so revisions
// keep growing.
func (g *Group) RestoreSnapshot(ctx context.Context, data []byte) (uint64, error) {
	if g.raft.State() != raft.Leader {
		return 0, g.Leader()
	}
	scratch := newFSM()
	if err := scratch.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	s, _ := scratch.Snapshot()
	snap := s.(*fsmSnapshot)
	snap.state.Applied = max(snap.state.Applied, g.raft.LastIndex())
	g.fsm.mu.RLock()
	snap.state.Nodes = maps.Clone(g.fsm.nodes)
	g.fsm.mu.RUnlock()
	var buf bytes.Buffer
	if err := snap.Persist(&writerSink{w: &buf}); err != nil {
		return 0, err
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: snap.state.Applied, Size: int64(buf.Len())}
	if err := g.raft.Restore(meta, &buf, g.timeout(ctx)); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return 0, g.Leader()
		}
		return 0, fmt.Errorf("%w: restore: %w", ErrUnknownOutcome, err)
	}
	return snap.state.Applied, nil
}

// writerSink is a raft.SnapshotSink writing to w, so the FSM's own Persist
// writes backups.
type writerSink struct {
	w   io.Writer
	err error
}

var _ raft.SnapshotSink = (*writerSink)(nil)

func (s *writerSink) Write(p []byte) (int, error) { return s.w.Write(p) }
func (s *writerSink) Close() error                { return s.err }
func (s *writerSink) ID() string                  { return "backup" }
func (s *writerSink) Cancel() error {
	s.err = errors.New("cp: snapshot cancelled")
	return nil
}

package cp

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound: the key has no value.
	ErrNotFound = errors.New("cp: key not found")
	// ErrConflict: a compare (If-Match) did not hold; nothing was written.
	// Returned wrapped in *ConflictError.
	ErrConflict = errors.New("cp: revision conflict")
	// ErrNotLeader: this node cannot serve the request because it is not
	// the leader; nothing was written. Returned wrapped in *NotLeaderError,
	// which names the leader when one is known.
	ErrNotLeader = errors.New("cp: not the leader")
	// ErrUnknownOutcome: the write was handed to Raft but its outcome is
	// unknown (leadership lost, shutdown, timeout): it may or may not be
	// committed. Read back before retrying a non-idempotent change.
	ErrUnknownOutcome = errors.New("cp: outcome unknown")
	// ErrLeaseNotFound: the lease does not exist (never granted, expired
	// or revoked).
	ErrLeaseNotFound = errors.New("cp: lease not found")
	// ErrCompacted: a watch asked for history that is no longer kept.
	// Returned wrapped in *CompactedError.
	ErrCompacted = errors.New("cp: revision compacted")
	// ErrBadSnapshot: a snapshot given to RestoreSnapshot does not decode;
	// nothing was changed.
	ErrBadSnapshot = errors.New("cp: bad snapshot")
	// ErrClosed: the group has been shut down.
	ErrClosed = errors.New("cp: closed")
)

// ConflictError is a failed compare: the key's revision is Current
// (0 = the key does not exist).
type ConflictError struct {
	Expected, Current uint64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("cp: revision conflict: expected %d, key is at %d", e.Expected, e.Current)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// NotLeaderError names the leader as this node knows it; every field is
// empty when there is none (an election is in progress or no quorum).
type NotLeaderError struct {
	LeaderID string
	// LeaderRaftAddr is the leader's Raft transport address.
	LeaderRaftAddr string
	// LeaderHTTPAddr is the leader's HTTP API address, once the leader has
	// published it through the log.
	LeaderHTTPAddr string
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return "cp: no leader"
	}
	return fmt.Sprintf("cp: not the leader; leader is %s (raft %s, http %s)", e.LeaderID, e.LeaderRaftAddr, e.LeaderHTTPAddr)
}

func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }

package repl

import "errors"

// Errors.
var (
	// ErrBehind is a read of an offset the backlog no longer holds (or
	// does not hold yet): the reader must resynchronize from a snapshot.
	ErrBehind = errors.New("repl: offset not in the backlog")
	// ErrStream is a malformed replication stream.
	ErrStream = errors.New("repl: bad stream")
	// ErrResync is a full sync the replica cannot finish consistently (a
	// namespace flushed while it was being copied); it syncs again.
	ErrResync = errors.New("repl: snapshot interrupted by a flush; resyncing")
)

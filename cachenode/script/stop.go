package script

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Stop is the context to Run a script under when it may have to be
// stopped (SCRIPT KILL, the memory watch). gopher-lua checks its
// context's Done channel before every Lua instruction, with a select;
// with a context.WithCancel that check was a sixth of the instructions of
// ratelimitsvc's script. A Stop's Done is nil until it is stopped, and
// a select on a nil channel is the cheapest there is. That breaks on
// purpose context's rule that Done always returns the same channel; the
// one user it would mislead is context.WithCancel, which gopher-lua
// gives each coroutine, and the sandbox hands coroutines the Stop itself
// instead (coroutineLib). A Stop is for one run.
type Stop struct {
	done    chan struct{}
	stopped atomic.Pointer[chan struct{}] // &done once closed
	mu      sync.Mutex
	cause   error // under mu; set once, when done is closed
}

var _ context.Context = (*Stop)(nil)

// NewStop returns a Stop not yet stopped.
func NewStop() *Stop { return &Stop{done: make(chan struct{})} }

// Stop stops the script at its next instruction with cause (nil is
// context.Canceled). Only the first call counts. Safe from any goroutine.
func (s *Stop) Stop(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cause != nil {
		return
	}
	s.cause = cause
	close(s.done)
	s.stopped.Store(&s.done)
}

// Cause is what the script was stopped with, nil while it was not.
func (s *Stop) Cause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cause
}

// Deadline: a Stop has none (the caller's time limit marks a script busy,
// it does not stop it).
func (s *Stop) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is nil until the Stop is stopped, then a closed channel.
func (s *Stop) Done() <-chan struct{} {
	if p := s.stopped.Load(); p != nil {
		return *p
	}
	return nil
}

// Err is context.Canceled once stopped, else nil.
func (s *Stop) Err() error {
	if s.stopped.Load() != nil {
		return context.Canceled
	}
	return nil
}

// Value: a Stop carries no values.
func (s *Stop) Value(any) any { return nil }

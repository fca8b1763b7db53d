package script

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
)

// Memory limits. Redis has none for a script (its Lua heap shows in INFO
// as used_memory_lua and is not counted against maxmemory), so a runaway
// script there grows until the process is killed. gopher-lua has no
// allocator hook, so a script's memory cannot be counted exactly; what we
// bound instead:
//
//   - the value stack and call depth (RegistryMaxSize, CallStackSize: the
//     Lua errors "registry overflow" and "stack overflow");
//   - string.rep, the one call that makes any size at once: past the limit
//     it raises an error before allocating (pcall can catch it, as Lua's
//     own "not enough memory");
//   - everything else (tables, concatenation) by WatchMemory, which stops
//     the script at its next instruction once the process's live heap has
//     grown by more than the limit since the script's first check. The
//     heap is the whole process's, so writes of other connections during a
//     long script count too: the limit is set far above what a script
//     needs (DefaultMaxMemory), and a script stopped that way is one that
//     would have taken the node down.

// DefaultMaxMemory is the limit a node gives its scripts when configured
// with none.
const DefaultMaxMemory = 256 << 20

// memCheckEvery is the watch's period: a script shorter than it is never
// looked at (it costs one timer, like the time limit's).
const memCheckEvery = 10 * time.Millisecond

// MemoryError is the cause a watched script is stopped with.
type MemoryError struct{ Limit int64 }

func (e *MemoryError) Error() string {
	return fmt.Sprintf("the script's memory grew past the limit of %d bytes", e.Limit)
}

// WatchMemory watches the heap while a script runs and calls stop with a
// *MemoryError once it has grown past limit. The caller must call done
// when the script ends (before it returns its state to anyone).
func WatchMemory(limit int64, stop context.CancelCauseFunc) (done func()) {
	w := &memWatch{limit: limit, stop: stop}
	w.mu.Lock()
	w.t = time.AfterFunc(memCheckEvery, w.check)
	w.mu.Unlock()
	return w.done
}

func (w *memWatch) done() {
	w.mu.Lock()
	w.ended = true
	w.t.Stop()
	w.mu.Unlock()
}

type memWatch struct {
	limit   int64
	stop    context.CancelCauseFunc
	samples []metrics.Sample

	mu    sync.Mutex
	t     *time.Timer
	ended bool
	// live is the live heap at the first check; objs the heap (live and
	// garbage) at the last collection this watch asked for.
	live, objs int64
	started    bool
}

func (w *memWatch) read() (live, objs int64) {
	if w.samples == nil { // only scripts that run past memCheckEvery get here
		w.samples = []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	}
	metrics.Read(w.samples)
	return int64(w.samples[0].Value.Uint64()), int64(w.samples[1].Value.Uint64())
}

// check runs every memCheckEvery on the timer's goroutine. The live heap
// is only known after a collection: when the heap grew by the limit since
// the last one this watch saw, it collects first, so a large heap's
// infrequent collections do not let a script run far past the limit.
func (w *memWatch) check() {
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		return
	}
	live, objs := w.read()
	if !w.started {
		w.live, w.objs, w.started = live, objs, true
		w.t.Reset(memCheckEvery)
		w.mu.Unlock()
		return
	}
	collect := objs-w.objs > w.limit
	w.mu.Unlock()
	if collect {
		runtime.GC()
		live, objs = w.read()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return
	}
	if collect {
		w.objs = objs
	}
	if live-w.live > w.limit {
		w.ended = true
		w.stop(&MemoryError{Limit: w.limit})
		return
	}
	w.t.Reset(memCheckEvery)
}

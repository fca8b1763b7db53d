package script

import (
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
//   - everything else (tables, concatenation) by the Watch, which stops
//     the script at its next instruction once the process's live heap has
//     grown by more than the limit since the script's first check. The
//     heap is the whole process's, so writes of other connections during a
//     long script count too: the limit is set far above what a script
//     needs (DefaultMaxMemory), and a script stopped that way is one that
//     would have taken the node down.

// DefaultMaxMemory is the limit a node gives its scripts when configured
// with none.
const DefaultMaxMemory = 256 << 20

// memCheckEvery is the memory watch's period: a script shorter than it
// is never looked at.
const memCheckEvery = 10 * time.Millisecond

// MemoryError is the cause a watched script is stopped with.
type MemoryError struct{ Limit int64 }

func (e *MemoryError) Error() string {
	return fmt.Sprintf("the script's memory grew past the limit of %d bytes", e.Limit)
}

// Watch is what runs beside a script: the time limit (past it, the
// script is busy) and the memory watch. Both share one timer, so a run
// costs one timer however it is limited.
type Watch struct {
	limit     int64
	stop      *Stop
	start     time.Time
	busyAfter time.Duration
	busy      func()
	samples   []metrics.Sample

	mu    sync.Mutex
	t     *time.Timer
	ended bool
	// busyDone: busy was called (or there is none to call).
	busyDone bool
	// live is the live heap at the first check; objs the heap (live and
	// garbage) at the last collection this watch asked for.
	live, objs int64
	started    bool
}

// StartWatch starts watching a script run under st: busy is called once
// when it has run busyAfter (no call when busy is nil), and st is stopped
// with a *MemoryError once the heap has grown past memLimit (memory.go's
// opening comment). The caller must call Done when the script ends.
func StartWatch(st *Stop, memLimit int64, busyAfter time.Duration, busy func()) *Watch {
	w := &Watch{limit: memLimit, stop: st, start: time.Now(), busyAfter: busyAfter, busy: busy, busyDone: busy == nil}
	w.mu.Lock()
	w.t = time.AfterFunc(w.next(0), w.check)
	w.mu.Unlock()
	return w
}

// Done ends the watch; busy is not called after it returns.
func (w *Watch) Done() {
	w.mu.Lock()
	w.ended = true
	w.t.Stop()
	w.mu.Unlock()
}

// next is the wait before the next check, elapsed into the run.
func (w *Watch) next(elapsed time.Duration) time.Duration {
	d := memCheckEvery
	if elapsed < memCheckEvery {
		d = memCheckEvery - elapsed
	}
	if !w.busyDone && w.busyAfter-elapsed < d {
		d = max(w.busyAfter-elapsed, 0)
	}
	return d
}

func (w *Watch) read() (live, objs int64) {
	if w.samples == nil { // only scripts that run past memCheckEvery get here
		w.samples = []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	}
	metrics.Read(w.samples)
	return int64(w.samples[0].Value.Uint64()), int64(w.samples[1].Value.Uint64())
}

// check runs on the timer's goroutine.
func (w *Watch) check() {
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		return
	}
	elapsed := time.Since(w.start)
	if !w.busyDone && elapsed >= w.busyAfter {
		w.busyDone = true
		w.busy()
	}
	if elapsed >= memCheckEvery && w.limit > 0 {
		w.mu.Unlock()
		if w.memory() {
			return
		}
		w.mu.Lock()
		if w.ended {
			w.mu.Unlock()
			return
		}
	}
	w.t.Reset(w.next(elapsed))
	w.mu.Unlock()
}

// memory is one look at the heap; it reports whether it stopped the
// script. The live heap is only known after a collection: when the heap
// grew by the limit since the last one this watch saw, it collects
// first, so a large heap's infrequent collections do not let a script run
// far past the limit.
func (w *Watch) memory() bool {
	w.mu.Lock()
	live, objs := w.read()
	if !w.started {
		w.live, w.objs, w.started = live, objs, true
		w.mu.Unlock()
		return false
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
		return true
	}
	if collect {
		w.objs = objs
	}
	if live-w.live > w.limit {
		w.ended = true
		w.stop.Stop(&MemoryError{Limit: w.limit})
		return true
	}
	return false
}

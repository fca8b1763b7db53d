package keyspace

import (
	"sync/atomic"
	"unsafe"
)

// Watcher is one connection's WATCH (Redis's CLIENT_DIRTY_CAS): it turns
// dirty when any key it watches changes, whatever changed it — a command
// of any connection, lazy or active expiry, eviction, a flush of a key
// that existed, a RENAME away or onto it. Registrations live in the
// watched key's shard, under its lock, so a change and the registration
// are ordered like any two operations on the key. Safe for concurrent use.
type Watcher struct{ dirty atomic.Bool }

// Dirty reports whether a watched key changed since it was watched.
func (w *Watcher) Dirty() bool { return w.dirty.Load() }

// Watch registers w on key, which tx must hold. The caller looks the key
// up first (Peek), so a key already past its deadline is expired before
// it is watched and does not count as a change.
func (tx *Txn) Watch(key []byte, w *Watcher) {
	sh := tx.shard(key)
	if sh.watch == nil {
		sh.watch = map[string][]*Watcher{}
	}
	ws := sh.watch[string(key)]
	for _, o := range ws {
		if o == w {
			return
		}
	}
	sh.watch[string(key)] = append(ws, w)
	tx.db.watching.Add(1)
}

// Unwatch removes w's registration on key (taking the key's shard lock).
func (db *DB) Unwatch(key []byte, w *Watcher) {
	sh := &db.shards[db.shardOf(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ws := sh.watch[string(key)]
	for i, o := range ws {
		if o != w {
			continue
		}
		ws[i] = ws[len(ws)-1]
		ws[len(ws)-1] = nil
		if ws = ws[:len(ws)-1]; len(ws) == 0 {
			delete(sh.watch, string(key))
		} else {
			sh.watch[string(key)] = ws
		}
		db.watching.Add(-1)
		return
	}
}

// touch marks the watchers of key, changed in tx, dirty.
func (tx *Txn) touch(key []byte) {
	if sh := tx.shard(key); sh.watch != nil {
		for _, w := range sh.watch[string(key)] {
			w.dirty.Store(true)
		}
	}
}

// touchString is touch for a change made outside a Txn; key's shard lock
// is held.
func (db *DB) touchString(key string) {
	sh := &db.shards[db.shardOf(unsafe.Slice(unsafe.StringData(key), len(key)))]
	if sh.watch != nil {
		for _, w := range sh.watch[key] {
			w.dirty.Store(true)
		}
	}
}

// touchFlushed marks dirty the watchers of every key of sh that a flush
// is about to delete (as Redis, a watched key that did not exist is not
// changed by a flush); sh's lock is held.
func (db *DB) touchFlushed(sh *shard) {
	for k, ws := range sh.watch {
		if _, ok := sh.m[k]; ok {
			for _, w := range ws {
				w.dirty.Store(true)
			}
		}
	}
}

// Package keyspace is the in-memory store of one namespace: a hash table
// split into mutex-guarded shards (chosen by Redis Cluster slot), with
// per-key TTL, access metadata for eviction, lazy expiry on access,
// sampling hooks for active expiry and eviction, and incremental memory
// accounting.
//
// Commands reach keys through a Txn, which holds the locks of the shards of
// every key the command declared, so a multi-key command (MSET, RENAME,
// SINTER) is atomic with respect to other commands. A Txn must only touch
// the keys it was opened with. The command layer consumes a DB through its
// command.Keyspace interface, which a slot-owning cluster node can wrap.
//
// An Observer (Config.Observer) sees every change to every key, whatever
// made it (a command, lazy or active expiry, eviction, a flush): it is the
// write feed replication is built on.
package keyspace

import (
	"bytes"
	"iter"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/portico-io/portico/cachenode/evict"
)

// Entry is one key's value and metadata. Str holds a string value; Obj a
// list, set or hash. Entries are owned by the DB: read or change them only
// inside the Txn that returned them, and call Txn.Update after changing Obj
// or Str in place so memory accounting stays exact.
type Entry struct {
	Str      []byte
	Obj      *Object
	expireAt int64 // unix ms; 0 = no TTL
	meta     uint32
	size     uint32
}

// Kind is the value's type.
func (e *Entry) Kind() Kind {
	if e.Obj == nil {
		return KindString
	}
	return e.Obj.Kind
}

// ExpireAt is the deadline in unix ms, 0 when the key has no TTL.
func (e *Entry) ExpireAt() int64 { return e.expireAt }

// Meta is the eviction metadata (see package evict).
func (e *Entry) Meta() uint32 { return e.meta }

// Usage is a memory counter shared by every DB of a node, for the node-level
// maxmemory.
type Usage struct{ n atomic.Int64 }

// Load returns the bytes accounted.
func (u *Usage) Load() int64 { return u.n.Load() }

// Config configures a DB. Zero values take the defaults.
type Config struct {
	// Shards is the number of lock shards, rounded up to a power of two
	// (default 64, at most NumSlots).
	Shards int
	// Now returns the time in unix milliseconds (default the wall clock);
	// tests inject a clock.
	Now func() int64
	// Node is the node-wide usage counter; nil gives the DB its own.
	Node *Usage
	// Policy is the initial eviction policy (SetPolicy changes it).
	Policy evict.Policy
	// Name is the namespace the DB holds, for observers (DB.Name).
	Name string
	// Observer, when set, is told about every change (see Observer). Nil
	// costs the write path one pointer test.
	Observer Observer
}

// Observer is told about every change to a DB, after it happened and while
// the changed key's shard lock is still held (all shard locks for
// Flushed), so for any one key the calls come in the order of its changes.
// A Txn reports each key it changed once, with its final state, in End.
// key and e are valid only during the call; e may be read (not changed).
// An Observer must be fast and must not call back into the DB: it runs
// inside the write path.
type Observer interface {
	// Changed reports key's new state; e is nil when key was deleted
	// (DEL, lazy or active expiry, eviction, rename away).
	Changed(db *DB, key []byte, e *Entry)
	// Flushed reports that every key of db was deleted at once.
	Flushed(db *DB)
}

// DefaultShards is the default number of lock shards.
const DefaultShards = 64

// DB is one namespace's keyspace. It is safe for concurrent use.
type DB struct {
	shards []shard
	mask   int
	now    func() int64
	node   *Usage
	policy atomic.Uint32
	name   string
	obs    Observer

	used      atomic.Int64
	keys      atomic.Int64
	volatile  atomic.Int64
	expired   atomic.Int64
	evicted   atomic.Int64
	evictNext atomic.Uint32
	avgTTL    atomic.Int64 // ms, see AvgTTL
	watching  atomic.Int64 // registered WATCHes (watch.go): 0 skips the lookup
}

type shard struct {
	mu     sync.Mutex
	m      map[string]*Entry
	vol    map[string]struct{}   // keys with a TTL; strings share the map keys' bytes
	ledger Ledger                // nil: none; read and set under mu
	watch  map[string][]*Watcher // WATCHed keys (watch.go); under mu
	_      [16]byte              // keep hot mutexes on separate cache lines
}

// Ledger is told, key by key, every change of the bytes accounted and
// every key that expiry or eviction removed: what per-key-prefix memory
// and counters are built from. Calls run under the key's shard lock, in
// the order of the changes; key is valid only during the call. A Ledger
// must be fast and must not call back into the DB.
type Ledger interface {
	// Sized: the bytes accounted to key changed by delta (a removal
	// reports -size).
	Sized(key string, delta int64)
	// Expired and Evicted follow the Sized call of the removal.
	Expired(key string)
	Evicted(key string)
}

// SetLedger makes l (nil: none) the DB's Ledger. It changes shard by
// shard, each under its lock: l is first told every key of the shard with
// its size (Sized), then every change after. So l's sums are exact from
// the moment SetLedger returns, while writes go on.
func (db *DB) SetLedger(l Ledger) {
	for i := range db.shards {
		sh := &db.shards[i]
		sh.mu.Lock()
		if l != nil {
			for k, e := range sh.m {
				l.Sized(k, int64(e.size))
			}
		}
		sh.ledger = l
		sh.mu.Unlock()
	}
}

// New returns an empty DB.
func New(cfg Config) *DB {
	n := cfg.Shards
	if n <= 0 {
		n = DefaultShards
	}
	p := 1
	for p < n && p < NumSlots {
		p <<= 1
	}
	db := &DB{shards: make([]shard, p), mask: p - 1, now: cfg.Now, node: cfg.Node, name: cfg.Name, obs: cfg.Observer}
	if db.now == nil {
		db.now = func() int64 { return time.Now().UnixMilli() }
	}
	if db.node == nil {
		db.node = &Usage{}
	}
	for i := range db.shards {
		db.shards[i].m = map[string]*Entry{}
		db.shards[i].vol = map[string]struct{}{}
	}
	db.policy.Store(uint32(cfg.Policy))
	return db
}

// Now is the DB's clock in unix ms.
func (db *DB) Now() int64 { return db.now() }

// Name is Config.Name.
func (db *DB) Name() string { return db.name }

// changed reports a change made outside a Txn; sh's lock is held.
func (db *DB) changed(key string, e *Entry) {
	if db.watching.Load() != 0 {
		db.touchString(key)
	}
	if db.obs != nil {
		db.obs.Changed(db, unsafe.Slice(unsafe.StringData(key), len(key)), e)
	}
}

// SetPolicy changes the eviction policy (a namespace config reload). Keys
// keep their metadata; it is reinterpreted, so victims are less precise for
// a while after a switch between LRU and LFU.
func (db *DB) SetPolicy(p evict.Policy) { db.policy.Store(uint32(p)) }

// Policy is the current eviction policy.
func (db *DB) Policy() evict.Policy { return evict.Policy(db.policy.Load()) }

// Used is the bytes accounted to this DB.
func (db *DB) Used() int64 { return db.used.Load() }

// Len is the number of keys.
func (db *DB) Len() int64 { return db.keys.Load() }

// Volatile is the number of keys with a TTL.
func (db *DB) Volatile() int64 { return db.volatile.Load() }

// Expired and Evicted count keys removed by expiry and eviction.
func (db *DB) Expired() int64 { return db.expired.Load() }
func (db *DB) Evicted() int64 { return db.evicted.Load() }

// NumShards is the number of lock shards.
func (db *DB) NumShards() int { return len(db.shards) }

func (db *DB) shardOf(key []byte) int { return Slot(key) & db.mask }

// account adds delta bytes to key's shard; sh's lock is held.
func (db *DB) account(sh *shard, key string, delta int64) {
	db.used.Add(delta)
	db.node.n.Add(delta)
	if sh.ledger != nil {
		sh.ledger.Sized(key, delta)
	}
}

// expiredKey and evictedKey count a removal (already done) by expiry or
// eviction; sh's lock is held.
func (db *DB) expiredKey(sh *shard, key string) {
	db.expired.Add(1)
	if sh.ledger != nil {
		sh.ledger.Expired(key)
	}
}

func (db *DB) evictedKey(sh *shard, key string) {
	db.evicted.Add(1)
	if sh.ledger != nil {
		sh.ledger.Evicted(key)
	}
}

// Txn is a set of held shard locks plus the clock reading the command runs
// at. The zero value is ready for Begin; it must not be copied after. When
// the DB has an Observer, the key slices given to a Txn's methods must stay
// unchanged until End, which reports them.
type Txn struct {
	db    *DB
	small [4]int
	held  []int
	now   int64
	// The first declared keys and their shards, so handlers that pass the
	// same slices do not hash them again.
	known     [2]*byte
	knownLen  [2]int
	knownSlot [2]int
	nknown    int
	// Keys changed in this Txn, reported to the Observer in End (tracked
	// only when the DB has one). Inline room for the common case; more
	// spills into moreDirty, reused across Txns.
	dirty     [4][]byte
	ndirty    int
	moreDirty [][]byte
}

// Begin locks the shards of keys (in index order, so concurrent multi-key
// commands cannot deadlock). A command with no keys gets a Txn holding no
// locks, usable only for Now.
func (db *DB) Begin(tx *Txn, keys [][]byte) { db.BeginAt(tx, keys, db.now()) }

// BeginAt is Begin with the clock reading (unix ms) the caller already took.
func (db *DB) BeginAt(tx *Txn, keys [][]byte, nowMs int64) {
	tx.db = db
	tx.held = tx.small[:0]
	tx.nknown = 0
	if len(keys) > len(db.shards)/2 {
		for i := range db.shards {
			tx.held = append(tx.held, i)
		}
	} else {
		for _, k := range keys {
			s := db.shardOf(k)
			if tx.nknown < len(tx.known) && len(k) > 0 {
				tx.known[tx.nknown], tx.knownLen[tx.nknown], tx.knownSlot[tx.nknown] = unsafe.SliceData(k), len(k), s
				tx.nknown++
			}
			dup := false
			for _, h := range tx.held {
				if h == s {
					dup = true
					break
				}
			}
			if !dup {
				tx.held = append(tx.held, s)
			}
		}
		if len(tx.held) > 1 {
			sort.Ints(tx.held)
		}
	}
	for _, s := range tx.held {
		db.shards[s].mu.Lock()
	}
	tx.now = nowMs
}

// End reports the changed keys to the DB's Observer and releases the locks.
func (tx *Txn) End() {
	if tx.ndirty > 0 {
		tx.report()
	}
	for i := len(tx.held) - 1; i >= 0; i-- {
		tx.db.shards[tx.held[i]].mu.Unlock()
	}
	tx.held = nil
}

// Now is the command's clock reading in unix ms.
func (tx *Txn) Now() int64 { return tx.now }

// mark records that key changed, for End to report. The keys a Txn is
// given must stay unchanged until End (they alias the command's args).
func (tx *Txn) mark(key []byte) {
	if tx.db.obs != nil {
		tx.addDirty(key)
	}
	if tx.db.watching.Load() != 0 {
		tx.touch(key)
	}
}

// addDirty is kept out of line so that mark inlines into every mutation
// and costs one pointer test without an Observer.
//
//go:noinline
func (tx *Txn) addDirty(key []byte) {
	n := min(tx.ndirty, len(tx.dirty))
	for _, k := range tx.dirty[:n] {
		if bytes.Equal(k, key) {
			return
		}
	}
	if tx.ndirty < len(tx.dirty) {
		tx.dirty[tx.ndirty] = key
		tx.ndirty++
		return
	}
	for _, k := range tx.moreDirty {
		if bytes.Equal(k, key) {
			return
		}
	}
	tx.moreDirty = append(tx.moreDirty, key)
	tx.ndirty++
}

// report tells the Observer each dirty key's final state; the locks are
// still held.
func (tx *Txn) report() {
	db := tx.db
	one := func(key []byte) {
		db.obs.Changed(db, key, tx.shard(key).m[string(key)])
	}
	for _, k := range tx.dirty[:min(tx.ndirty, len(tx.dirty))] {
		one(k)
	}
	for _, k := range tx.moreDirty {
		one(k)
	}
	clear(tx.dirty[:])
	clear(tx.moreDirty)
	tx.moreDirty = tx.moreDirty[:0]
	tx.ndirty = 0
}

func (tx *Txn) shard(key []byte) *shard {
	if len(key) > 0 {
		p := unsafe.SliceData(key)
		for i := 0; i < tx.nknown; i++ {
			if tx.known[i] == p && tx.knownLen[i] == len(key) {
				return &tx.db.shards[tx.knownSlot[i]]
			}
		}
	}
	return &tx.db.shards[tx.db.shardOf(key)]
}

// Get returns the live entry for key, or nil. An expired entry is deleted
// (lazy expiry). The access updates the eviction metadata.
func (tx *Txn) Get(key []byte) *Entry {
	e := tx.Peek(key)
	if e != nil {
		e.meta = evict.Touch(tx.db.Policy(), e.meta, tx.now)
	}
	return e
}

// Peek is Get without touching the eviction metadata.
func (tx *Txn) Peek(key []byte) *Entry {
	sh := tx.shard(key)
	e := sh.m[string(key)]
	if e == nil {
		return nil
	}
	if e.expireAt != 0 && e.expireAt <= tx.now {
		k := unsafe.String(unsafe.SliceData(key), len(key))
		tx.db.remove(sh, k, e)
		tx.db.expiredKey(sh, k)
		tx.mark(key)
		return nil
	}
	return e
}

func (db *DB) remove(sh *shard, key string, e *Entry) {
	delete(sh.m, key)
	if e.expireAt != 0 {
		delete(sh.vol, key)
		db.volatile.Add(-1)
	}
	db.keys.Add(-1)
	db.account(sh, key, -int64(e.size))
}

func entrySize(klen int, e *Entry) uint32 {
	over := EntryOverhead
	if inlineAt(e, klen) {
		over = blockOverhead // key and value are the block's room
	}
	n := int64(over + klen + cap(e.Str))
	if e.Obj != nil {
		n += e.Obj.Bytes()
	}
	return uint32(min(n, 1<<32-1))
}

// SetString stores a copy of val at key with the given deadline (0 = none),
// replacing any value of any type. It returns the entry.
func (tx *Txn) SetString(key, val []byte, expireAt int64) *Entry {
	sh := tx.shard(key)
	return tx.setString(sh, key, sh.m[string(key)], val, expireAt)
}

// SetStringOver is SetString for a caller that has just looked key up:
// cur MUST be what Get or Peek returned for key in this Txn (nil when the
// key is absent). It saves SET its second map lookup.
func (tx *Txn) SetStringOver(key []byte, cur *Entry, val []byte, expireAt int64) *Entry {
	return tx.setString(tx.shard(key), key, cur, val, expireAt)
}

func (tx *Txn) setString(sh *shard, key []byte, e *Entry, val []byte, expireAt int64) *Entry {
	if e == nil {
		e, k := newEntry(key, val, true)
		return tx.insert(sh, k, e, expireAt)
	}
	e = tx.putString(sh, key, e, val)
	tx.replaced(sh, key, e, expireAt)
	return e
}

// putString makes a copy of val e's value, in place when it fits (e's
// own room, or a separate buffer not more than about twice too large),
// else in a new entry that replaces e under key. It returns the entry now
// at key; the caller accounts for it (Update).
func (tx *Txn) putString(sh *shard, key []byte, e *Entry, val []byte) *Entry {
	if in := inline(e, key); len(val) <= cap(e.Str) && (in || cap(e.Str) <= 2*len(val)+16) {
		e.Str, e.Obj = append(e.Str[:0], val...), nil
		return e
	}
	ne, k := newEntry(key, val, true)
	return tx.rekey(sh, e, ne, k)
}

// rekey puts ne in e's place under the same key (k, ne's own copy of it),
// with e's TTL and metadata; e's size stays with ne until the caller's
// Update re-accounts it.
func (tx *Txn) rekey(sh *shard, e, ne *Entry, k string) *Entry {
	ne.expireAt, ne.meta, ne.size = e.expireAt, e.meta, e.size
	sh.m[k] = ne // an assignment stores the new key string too
	if ne.expireAt != 0 {
		sh.vol[k] = struct{}{}
	}
	return ne
}

// Rewrite makes val key's string value, keeping its TTL and eviction
// metadata (INCR, INCRBYFLOAT), and returns the entry now at key: e may
// have been replaced. e must be key's live string entry in this Txn.
func (tx *Txn) Rewrite(key []byte, e *Entry, val []byte) *Entry {
	e = tx.putString(tx.shard(key), key, e, val)
	tx.Update(key, e)
	return e
}

// Append appends add to key's string value, keeping its TTL and eviction
// metadata (APPEND), and returns the entry now at key. e must be key's
// live string entry in this Txn.
func (tx *Txn) Append(key []byte, e *Entry, add []byte) *Entry {
	if len(add) <= cap(e.Str)-len(e.Str) || !inline(e, key) {
		e.Str = append(e.Str, add...) // a separate buffer grows as append does
	} else {
		v := make([]byte, 0, len(e.Str)+len(add))
		v = append(append(v, e.Str...), add...)
		ne, k := newEntry(key, v, true)
		e = tx.rekey(tx.shard(key), e, ne, k)
	}
	tx.Update(key, e)
	return e
}

// SetObject stores obj at key, replacing any value.
func (tx *Txn) SetObject(key []byte, obj *Object, expireAt int64) *Entry {
	sh := tx.shard(key)
	e := sh.m[string(key)]
	if e == nil {
		e, k := newEntry(key, nil, false)
		e.Obj = obj
		return tx.insert(sh, k, e, expireAt)
	}
	if inline(e, key) { // give back the string's room
		ne, k := newEntry(key, nil, false)
		e = tx.rekey(sh, e, ne, k)
	}
	e.Str, e.Obj = nil, obj
	tx.replaced(sh, key, e, expireAt)
	return e
}

// insert adds e at k: the map's key, which newEntry made or a copy of the
// caller's bytes.
func (tx *Txn) insert(sh *shard, k string, e *Entry, expireAt int64) *Entry {
	e.meta = evict.Init(tx.db.Policy(), tx.now)
	e.size = entrySize(len(k), e)
	e.expireAt = expireAt
	sh.m[k] = e
	if expireAt != 0 {
		sh.vol[k] = struct{}{}
		tx.db.volatile.Add(1)
	}
	tx.db.keys.Add(1)
	tx.db.account(sh, k, int64(e.size))
	tx.mark(unsafe.Slice(unsafe.StringData(k), len(k)))
	return e
}

func (tx *Txn) replaced(sh *shard, key []byte, e *Entry, expireAt int64) {
	e.meta = evict.Init(tx.db.Policy(), tx.now)
	tx.setExpire(sh, key, e, expireAt)
	tx.Update(key, e)
}

// Update re-accounts e's size after an in-place change and deletes the key
// when it holds an empty list, set or hash (Redis never keeps those).
func (tx *Txn) Update(key []byte, e *Entry) {
	if e.Obj != nil && e.Obj.Len() == 0 {
		tx.Delete(key)
		return
	}
	n := entrySize(len(key), e)
	tx.db.account(tx.shard(key), unsafe.String(unsafe.SliceData(key), len(key)), int64(n)-int64(e.size))
	e.size = n
	tx.mark(key)
}

// SetMeta overwrites e's eviction metadata (RESTORE's IDLETIME and FREQ);
// meta is in package evict's layout for the DB's policy.
func (tx *Txn) SetMeta(e *Entry, meta uint32) { e.meta = meta }

// SetExpire changes key's deadline (0 = persist).
func (tx *Txn) SetExpire(key []byte, e *Entry, expireAt int64) {
	tx.setExpire(tx.shard(key), key, e, expireAt)
	tx.mark(key)
}

func (tx *Txn) setExpire(sh *shard, key []byte, e *Entry, expireAt int64) {
	switch {
	case e.expireAt == 0 && expireAt != 0:
		sh.vol[storedKey(e, key)] = struct{}{}
		tx.db.volatile.Add(1)
	case e.expireAt != 0 && expireAt == 0:
		delete(sh.vol, string(key))
		tx.db.volatile.Add(-1)
	}
	e.expireAt = expireAt
}

// Delete removes key; it reports whether a live key was removed.
func (tx *Txn) Delete(key []byte) bool {
	if tx.Peek(key) == nil {
		return false
	}
	sh := tx.shard(key)
	tx.db.remove(sh, string(key), sh.m[string(key)])
	tx.mark(key)
	return true
}

// Rename moves src's entry to dst (both locked by this Txn), replacing dst.
func (tx *Txn) Rename(src, dst []byte, e *Entry) {
	if string(src) == string(dst) {
		return
	}
	tx.Delete(dst)
	sh := tx.shard(src)
	tx.db.remove(sh, string(src), e)
	tx.mark(src)
	// A new entry for dst: e's block holds src's bytes as its key.
	ne, k := newEntry(dst, e.Str, e.Obj == nil)
	ne.Obj = e.Obj
	tx.insert(tx.shard(dst), k, ne, e.expireAt)
	ne.meta = e.meta
}

// Scan visits live keys from cursor on, at least count of them unless the
// end is reached, and returns the next cursor (0 = done). The cursor is a shard index; each call returns
// whole shards, so a key present for the whole scan is returned at least
// once (and COUNT is a hint, as in Redis).
func (db *DB) Scan(cursor uint64, count int, fn func(key string, e *Entry)) uint64 {
	now := db.now()
	seen := 0
	i := int(cursor)
	for ; i < len(db.shards) && seen < count; i++ {
		sh := &db.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.expireAt != 0 && e.expireAt <= now {
				db.remove(sh, k, e)
				db.expiredKey(sh, k)
				db.changed(k, nil)
				continue
			}
			fn(k, e)
			seen++
		}
		sh.mu.Unlock()
	}
	if i >= len(db.shards) {
		return 0
	}
	return uint64(i)
}

// ScanSlot visits the live keys of hash slot slot. Keys of a slot live in
// one shard, so it costs one pass over that shard (about Len/NumShards
// keys) under its lock; fn must not call back into db.
func (db *DB) ScanSlot(slot int, fn func(key string, e *Entry)) {
	now := db.now()
	sh := &db.shards[slot&db.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for k, e := range sh.m {
		if Slot(unsafe.Slice(unsafe.StringData(k), len(k))) != slot {
			continue
		}
		if e.expireAt != 0 && e.expireAt <= now {
			db.remove(sh, k, e)
			db.expiredKey(sh, k)
			db.changed(k, nil)
			continue
		}
		fn(k, e)
	}
}

// ViewShard runs fn with lock shard i held; entries yields the shard's
// live keys (expired ones are skipped, not removed). fn must not call back
// into db. It is what a consistent snapshot is built from: with an
// Observer that numbers changes, whatever the Observer saw for shard i
// before fn ran is in entries, and nothing after.
func (db *DB) ViewShard(i int, fn func(entries iter.Seq2[string, *Entry])) {
	sh := &db.shards[i&db.mask]
	now := db.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	fn(func(yield func(string, *Entry) bool) {
		for k, e := range sh.m {
			if e.expireAt != 0 && e.expireAt <= now {
				continue
			}
			if !yield(k, e) {
				return
			}
		}
	})
}

// Flush deletes every key. With an Observer it holds every shard lock at
// once, so the flush is one point in the change order; without one it
// clears a shard at a time.
func (db *DB) Flush() {
	if db.obs != nil {
		for i := range db.shards {
			db.shards[i].mu.Lock()
		}
		for i := range db.shards {
			db.clearShard(&db.shards[i])
		}
		db.obs.Flushed(db)
		for i := len(db.shards) - 1; i >= 0; i-- {
			db.shards[i].mu.Unlock()
		}
		return
	}
	for i := range db.shards {
		sh := &db.shards[i]
		sh.mu.Lock()
		db.clearShard(sh)
		sh.mu.Unlock()
	}
}

func (db *DB) clearShard(sh *shard) {
	db.touchFlushed(sh)
	var freed int64
	for k, e := range sh.m {
		freed += int64(e.size)
		if sh.ledger != nil {
			sh.ledger.Sized(k, -int64(e.size))
		}
	}
	db.keys.Add(-int64(len(sh.m)))
	db.volatile.Add(-int64(len(sh.vol)))
	sh.m = map[string]*Entry{}
	sh.vol = map[string]struct{}{}
	db.used.Add(-freed)
	db.node.n.Add(-freed)
}

// ExpireSample looks at up to n keys with a TTL in shard i and deletes the
// expired ones. It is the unit of work of the active expiry cycle.
func (db *DB) ExpireSample(i, n int) (sampled, expired int) {
	sh := &db.shards[i&db.mask]
	now := db.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var ttlSum, ttlN int64
	for k := range sh.vol {
		if sampled == n {
			break
		}
		sampled++
		e := sh.m[k]
		if e.expireAt > now {
			ttlSum += e.expireAt - now
			ttlN++
		} else {
			db.remove(sh, k, e)
			db.changed(k, nil)
			if sh.ledger != nil {
				sh.ledger.Expired(k)
			}
			expired++
		}
	}
	if ttlN > 0 {
		db.sampledTTL(ttlSum / ttlN)
	}
	db.expired.Add(int64(expired))
	return sampled, expired
}

// sampledTTL folds the mean remaining TTL of one expiry sample into
// AvgTTL, as Redis does: each sample weighs 1/50.
func (db *DB) sampledTTL(ms int64) {
	for {
		old := db.avgTTL.Load()
		next := ms
		if old != 0 {
			next = old/50*49 + ms/50
		}
		if db.avgTTL.CompareAndSwap(old, next) {
			return
		}
	}
}

// AvgTTL estimates the mean remaining TTL in ms of the keys that have one
// (INFO keyspace's avg_ttl), from the active expiry cycle's samples; 0
// when no key has a TTL or none was sampled yet.
func (db *DB) AvgTTL() int64 {
	if db.volatile.Load() == 0 {
		return 0
	}
	return db.avgTTL.Load()
}

// evictProbes is how many shards one eviction samples: more shards make
// the victim closer to the true LRU/LFU/TTL choice at the price of more
// lock acquisitions (Redis gets the same effect from its eviction pool).
const evictProbes = 3

// EvictOne samples up to samples candidate keys in each of a few random
// non-empty shards (only keys with a TTL under volatile policies) and
// deletes the one the policy ranks highest. It returns the bytes freed, or
// ok=false when there is nothing the policy may evict.
func (db *DB) EvictOne(samples int) (freed int64, ok bool) {
	p := db.Policy()
	if !p.Evicts() {
		return 0, false
	}
	now := db.now()
	var (
		victim  string
		ve      *Entry
		vshard  = -1
		best    uint64
		visited int
	)
	start := int(db.evictNext.Add(1)) + rand.IntN(len(db.shards))
	for probe := 0; probe < len(db.shards) && visited < evictProbes; probe++ {
		i := (start + probe*7919) & db.mask // a stride co-prime with the power-of-two shard count
		sh := &db.shards[i]
		sh.mu.Lock()
		n := 0
		consider := func(k string, e *Entry) {
			s := evict.Score(p, e.meta, e.expireAt, now)
			if e.expireAt != 0 && e.expireAt <= now {
				s = ^uint64(0) // already dead: always the best victim
			}
			if ve == nil || s > best {
				victim, ve, vshard, best = k, e, i, s
			}
		}
		if p.VolatileOnly() {
			for k := range sh.vol {
				consider(k, sh.m[k])
				if n++; n == samples {
					break
				}
			}
		} else {
			for k, e := range sh.m {
				consider(k, e)
				if n++; n == samples {
					break
				}
			}
		}
		sh.mu.Unlock()
		if n > 0 {
			visited++
		}
	}
	if ve == nil {
		return 0, false
	}
	sh := &db.shards[vshard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m[victim] != ve { // changed since sampled: let the caller try again
		return 0, true
	}
	freed = int64(ve.size)
	db.remove(sh, victim, ve)
	db.evictedKey(sh, victim)
	db.changed(victim, nil)
	return freed, true
}

// NodeUsage returns the node-wide counter this DB reports into.
func (db *DB) NodeUsage() *Usage { return db.node }

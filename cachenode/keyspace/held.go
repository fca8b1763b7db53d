package keyspace

import "unsafe"

// What a transaction or a script needs from a DB on top of a command's
// Txn: one Txn held across many commands, over every shard (a script may
// touch keys it did not declare) or over shards added as keys turn up, and
// the whole-keyspace operations (SCAN, KEYS, FLUSHDB) run under locks the
// Txn already holds, since the DB's own Scan and Flush would lock them a
// second time.

// BeginAll locks every shard into tx, in index order.
func (db *DB) BeginAll(tx *Txn, nowMs int64) {
	tx.db = db
	tx.held = tx.small[:0]
	tx.nknown = 0
	for i := range db.shards {
		tx.held = append(tx.held, i)
		db.shards[i].mu.Lock()
	}
	tx.now = nowMs
}

// HoldsAll reports whether tx holds every shard of its DB.
func (tx *Txn) HoldsAll() bool { return tx.db != nil && len(tx.held) == len(tx.db.shards) }

// Holds reports whether tx holds key's shard.
func (tx *Txn) Holds(key []byte) bool {
	s := tx.db.shardOf(key)
	for _, h := range tx.held {
		if h == s {
			return true
		}
	}
	return false
}

// Held reports whether tx holds any lock (Begin without keys holds none).
func (tx *Txn) Held() bool { return len(tx.held) > 0 }

// Extend locks key's shard into tx, which MUST hold no lock yet (a script
// that declared no keys, at its first key): locking more than one shard
// in any order but the index order could deadlock.
func (tx *Txn) Extend(key []byte) {
	if len(tx.held) > 0 {
		panic("keyspace: Extend on a Txn holding locks")
	}
	s := tx.db.shardOf(key)
	tx.held = append(tx.small[:0], s)
	tx.db.shards[s].mu.Lock()
}

// ScanHeld is DB.Scan for a tx holding every shard (HoldsAll).
func (tx *Txn) ScanHeld(cursor uint64, count int, fn func(key string, e *Entry)) uint64 {
	db := tx.db
	seen := 0
	i := int(cursor)
	for ; i < len(db.shards) && seen < count; i++ {
		sh := &db.shards[i]
		for k, e := range sh.m {
			if e.expireAt != 0 && e.expireAt <= tx.now {
				db.remove(sh, k, e)
				db.expiredKey(sh, k)
				db.changed(k, nil)
				continue
			}
			fn(k, e)
			seen++
		}
	}
	if i >= len(db.shards) {
		return 0
	}
	return uint64(i)
}

// ScanSlotHeld is DB.ScanSlot for a tx holding the slot's shard.
func (tx *Txn) ScanSlotHeld(slot int, fn func(key string, e *Entry)) {
	db := tx.db
	sh := &db.shards[slot&db.mask]
	for k, e := range sh.m {
		if Slot(unsafe.Slice(unsafe.StringData(k), len(k))) != slot {
			continue
		}
		if e.expireAt != 0 && e.expireAt <= tx.now {
			db.remove(sh, k, e)
			db.expiredKey(sh, k)
			db.changed(k, nil)
			continue
		}
		fn(k, e)
	}
}

// HoldsSlot reports whether tx holds the shard of hash slot slot.
func (tx *Txn) HoldsSlot(slot int) bool {
	s := slot & tx.db.mask
	for _, h := range tx.held {
		if h == s {
			return true
		}
	}
	return false
}

// FlushHeld is DB.Flush for a tx holding every shard (HoldsAll). Keys the
// tx changed before are still reported by End, as deleted.
func (tx *Txn) FlushHeld() {
	db := tx.db
	for i := range db.shards {
		db.clearShard(&db.shards[i])
	}
	if db.obs != nil {
		db.obs.Flushed(db)
	}
}

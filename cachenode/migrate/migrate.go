// Package migrate moves hash slots between cache nodes while both keep
// serving. The slot map (package cluster) says which slot moves where and
// in which state; a node's Mover copies the keys of every slot it is
// migrating out, in batches, to the target's bus port, and deletes each
// batch locally once the target has applied it. Import is the target's
// side. Ownership changes only through the published map: the mover never
// decides it, it reports Done and the publisher (cachectl) commits.
//
// A batch is copied and deleted under the lock of the slot's shard (all of
// a slot's keys live in one shard), so a command on those keys runs either
// before the batch, on the source, or after it, redirected with ASK to the
// target: never against a half-moved key. The price is that commands on
// that shard wait for one round trip to the target per batch, as Redis's
// MIGRATE blocks its whole server for the transfer.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/dump"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/slots"
)

// Defaults.
const (
	DefaultBatchKeys   = 128
	DefaultBatchBytes  = 1 << 20
	DefaultKeysPerSec  = 20000
	DefaultSendTimeout = 2 * time.Second
)

// Sender delivers one batch of dump records to the node at busAddr and
// returns once that node has applied all of them (or failed).
type Sender func(ctx context.Context, busAddr string, batch []byte) error

// Config configures a Mover.
type Config struct {
	State    *cluster.State
	Registry *namespace.Registry
	Send     Sender
	// BatchKeys and BatchBytes bound one batch (defaults 128 keys, 1 MiB;
	// a single larger value goes alone).
	BatchKeys  int
	BatchBytes int
	// KeysPerSecond limits the copy rate of the node's migrations
	// (default 20,000; the source keeps serving in between).
	KeysPerSecond float64
	// SendTimeout bounds one batch's round trip, during which the slot's
	// shard is locked (default 2 s).
	SendTimeout time.Duration
	// Poll is how often the mover looks for work (default 50 ms); a map
	// change is seen at the next poll.
	Poll       time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// OnPass, when set, is called after every poll with what it saw and
	// did: the signal a test waits for before asserting that the mover
	// did nothing (or forgot a slot) on a map. It runs on the Mover's
	// goroutine and must not block. Nil in production.
	OnPass func(Pass)
}

// Pass is what one poll of a Mover saw and did (Config.OnPass).
type Pass struct {
	// Epoch is the epoch of the map the poll worked from.
	Epoch uint64
	// Slots are the slots that map has this node migrate out.
	Slots []int
	// Moved is how many keys the poll copied out and deleted here.
	Moved int
}

// SlotStatus is one slot this node migrates out (CACHE MIGRATIONS).
type SlotStatus = cluster.MoveStatus

// Mover copies out the slots the current map says this node migrates.
type Mover struct {
	cfg  Config
	log  *slog.Logger
	next time.Time // pacing: when the next batch may start

	mu     sync.Mutex
	status map[int]*SlotStatus

	moved   prometheus.Counter
	batches *prometheus.CounterVec
	done    prometheus.Counter
}

// New returns a Mover.
func New(cfg Config) (*Mover, error) {
	if cfg.State == nil || cfg.Registry == nil || cfg.Send == nil {
		return nil, errors.New("migrate: State, Registry and Send are required")
	}
	if cfg.BatchKeys <= 0 {
		cfg.BatchKeys = DefaultBatchKeys
	}
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = DefaultBatchBytes
	}
	if cfg.KeysPerSecond <= 0 {
		cfg.KeysPerSecond = DefaultKeysPerSec
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = DefaultSendTimeout
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 50 * time.Millisecond
	}
	mv := &Mover{cfg: cfg, status: map[int]*SlotStatus{}, log: cfg.Logger,
		moved: prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_cachenode_migrate_keys_total",
			Help: "Keys copied to another node and deleted here by slot migration."}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_cachenode_migrate_batches_total",
			Help: "Migration batches sent, by result (ok, error)."}, []string{"result"}),
		done: prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_cachenode_migrate_slots_done_total",
			Help: "Slots this node emptied for a migration."}),
	}
	if mv.log == nil {
		mv.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{mv.moved, mv.batches, mv.done} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return mv, nil
}

// Status lists the slots this node is migrating out, by slot.
func (mv *Mover) Status() []SlotStatus {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	out := make([]SlotStatus, 0, len(mv.status))
	for _, s := range mv.status {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slot < out[j].Slot })
	return out
}

// Run works until ctx is done.
func (mv *Mover) Run(ctx context.Context) error {
	t := time.NewTicker(mv.cfg.Poll)
	defer t.Stop()
	for {
		m := mv.cfg.State.Load()
		work := mv.outgoing(m)
		p := Pass{Epoch: m.Epoch}
		for _, mg := range work {
			if ctx.Err() != nil {
				return nil
			}
			p.Slots = append(p.Slots, mg.Slot)
			p.Moved += mv.moveSlot(ctx, m, mg)
		}
		if mv.cfg.OnPass != nil {
			mv.cfg.OnPass(p)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// outgoing lists this node's migrating slots and forgets the status of
// slots no longer migrating.
func (mv *Mover) outgoing(m *cluster.Map) []cluster.Migration {
	var out []cluster.Migration
	keep := map[int]bool{}
	for _, mg := range m.Migrations {
		if mg.From == m.Self && mg.State == cluster.Migrating {
			out = append(out, mg)
			keep[mg.Slot] = true
		}
	}
	mv.mu.Lock()
	for slot := range mv.status {
		if !keep[slot] {
			delete(mv.status, slot)
		}
	}
	for _, mg := range out {
		if s := mv.status[mg.Slot]; s == nil || s.To != m.Nodes[mg.To].ID {
			mv.status[mg.Slot] = &SlotStatus{Slot: mg.Slot, To: m.Nodes[mg.To].ID, Epoch: m.Epoch}
		}
	}
	mv.mu.Unlock()
	return out
}

func (mv *Mover) update(slot int, f func(*SlotStatus)) {
	mv.mu.Lock()
	if s := mv.status[slot]; s != nil {
		f(s)
	}
	mv.mu.Unlock()
}

// stillMigrating reports whether the current map still migrates slot to
// the same node: a batch is sent only then.
func (mv *Mover) stillMigrating(slot int, to string) bool {
	m := mv.cfg.State.Load()
	mg := m.Migration(slot)
	return mg != nil && mg.State == cluster.Migrating && mg.From == m.Self && m.Nodes[mg.To].ID == to
}

// moveSlot copies out every key of the slot, in every namespace, until a
// pass finds none; a failure is recorded and retried at the next poll. It
// returns how many keys it moved.
func (mv *Mover) moveSlot(ctx context.Context, m *cluster.Map, mg cluster.Migration) (total int) {
	to := m.Nodes[mg.To]
	for {
		moved := 0
		for _, ns := range mv.cfg.Registry.All() {
			for {
				if !mv.stillMigrating(mg.Slot, to.ID) {
					return total
				}
				n, err := mv.batch(ctx, ns, mg.Slot, to.BusAddr())
				if err != nil {
					if ctx.Err() == nil {
						mv.batches.WithLabelValues("error").Inc()
						mv.log.Warn("slot migration batch failed; retrying", "slot", mg.Slot, "to", to.ID, "namespace", ns.Name, "err", err)
						mv.update(mg.Slot, func(s *SlotStatus) { s.Err = err.Error() })
					}
					return total
				}
				if n == 0 {
					break
				}
				moved += n
				total += n
				mv.batches.WithLabelValues("ok").Inc()
				mv.moved.Add(float64(n))
				mv.update(mg.Slot, func(s *SlotStatus) { s.Moved += int64(n); s.Err = "" })
			}
		}
		if moved == 0 {
			var first bool
			mv.update(mg.Slot, func(s *SlotStatus) { first = !s.Done; s.Done = true })
			if first {
				mv.done.Inc()
				mv.log.Info("slot emptied for migration", "slot", mg.Slot, "to", to.ID, "epoch", m.Epoch)
			}
			return total
		}
	}
}

// batch sends up to one batch of the slot's keys in ns and deletes them
// here once the target applied them. It returns how many keys it moved.
func (mv *Mover) batch(ctx context.Context, ns *namespace.Namespace, slot int, busAddr string) (int, error) {
	db := ns.DB
	var keys [][]byte
	db.ScanSlot(slot, func(k string, _ *keyspace.Entry) {
		if len(keys) < mv.cfg.BatchKeys {
			keys = append(keys, []byte(k))
		}
	})
	if len(keys) == 0 {
		return 0, nil
	}
	if err := mv.pace(ctx); err != nil {
		return 0, err
	}
	var tx keyspace.Txn
	db.Begin(&tx, keys)
	defer tx.End()
	var buf []byte
	var sent [][]byte
	for _, k := range keys {
		e := tx.Peek(k)
		if e == nil { // deleted or expired since the scan
			continue
		}
		if len(sent) > 0 && len(buf) >= mv.cfg.BatchBytes {
			break
		}
		buf = dump.AppendRecord(buf, dump.OpSet, ns.Name, k, e)
		sent = append(sent, k)
	}
	if len(sent) == 0 {
		return 0, nil
	}
	sctx, cancel := context.WithTimeout(ctx, mv.cfg.SendTimeout)
	defer cancel()
	if err := mv.cfg.Send(sctx, busAddr, buf); err != nil {
		return 0, err
	}
	for _, k := range sent {
		tx.Delete(k)
	}
	mv.next = time.Now().Add(time.Duration(float64(len(sent)) / mv.cfg.KeysPerSecond * float64(time.Second)))
	return len(sent), nil
}

// pace waits until the rate allows the next batch: after n keys, the next
// batch waits n/KeysPerSecond.
func (mv *Mover) pace(ctx context.Context) error {
	d := time.Until(mv.next)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ErrNotImporting: a record's slot is not moving into this node.
var ErrNotImporting = errors.New("migrate: slot not importing here")

// Import applies a batch of records sent by a Mover, after checking that
// every record's slot is importing into this node in the current map (a
// stale or misdirected sender changes nothing). A batch is applied whole
// or, on a check failure, not at all. stored, when set, is called with
// each key applied, once its locks are released: the node serves the
// clients blocked on it (one that came with ASKING), as Redis's RESTORE
// does on the target of a MIGRATE.
func Import(st *cluster.State, reg *namespace.Registry, batch []byte, nowMs int64, stored func(ns string, key []byte)) (int, error) {
	m := st.Load()
	var recs []dump.Record
	for len(batch) > 0 {
		r, n, err := dump.ReadRecord(batch)
		if err != nil {
			return 0, err
		}
		batch = batch[n:]
		if r.Op == dump.OpFlush {
			return 0, fmt.Errorf("migrate: a flush record in an import batch")
		}
		slot := slots.Of(r.Key)
		mg := m.Migration(slot)
		if mg == nil || mg.To != m.Self || mg.State == cluster.Handoff {
			return 0, fmt.Errorf("%w: slot %d (map epoch %d)", ErrNotImporting, slot, m.Epoch)
		}
		if _, err := reg.Get(r.NS); err != nil {
			return 0, fmt.Errorf("migrate: namespace %q: %w", r.NS, err)
		}
		recs = append(recs, r)
	}
	for i := range recs {
		if err := dump.Apply(reg, &recs[i], nowMs); err != nil {
			return i, err
		}
		if stored != nil && recs[i].Op == dump.OpSet {
			stored(recs[i].NS, recs[i].Key)
		}
	}
	return len(recs), nil
}

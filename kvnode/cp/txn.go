package cp

import (
	"bytes"
	"context"
	"fmt"
	"time"
)

// Limits of a transaction.
const (
	MaxTxnCompares = 64
	MaxTxnOps      = 64
)

// Compare is one condition of a transaction: the key's revision equals
// Revision (0 = absent) and, when Value is set, its value equals *Value.
type Compare struct {
	Keyspace string  `json:"keyspace"`
	Key      string  `json:"key"`
	Revision *uint64 `json:"revision,omitempty"`
	Value    *[]byte `json:"value,omitempty"`
}

// TxnOp is one write of a transaction.
type TxnOp struct {
	Op       Op     `json:"op"` // OpPut or OpDelete
	Keyspace string `json:"keyspace"`
	Key      string `json:"key"`
	Value    []byte `json:"value,omitempty"`
}

// TxnConflictError: compares at these indexes failed; Current holds every
// compared key's revision at that point (0 = absent). Nothing was written.
type TxnConflictError struct {
	Failed  []int
	Current []uint64
}

func (e *TxnConflictError) Error() string {
	return fmt.Sprintf("cp: transaction compares %v failed (current revisions %v)", e.Failed, e.Current)
}

func (e *TxnConflictError) Unwrap() error { return ErrConflict }

// applyTxn runs under f.mu: every compare holds, then every op applies at
// index, or nothing changes.
func (f *fsm) applyTxn(c command, index uint64) applyResult {
	cur := make([]uint64, len(c.Compares))
	var failed []int
	for i, cmp := range c.Compares {
		e := f.kv[storeKey(cmp.Keyspace, cmp.Key)]
		cur[i] = e.Revision
		ok := cmp.Revision == nil || *cmp.Revision == e.Revision
		if cmp.Value != nil && (e.Revision == 0 || !bytes.Equal(*cmp.Value, e.Value)) {
			ok = false
		}
		if !ok {
			failed = append(failed, i)
		}
	}
	if len(failed) > 0 {
		return applyResult{Revision: index, Err: &TxnConflictError{Failed: failed, Current: cur}}
	}
	for _, op := range c.Ops {
		k := storeKey(op.Keyspace, op.Key)
		if op.Op == OpDelete {
			f.del(k, index)
		} else {
			f.set(k, Entry{Value: op.Value, Revision: index})
		}
	}
	return applyResult{Revision: index}
}

// Txn applies ops atomically if every compare holds (*TxnConflictError
// otherwise); it returns the revision the transaction was applied at.
// Keyspaces and keys are validated by the caller.
func (g *Group) Txn(ctx context.Context, compares []Compare, ops []TxnOp) (_ uint64, err error) {
	defer g.metrics.observe(opTxn, time.Now(), &err)
	if len(compares) > MaxTxnCompares || len(ops) > MaxTxnOps {
		return 0, fmt.Errorf("cp: transaction of %d compares and %d ops, at most %d and %d", len(compares), len(ops), MaxTxnCompares, MaxTxnOps)
	}
	for _, op := range ops {
		if op.Op != OpPut && op.Op != OpDelete {
			return 0, fmt.Errorf("cp: transaction op %q (put or delete)", op.Op)
		}
	}
	res, err := g.apply(ctx, command{Op: OpTxn, Compares: compares, Ops: ops})
	if err != nil {
		return 0, err
	}
	return res.Revision, res.Err
}
